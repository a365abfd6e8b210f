"""The swarm backend on a real single-node swarm, through the installed
`testbed` command: quick.yaml delivers, churns and cleans up; the churn
verbs keep a node's identity; `down --all` removes what a killed CLI left;
and the results agree with the docker backend's on the same file.

The swarm: this host's, when it is a manager already; otherwise the module
creates one (`docker swarm init --advertise-addr 127.0.0.1`) and leaves it
afterwards. A swarm does not disturb the docker backend (its own tests run
while one exists)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker_fixtures import needs_docker, node_image, unique_testbed, wait_for  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_docker]

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(ROOT / ".venv" / "bin" / "testbed")
QUICK = ROOT / "topologies" / "quick.yaml"
LABEL_STATE = "gossip-testbed.state"


@pytest.fixture(scope="module")
def swarm(node_image) -> Iterator[None]:
    import docker  # noqa: PLC0415

    client = docker.from_env()
    state = (client.info().get("Swarm") or {}).get("LocalNodeState")
    created = False
    if state == "inactive":
        client.swarm.init(advertise_addr="127.0.0.1")
        created = True
    elif state != "active":
        pytest.skip(f"this engine's swarm is {state}; the swarm tests need an active manager or none")
    try:
        yield
    finally:
        if created:
            client.swarm.leave(force=True)
        client.close()


@pytest.fixture
def env(tmp_path, node_image) -> dict[str, str]:
    return {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state"), "TESTBED_SWARM_IMAGE": node_image}


def cli(env: dict[str, str], *argv: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TESTBED, *argv], env=env, capture_output=True, text=True, timeout=timeout)


def ours(state_dir: str) -> list[str]:
    """Every swarm object, volume and container labelled with this state directory."""
    import docker  # noqa: PLC0415

    client = docker.from_env()
    flt = {"label": f"{LABEL_STATE}={state_dir}"}
    try:
        found = [f"service {s.name}" for s in client.services.list(filters=flt)]
        found += [f"network {n.name}" for n in client.networks.list(filters=flt)]
        found += [f"secret {s.name}" for s in client.secrets.list(filters=flt)]
        found += [f"volume {v.name}" for v in client.volumes.list(filters=flt)]
        found += [f"container {c.name}" for c in client.containers.list(all=True, filters=flt, ignore_removed=True)]
        return found
    finally:
        client.close()


def run_quick(env: dict[str, str], backend: str, out: Path) -> dict:
    result = cli(env, "run", str(QUICK), "--backend", backend, "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_quick_on_swarm_delivers_churns_and_cleans_up(swarm, env, tmp_path):
    out = tmp_path / "run"
    run_quick(env, "swarm", out)
    assert summary(out)["delivery_ratio"] >= 0.99
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "swarm"
    assert set(manifest["shaping_per_node"]) == {f"n{i}" for i in range(16)}
    assert all(s["error"] is None for s in manifest["shaping_per_node"].values())
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [(e["node"], e["cause"]) for e in events if e["kind"] in ("node_down", "node_up")] == [
        ("n7", "kill"), ("n7", "start")]
    assert not [e for e in events if e["kind"] == "warning" and "churn" in e["message"]]
    # n7 ran twice, on the same swarm node, and its one trace holds both lives
    history = json.loads((out / "node-logs" / "n7.swarm.json").read_text())
    assert len(history) == 2 and len({h["swarm_node"] for h in history}) == 1
    assert all((out / "traces" / f"n{i}.pb").stat().st_size > 0 for i in range(16))
    assert ours(env["TESTBED_STATE_DIR"]) == []


def test_churn_verbs_keep_identity_and_down_collects(swarm, env, tmp_path):
    name = unique_testbed("swarm")
    spec = tmp_path / "three.yaml"
    spec.write_text("name: three\nnodes: {count: 3, router: gossipsub, topics: [t]}\n"
                    "overlay: {type: random, degree: 2}\n")
    up = cli(env, "up", str(spec), "--backend", "swarm", "--name", name, "--out", str(tmp_path / "run"), "--json")
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        before = json.loads(cli(env, "status", name, "--json").stdout)
        for verb in ("pause", "unpause", "disconnect", "reconnect", "stop", "start", "kill", "start"):
            done = cli(env, "churn", name, verb, "n1", "--json")
            assert done.returncode == 0, (verb, done.stderr[-2000:])
        assert cli(env, "publish", name, "--json").returncode == 0
        after = json.loads(cli(env, "status", name, "--json").stdout)
    finally:
        down = cli(env, "down", name, "--json")
    assert down.returncode == 0, down.stderr[-2000:]
    peer = {n["name"]: n.get("peer_id") for n in before["nodes"]}
    assert peer == {n["name"]: n.get("peer_id") for n in after["nodes"]}
    history = json.loads((tmp_path / "run" / "node-logs" / "n1.swarm.json").read_text())
    assert len(history) == 3  # first start, start after stop, start after kill
    assert (tmp_path / "run" / "traces" / "n1.pb").stat().st_size > 0
    assert ours(env["TESTBED_STATE_DIR"]) == []


def test_down_all_removes_what_a_killed_cli_left(swarm, env, tmp_path):
    proc = subprocess.Popen([TESTBED, "up", str(QUICK), "--backend", "swarm", "--name", unique_testbed("swk"),
                             "--out", str(tmp_path / "run")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: any(x.startswith("service") for x in ours(env["TESTBED_STATE_DIR"])), 300, 0.5)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    time.sleep(1)  # calls in flight when it died land
    down = cli(env, "down", "--all", "--json")
    assert down.returncode == 0, down.stderr[-2000:]
    assert ours(env["TESTBED_STATE_DIR"]) == []


LAG_BOUND_MS = 100.0  # event-loop lag p99 (median over nodes) above which wall-clock latency is the host's


def test_swarm_agrees_with_docker_on_quick(swarm, env, tmp_path):
    """Same delivery ratio always; latency p50 within 15% only on a host
    that was not overloaded in either run. Measured under load (15:00 UTC,
    load average 35-110 on 2 cores): delivery 0.9861 on both, p50 167.7 ms
    (swarm) against 84.7 ms (docker), with event-loop lag p99 of 267 and 324
    ms (median over nodes): the p50 then measures the scheduler, and the
    comparison is skipped with the figures."""
    swarm_run, docker_run = tmp_path / "swarm", tmp_path / "docker"
    run_quick(env, "swarm", swarm_run)
    run_quick(env, "docker", docker_run)
    s, d = summary(swarm_run), summary(docker_run)
    lag = {k: json.loads((p / "manifest.json").read_text())["event_loop_lag"]["p99_median_ms"]
           for k, p in (("swarm", swarm_run), ("docker", docker_run))}
    figures = (f"swarm {s['delivery_ratio']} p50 {s['latency_p50_ms']} ms; docker {d['delivery_ratio']} "
               f"p50 {d['latency_p50_ms']} ms; event-loop lag p99 (median) {lag}")
    assert s["delivery_ratio"] == d["delivery_ratio"], figures
    if max(lag.values()) > LAG_BOUND_MS:
        pytest.skip(f"host overloaded (lag p99 above {LAG_BOUND_MS:g} ms): p50 not comparable: {figures}")
    assert abs(s["latency_p50_ms"] - d["latency_p50_ms"]) <= 0.15 * d["latency_p50_ms"], figures
