"""A multi-host swarm on one machine: three Docker-in-Docker engines
(orchestrator/backends/swarm/dind.py) form a swarm whose manager is the first of them,
and the swarm backend runs an experiment across them through the installed
`testbed` command. The host's own engine only hosts the three nodes; it
joins no swarm.

What it exercises, and prints with its figures:
1. `testbed image distribute --engine ...`: the router image from the host
   into each node's engine, no registry (seconds, and that every tag matches);
2. `testbed run` of a file whose three groups are pinned to the three swarm
   nodes by placement constraints (node.hostname==...), with a kill and a
   restart of a router on a node that is not the manager: tasks on remote
   engines, overlay traffic between engines (peers on other nodes deliver),
   churn through a remote engine, traces from remote volumes;
3. `testbed gc` afterwards, then every engine is searched for anything
   labelled gossip-testbed (services, secrets, networks, volumes, containers);
4. a node lost mid-run: `testbed up`, the third node's container stopped
   (its engine and tasks with it), `testbed down`: what it says about that
   node, and which traces it kept.

Exit 1 when a check fails, 2 when nested engines cannot run here (the
reason is printed as `unavailable`). Heavy: run it inside `flock /work/heavy.lock`.

    .venv/bin/python bench/bench_swarm_dind.py [--keep] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.backends.swarm import dind as swarm_dind  # noqa: E402
from orchestrator.dockerapi.client import docker_client  # noqa: E402
from orchestrator.errors import TestbedError  # noqa: E402
from orchestrator.images.router import ensure_image  # noqa: E402
from orchestrator.progress import Reporter  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(ROOT / ".venv" / "bin" / "testbed")
NODES = 3
ROUTERS_PER_NODE = 2
SETTLE_S = 60.0  # gc, then every engine empty within this


def experiment(lab: str) -> str:
    """Three groups, one per swarm node; a router of the last group (never on
    the manager) killed for 2 s while messages flow from the first and last."""
    groups = "\n".join(
        f"  - {{name: g{i}, count: {ROUTERS_PER_NODE}, router: gossipsub,"
        f" topics: [blocks], router_params: {{D: 3, D_low: 2, D_high: 6}},"
        f" resources: {{placement: [\"node.hostname=={lab}-{i}\"]}}}}"
        for i in range(1, NODES + 1))
    return f"""name: dind
seed: 1
groups:
{groups}
overlay: {{type: random, degree: 3}}
links:
  latency: {{model: constant, ms: 30}}
workload:
  topic: blocks
  messages: 10
  interval: 500ms
  size: 256
  publishers: {{nodes: [g1-0, g{NODES}-1]}}
churn:
  timeline:
    - at: 1s
      action: kill
      select: {{nodes: [g{NODES}-0]}}
      for: 2s
linger: 3s
"""


def cli(env: dict[str, str], *argv: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TESTBED, *argv], env=env, capture_output=True, text=True, timeout=timeout)


def leftovers(nodes: list[swarm_dind.DindNode]) -> dict[str, list[str]]:
    """Everything labelled gossip-testbed on each node's engine."""
    import docker  # noqa: PLC0415

    out = {}
    flt = {"label": "gossip-testbed.testbed"}
    for node in nodes:
        engine = docker.DockerClient(base_url=node.url, timeout=60)
        try:
            found = [f"container {c.name}" for c in engine.containers.list(all=True, filters=flt)]
            found += [f"volume {v.name}" for v in engine.volumes.list(filters=flt)]
            found += [f"network {n.name}" for n in engine.networks.list(filters=flt)]
            if node is nodes[0]:
                found += [f"service {s.name}" for s in engine.services.list(filters=flt)]
                found += [f"secret {s.name}" for s in engine.secrets.list(filters=flt)]
            out[node.hostname] = found
        finally:
            engine.close()
    return out


