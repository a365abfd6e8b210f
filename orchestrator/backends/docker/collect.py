"""What the docker backend gathers from its containers when a run ends:
each container's final state (exit code, OOM; for an identity packed on a
host, whose network namespace it ran in) next to its log, a foreign
node's container log (its stdout is its trace: nodes/<node>/stdout.ndjson;
its stderr goes to node-logs/<node>.log), and the memory and CPU each
container used (cgroup figures, for the fidelity section). Kept apart from
the backend so that the backend stays about starting and churning nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.backends.docker import nodedir
from orchestrator.dockerapi.client import cgroup_cpu_seconds, cgroup_memory
from orchestrator.dockerapi.names import LABEL_NODE, LABEL_TESTBED, PARALLEL
from orchestrator.fanout import fan_out
from orchestrator.routers.foreign_nodes import PARAMS, STDOUT

CPU_SOURCE = "cgroup cpuacct of each container"
STATE_KEYS = ("Status", "ExitCode", "OOMKilled", "StartedAt", "FinishedAt", "Error")


def _listed(api: Any, testbed: str, every: bool) -> list[dict[str, Any]]:
    return api.containers(all=every, filters={"label": f"{LABEL_TESTBED}={testbed}"})  # one call


def record_containers(api: Any, testbed: str, run_dir: Path) -> None:
    import docker.errors  # noqa: PLC0415

    listed = _listed(api, testbed, every=True)
    node_of = {entry["Id"]: (entry.get("Labels") or {}).get(LABEL_NODE) for entry in listed}

    def record(entry: dict[str, Any]) -> None:
        node = (entry.get("Labels") or {}).get(LABEL_NODE)
        if not node:
            return
        try:
            inspected = api.inspect_container(entry["Id"])
            state = inspected.get("State", {})
            if (nodedir.node_dir(run_dir, node) / PARAMS).is_file():
                (nodedir.node_dir(run_dir, node) / STDOUT).write_bytes(
                    api.logs(entry["Id"], stdout=True, stderr=False))
                (run_dir / "node-logs" / f"{node}.log").write_bytes(api.logs(entry["Id"], stdout=False, stderr=True))
        except docker.errors.NotFound:
            return
        path = run_dir / "node-logs" / f"{node}.docker.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        facts = {k: state.get(k) for k in STATE_KEYS}
        mode = str((inspected.get("HostConfig") or {}).get("NetworkMode") or "")
        if mode.startswith("container:"):  # an identity packed on a host: whose namespace it is in
            facts["network_namespace_of"] = node_of.get(mode.removeprefix("container:"), mode)
        path.write_text(json.dumps(facts, indent=1) + "\n")

    fan_out(record, listed, PARALLEL)


def memory_usage(client: Any, testbed: str) -> dict[str, int]:
    """Bytes of memory each running container uses (cgroup v1 usage; the
    engine's stats where the cgroup file cannot be read)."""
    out: dict[str, int] = {}
    for container in client.containers.list(filters={"label": f"{LABEL_TESTBED}={testbed}"}, ignore_removed=True):
        node = container.labels.get(LABEL_NODE)
        usage = cgroup_memory(container.id)
        if usage is None:
            usage = int(container.stats(stream=False).get("memory_stats", {}).get("usage", 0))
        if node:
            out[node] = usage
    return out


def cpu_seconds(api: Any, testbed: str) -> dict[str, float]:
    """CPU seconds each running container's cgroup has used."""
    out: dict[str, float] = {}
    for entry in _listed(api, testbed, every=False):
        node, used = (entry.get("Labels") or {}).get(LABEL_NODE), cgroup_cpu_seconds(entry["Id"])
        if node and used is not None:
            out[node] = used
    return out
