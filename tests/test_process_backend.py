"""The process backend and the run controller end to end: a small experiment
with kill/start and restart delivers every message to every live subscriber
and leaves one trace per node; cleanup finds every router even after the CLI
was SIGKILLed; address ranges of two testbeds never collide; a recycled pid is
never killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from node.engine.api import TraceType
from node.trace.file import read_trace
from orchestrator.backends.api import BackendContext
from orchestrator.experiment.model import ChurnAction, LinkParams, NodeSpec, Publish, ResolvedExperiment
from orchestrator.backends.process.backend import ProcessBackend, node_host, proc_alive, proc_start_time, subnet_octet
from orchestrator.records.state import StateStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("TESTBED_STATE_DIR", str(d))
    yield d
    # Whatever a test did, no router of ours survives it.
    ProcessBackend.cleanup(None, StateStore(d))


def small_experiment(n: int = 8, churn: tuple[ChurnAction, ...] = (), publishes=None, duration=4.0) -> ResolvedExperiment:
    names = [f"n{i}" for i in range(n)]
    nodes = tuple(NodeSpec(name, "default", "gossipsub", {}, ("t",), 100 + i) for i, name in enumerate(names))
    edges = tuple((names[i], names[(i + 1) % n]) for i in range(n)) + tuple(
        (names[i], names[(i + n // 2) % n]) for i in range(n // 2)
    )
    if publishes is None:
        steady = [name for name in names if not any(name in c.nodes for c in churn)]
        publishes = tuple(
            Publish(i, 0.25 * i, "t", 200, steady[i % len(steady)], (steady[i % len(steady)],))
            for i in range(int(duration / 0.25))
        )
    return ResolvedExperiment(
        name="small", source="tests/test_process_backend.py", seed=7, nodes=nodes, edges=edges, links={},
        default_link=LinkParams(latency_ms=2.0), publishes=publishes, churn=churn, expectations=(),
        duration=duration, linger=1.5,
    )


def read_events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def deliveries(run_dir: Path) -> dict[str, set[str]]:
    out = {}
    for path in sorted((run_dir / "traces").glob("*.pb")):
        out[path.stem] = {
            ev.deliverMessage.messageID.hex() for ev in read_trace(path) if ev.type == TraceType.DELIVER_MESSAGE
        }
    return out


def missing_deliveries(run_dir: Path, nodes: list[str], grace_ns: int = 500_000_000) -> list[tuple[str, str]]:
    """(message id, node) pairs for nodes that were up when the message was
    published, stayed up for `grace_ns` after it, and never delivered it."""
    events = read_events(run_dir)
    downs: dict[str, list[tuple[int, int]]] = {n: [] for n in nodes}  # down intervals
    down_since: dict[str, int] = {}
    for ev in events:
        if ev["kind"] == "node_down":
            down_since[ev["node"]] = ev["t_ns"]
        elif ev["kind"] == "node_up" and ev["node"] in down_since:
            downs[ev["node"]].append((down_since.pop(ev["node"]), ev["t_ns"]))
    for node, since in down_since.items():
        downs[node].append((since, 1 << 62))
    got = deliveries(run_dir)
    missing = []
    for ev in events:
        if ev["kind"] != "publish":
            continue
        t = ev["t_ns"]
        for node in nodes:
            if node in ev["via"]:
                continue
            if any(a <= t + grace_ns and t <= b for a, b in downs[node]):
                continue
            if ev["message_id"] not in got.get(node, set()):
                missing.append((ev["message_id"], node))
    return missing


@pytest.mark.slow
def test_run_delivers_to_every_live_subscriber_and_keeps_every_trace(state_dir, tmp_path):
    from orchestrator.run.runs import run_experiment

    churn = (
        ChurnAction(1.1, "kill", ("n2",)),
        ChurnAction(2.0, "start", ("n2",)),
        ChurnAction(1.6, "restart", ("n3",)),
    )
    resolved = small_experiment(churn=churn)
    run_dir = tmp_path / "run"
    ctl = run_experiment(resolved, "name: small\n", "process", run_dir)
    names = [n.name for n in resolved.nodes]

    assert sorted(p.stem for p in (run_dir / "traces").glob("*.pb")) == sorted(names)
    for name in ("experiment.resolved.yaml", "topology.json", "manifest.json", "events.jsonl"):
        assert (run_dir / name).is_file(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "process" and manifest["clock"] == "wall"
    assert manifest["shaping"]["path"] == "userspace"
    assert manifest["event_loop_lag"]["p99_max_ms"] is not None

    events = read_events(run_dir)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_start" and "all_up" in kinds and kinds[-1] == "run_end"
    assert {"node": "n2", "cause": "kill"}.items() <= next(e for e in events if e["kind"] == "node_down").items()
    ups = {(e["node"], e["cause"]) for e in events if e["kind"] == "node_up"}
    assert ("n2", "start") in ups and ("n3", "restart") in ups
    publishes = [e for e in events if e["kind"] == "publish"]
    assert len(publishes) == len(resolved.publishes)

    assert missing_deliveries(run_dir, names) == []

    # The killed node's trace keeps what it wrote before the kill, and the
    # restarted incarnation appends to the same file (two JOINs).
    for node in ("n2", "n3"):
        trace = list(read_trace(run_dir / "traces" / f"{node}.pb"))
        joins = [ev for ev in trace if ev.type == TraceType.JOIN]
        assert len(joins) == 2, node
        first_incarnation = [ev for ev in trace if ev.timestamp < joins[1].timestamp]
        assert any(ev.type == TraceType.DELIVER_MESSAGE for ev in first_incarnation), node

    # Nothing left running, nothing left recorded.
    assert StateStore(state_dir).names() == []
    assert ctl.testbed not in StateStore(state_dir).names()
    assert (run_dir / "node-logs" / "n0.log").is_file()


def test_two_testbeds_get_distinct_address_ranges(state_dir, tmp_path):
    store = StateStore(state_dir)
    a = ProcessBackend(BackendContext("alpha", tmp_path / "a", store))
    store.create({"name": "alpha", "backend": "process", "nodes": {}})
    addrs_a = a.prepare(["x", "y"])
    store.create({"name": "beta", "backend": "process", "nodes": {}})
    # Force beta to hash onto alpha's octet: it must move on.
    octet_a = store.load("alpha")["net"]
    assert subnet_octet("beta", {octet_a}) != octet_a
    b = ProcessBackend(BackendContext("beta", tmp_path / "b", store))
    addrs_b = b.prepare(["x", "y"])
    hosts_a = {v.host for v in addrs_a.values()}
    hosts_b = {v.host for v in addrs_b.values()}
    assert len(hosts_a) == 2 and len(hosts_b) == 2 and not hosts_a & hosts_b
    assert all(h.startswith("127.") for h in hosts_a | hosts_b)
    assert node_host(5, 0) == "127.5.0.2" and node_host(5, 253) == "127.5.1.1"


def test_cleanup_never_kills_a_recycled_pid(state_dir):
    """A recorded pid whose start time no longer matches is someone else's."""
    store = StateStore(state_dir)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        store.create({"name": "ghost", "backend": "process", "nodes": {
            "n0": {"pid": bystander.pid, "start_time": proc_start_time(bystander.pid) - 1,
                   "cmdline": [sys.executable, "-m", "node", "--config", "/nonexistent"]},
        }})
        ProcessBackend.cleanup("ghost", store)
        assert proc_alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.slow
def test_cleanup_after_the_controller_is_sigkilled_mid_up(state_dir, tmp_path):
    """The controller dies (SIGKILL) while nodes are starting; cleanup by name
    finds every router from the state directory."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from test_process_backend import small_experiment
        from orchestrator.run.controller import Controller
        ctl = Controller.create(small_experiment(n=6), None, "process", "killed", {str(tmp_path / 'run')!r})
        ctl.up(ready_timeout=60)
        print("UP", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    store = StateStore(state_dir)
    deadline = time.monotonic() + 20
    pids: list[int] = []
    while time.monotonic() < deadline and len(pids) < 3:
        record = store.load("killed") or {}
        pids = [e["pid"] for e in (record.get("nodes") or {}).values() if "pid" in e]
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert pids, "the controller never recorded a node"
    time.sleep(0.3)
    record = store.load("killed")
    pids = [e["pid"] for e in record["nodes"].values() if "pid" in e]
    ProcessBackend.cleanup("killed", store)
    assert not any(proc_alive(pid) for pid in pids)
    assert not ProcessBackend._kill_strays(store, None)
    assert os.path.isdir(state_dir)