def image_on(nodes: list[swarm_dind.DindNode], tag: str) -> dict[str, bool]:
    import docker  # noqa: PLC0415

    out = {}
    for node in nodes:
        engine = docker.DockerClient(base_url=node.url, timeout=60)
        try:
            out[node.hostname] = bool(engine.images.list(name=tag))
        finally:
            engine.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab's engines up afterwards")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    host_env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    client = docker_client(timeout=900)
    lab = f"gtb-dind-{os.getpid()}"
    figures: dict[str, Any] = {"lab": lab, "load": os.getloadavg()}
    checks: dict[str, bool] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-dind-"))
    figures["work"] = str(work)  # the run directories stay, to be read
    try:
        reporter = Reporter()
        tag = ensure_image(reporter)
        started = time.monotonic()
        try:
            nodes = swarm_dind.start_nodes(client, lab, NODES, swarm_dind.build_dind_image(client, reporter))
            swarm_dind.form_swarm(nodes)
        except TestbedError as exc:  # BackendUnavailable too: nested engines cannot run here
            figures["unavailable"] = str(exc)
            return report(figures, {}, args.json, 2)
        figures["engines_up_s"] = round(time.monotonic() - started, 1)

        started = time.monotonic()
        argv = ["image", "distribute", *[a for n in nodes for a in ("--engine", n.url)], "--json"]
        dist = cli(host_env, *argv)
        figures["distribute_s"] = round(time.monotonic() - started, 1)
        figures["distribute"] = dist.stdout.strip()[-2000:] or dist.stderr.strip()[-2000:]
        checks["image on every engine"] = dist.returncode == 0 and all(image_on(nodes, tag).values())

        env = {**host_env, "DOCKER_HOST": nodes[0].url, "TESTBED_SWARM_ENGINES": swarm_dind.engines_env(nodes),
               "TESTBED_SWARM_IMAGE": tag, "TESTBED_STATE_DIR": str(work / "state")}
        spec = work / "dind.yaml"
        spec.write_text(experiment(lab))
        out = work / "run"
        started = time.monotonic()
        run = cli(env, "run", str(spec), "--backend", "swarm", "--out", str(out), "--json")
        figures["run_s"] = round(time.monotonic() - started, 1)
        figures["run_exit"] = run.returncode
        if run.returncode != 0:
            figures["run_stderr"] = run.stderr[-3000:]
        figures.update(run_figures(out, nodes))
        checks["run exit 0"] = run.returncode == 0
        checks["routers on every node"] = set(figures.get("placed", {}).values()) == {n.hostname for n in nodes}
        checks["remote kill and restart"] = figures.get("killed_history") == 2
        checks["delivery across engines"] = figures.get("delivery_ratio", 0) >= 0.99

        started = time.monotonic()
        gc = cli(env, "gc", "--yes", "--json")
        figures["gc_exit"] = gc.returncode
        left = leftovers(nodes)
        while any(left.values()) and time.monotonic() - started < SETTLE_S:
            time.sleep(2)  # workers remove their task containers after the manager removed the services
            left = leftovers(nodes)
        figures["gc_empty_after_s"] = round(time.monotonic() - started, 1)
        figures["left_after_gc"] = left
        checks["nothing left on any engine"] = gc.returncode == 0 and not any(left.values())

        figures.update(lost_node(env, work, spec, nodes, client))
        checks["lost node reported, others kept"] = figures.get("lost_reported", False) and figures.get(
            "lost_kept_traces", 0) == ROUTERS_PER_NODE * (NODES - 1)
    finally:
        if not args.keep:
            figures["removed"] = swarm_dind.remove(client, lab)
        client.close()
    return report(figures, checks, args.json, 0 if checks and all(checks.values()) else 1)


def report(figures: dict[str, Any], checks: dict[str, bool], as_json: bool, code: int) -> int:
    figures["checks"] = checks
    if as_json:
        print(json.dumps(figures, indent=2, default=str))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return code


def run_figures(out: Path, nodes: list[swarm_dind.DindNode]) -> dict[str, Any]:
    """Where each router ran, the killed node's task history, the analysis'
    delivery and latency."""
    figures: dict[str, Any] = {}
    logs = out / "node-logs"
    placed = {}
    for path in sorted(logs.glob("*.swarm.json")) if logs.is_dir() else []:
        history = json.loads(path.read_text())
        placed[path.name.removesuffix(".swarm.json")] = history[0]["swarm_node"] if history else None
        if path.name.startswith(f"g{NODES}-0."):
            figures["killed_history"] = len(history)
    figures["placed"] = placed
    figures["traces"] = {p.stem: p.stat().st_size for p in sorted((out / "traces").glob("*.pb"))} \
        if (out / "traces").is_dir() else {}
    if (out / "summary.json").exists():
        summary = json.loads((out / "summary.json").read_text())
        for key in ("delivery_ratio", "latency_p50_ms", "latency_p99_ms"):
            figures[key] = summary.get(key)
    return figures


def lost_node(env: dict[str, str], work: Path, spec: Path, nodes: list[swarm_dind.DindNode],
              client: Any) -> dict[str, Any]:
    """`up`, publish, the last swarm node's engine stopped, publish, `down`."""
    out = work / "lost"
    name = "dindlost"
    up = cli(env, "up", str(spec), "--backend", "swarm", "--name", name, "--out", str(out), "--json")
    figures: dict[str, Any] = {"lost_up_exit": up.returncode}
    if up.returncode != 0:
        figures["lost_up_stderr"] = up.stderr[-3000:]
        return figures
    cli(env, "publish", name, "--json")
    swarm_dind.stop_engine(client, nodes[-1])
    figures["lost_publish_after"] = cli(env, "publish", name, "--json").returncode
    status = cli(env, "status", name, "--json")
    figures["lost_status"] = status.stdout[-2000:] or status.stderr[-2000:]
    started = time.monotonic()
    down = cli(env, "down", name, "--json")
    figures["lost_down_s"] = round(time.monotonic() - started, 1)
    figures["lost_down_exit"] = down.returncode
    figures["lost_down_said"] = (down.stdout + down.stderr)[-3000:]
    traces = sorted(p.stem for p in (out / "traces").glob("*.pb") if p.stat().st_size > 0) \
        if (out / "traces").is_dir() else []
    figures["lost_traces"] = traces
    figures["lost_kept_traces"] = len([t for t in traces if not t.startswith(f"g{NODES}-")])
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()] \
        if (out / "events.jsonl").exists() else []
    warnings = [e["message"] for e in events if e.get("kind") == "warning"]
    figures["lost_warnings"] = warnings
    figures["lost_reported"] = any(nodes[-1].hostname in w and "lost" in w for w in warnings)
    return figures


if __name__ == "__main__":
    sys.exit(main())
