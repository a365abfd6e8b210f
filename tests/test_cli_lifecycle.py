"""The testbed lifecycle through the console script, process backend:
up -> status -> publish -> churn -> down (idempotent), `run` end to end,
`down --all` after the CLI was SIGKILLed during `up`, and bad input (exit 2,
nothing started)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.backends.process.backend import ProcessBackend, proc_alive, proc_cmdline
from orchestrator.records.state import StateStore

TESTBED = str(Path(sys.executable).with_name("testbed"))

TINY = """\
name: tiny
seed: 3
nodes:
  count: {count}
  router: gossipsub
  router_params: {{D: 2, D_low: 1, D_high: 4, heartbeat_interval: 0.5}}
  topics: [blocks]
overlay:
  type: random
  degree: 2
links:
  latency: {{model: constant, ms: 2}}
workload:
  topic: blocks
  messages: 4
  interval: 200ms
  size: 64
  publishers: {{nodes: [n0]}}
linger: 1s
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("TESTBED_STATE_DIR", str(state))
    yield {**os.environ, "TESTBED_STATE_DIR": str(state)}
    ProcessBackend.cleanup(None, StateStore(state))


def experiment(tmp_path: Path, count: int = 4) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.format(count=count))
    return path


def tb(env, *args, check=True, timeout=120) -> subprocess.CompletedProcess:
    out = subprocess.run([TESTBED, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"testbed {' '.join(args)} -> {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def router_pids(state: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmd = proc_cmdline(int(entry.name))
            if "--config" in cmd and any(part.startswith(str(state)) for part in cmd) and proc_alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_up_status_publish_churn_down(env, tmp_path):
    file = experiment(tmp_path)
    up = json.loads(tb(env, "up", str(file), "--backend", "process", "--name", "life", "--out", str(tmp_path / "run"), "--json").stdout)
    assert up["testbed"] == "life" and len(up["nodes"]) == 4
    assert all(n["state"] == "up" and n["peers"] >= 1 for n in up["nodes"])

    listing = json.loads(tb(env, "status", "--json").stdout)
    assert [b["testbed"] for b in listing] == ["life"]
    status = json.loads(tb(env, "status", "life", "--json").stdout)
    assert all(n["mesh"].get("blocks", 0) >= 1 for n in status["nodes"])

    pub = json.loads(tb(env, "publish", "life", "--node", "n0", "--count", "2", "--json").stdout)
    assert len(pub["message_ids"]) == 2

    killed = json.loads(tb(env, "churn", "life", "kill", "1", "--seed", "1", "--json").stdout)["nodes"]
    assert len(killed) == 1
    status = json.loads(tb(env, "status", "life", "--json").stdout)
    assert {n["node"]: n["state"] for n in status["nodes"]}[killed[0]] == "down"
    # the lifecycle table: a stopped node is started, not restarted (exit 2, nothing done)
    refused = tb(env, "churn", "life", "restart", killed[0], check=False)
    assert refused.returncode == 2 and "use start" in refused.stderr, refused.stderr
    tb(env, "churn", "life", "start", killed[0])
    tb(env, "churn", "life", "disconnect", "n2")
    tb(env, "churn", "life", "reconnect", "n2")

    tb(env, "down", "life")
    assert router_pids(Path(env["TESTBED_STATE_DIR"])) == []
    assert tb(env, "down", "life").returncode == 0  # idempotent
    run = tmp_path / "run"
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    for kind in ("run_start", "all_up", "publish", "churn", "node_down", "node_up", "run_end"):
        assert kind in kinds, kind
    assert sorted(p.stem for p in (run / "traces").glob("*.pb")) == ["n0", "n1", "n2", "n3"]
    assert json.loads((run / "manifest.json").read_text())["status"] == "finished"
    # every router's lag window closed when `down` began, before any of them left (node/runtime/lag.py)
    lags = [json.loads((run / "node-logs" / f"n{i}.lag.json").read_text()) for i in range(4)]
    assert all(lag["ended"] for lag in lags), lags


@pytest.mark.slow
def test_a_stop_that_leaves_containers_behind_finishes_the_run_and_keeps_the_record(env, tmp_path):
    """A stop that cannot finish (Docker's daemon stuck on lost exits): `down`
    still writes the run's manifest with what is left, exits 1 with the one
    message that says what to do, keeps the testbed recorded, and a later
    `down` (the daemon restarted) removes it without draining the routers
    again: the finished run directory is left as the first `down` wrote it."""
    env = {**env, "TESTBED_BACKENDS": "stuck=tests.fake_backend:StuckStopBackend",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    run = tmp_path / "run"
    tb(env, "up", str(experiment(tmp_path)), "--backend", "stuck", "--name", "stuck", "--out", str(run))
    out = tb(env, "down", "stuck", check=False)
    assert out.returncode == 1, out.stderr
    assert "teardown incomplete" in out.stderr and "the daemon is stuck" in out.stderr and "Traceback" not in out.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "finished" and any("the daemon is stuck" in w for w in manifest["warnings"])
    assert sorted(p.name for p in (run / "traces").iterdir()) == [f"n{i}.pb" for i in range(4)]
    (listed,) = json.loads(tb(env, "status", "--json").stdout)
    assert (listed["testbed"], listed["status"]) == ("stuck", "finished")
    written = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert "was finished by an earlier `down`" in tb(env, "down", "stuck").stdout
    assert "stuck" not in tb(env, "status", "--json").stdout
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == written


def test_down_runs_each_teardown_step_once(env, tmp_path):
    """`testbed down NAME` through the console script: one destroy, one
    cleanup, one sweep for stray routers (it was one destroy, two cleanups
    and two sweeps: destroy swept, the controller's cleanup swept again, and
    `down` then cleaned up once more)."""
    env = {**env, "TESTBED_BACKENDS": "counting=tests.fake_backend:CountingBackend",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    tb(env, "up", str(experiment(tmp_path)), "--backend", "counting", "--name", "once", "--out", str(tmp_path / "run"))
    calls = Path(env["TESTBED_STATE_DIR"]) / "teardown-calls.log"
    assert not calls.exists()
    tb(env, "down", "once")
    assert calls.read_text().split() == ["destroy", "cleanup", "kill_strays"]
    assert router_pids(Path(env["TESTBED_STATE_DIR"])) == []


@pytest.mark.slow
def test_down_names_a_router_that_stopped_on_its_own(env, tmp_path):
    """A router that ended behind the controller's back (here SIGKILL; a
    router whose trace cannot be written stops by itself) does not answer the
    end-of-run drain: `down` still finishes, and the run's warnings name it."""
    tb(env, "up", str(experiment(tmp_path)), "--backend", "process", "--name", "quiet", "--out", str(tmp_path / "run"))
    by_node = {}
    for pid in router_pids(Path(env["TESTBED_STATE_DIR"])):
        cmd = proc_cmdline(pid)
        by_node[Path(cmd[cmd.index("--config") + 1]).stem] = pid
    os.kill(by_node["n2"], signal.SIGKILL)
    tb(env, "down", "quiet")
    warnings = json.loads((tmp_path / "run" / "manifest.json").read_text())["warnings"]
    assert any("1 router(s) did not answer at the end" in w and w.endswith(": n2") for w in warnings), warnings


@pytest.mark.slow
def test_run_end_to_end(env, tmp_path):
    file = experiment(tmp_path)
    out = tb(env, "run", str(file), "--backend", "process", "--out", str(tmp_path / "run"), "--no-report", "--json")
    (only_run,) = json.loads(out.stdout)["runs"]
    run = Path(only_run["run_dir"])
    assert sorted(p.stem for p in (run / "traces").glob("*.pb")) == ["n0", "n1", "n2", "n3"]
    assert sum(1 for line in (run / "events.jsonl").read_text().splitlines() if '"publish"' in line) == 4
    assert StateStore(Path(env["TESTBED_STATE_DIR"])).names() == []


@pytest.mark.slow
def test_down_all_after_the_cli_is_sigkilled_during_up(env, tmp_path):
    state = Path(env["TESTBED_STATE_DIR"])
    file = experiment(tmp_path, count=8)
    proc = subprocess.Popen([TESTBED, "up", str(file), "--backend", "process", "--name", "doomed",
                             "--out", str(tmp_path / "run")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(router_pids(state)) < 3:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert router_pids(state), "no router was started before the kill"
    tb(env, "down", "--all")
    assert router_pids(state) == []
    assert StateStore(state).names() == []
    assert tb(env, "down", "--all").returncode == 0


def test_bad_input_is_exit_2_and_starts_nothing(env, tmp_path):
    state = Path(env["TESTBED_STATE_DIR"])
    assert tb(env, "up", str(tmp_path / "missing.yaml"), "--backend", "process", check=False).returncode == 2
    assert tb(env, "down", check=False).returncode == 2
    out = tb(env, "churn", "nope", "kill", "n1", check=False)
    assert out.returncode == 2 and "no testbed named" in out.stderr
    if os.path.exists(os.path.join(os.path.dirname(__file__), "..", "orchestrator", "experiment", "spec.py")):
        file = experiment(tmp_path)
        out = tb(env, "up", str(file), "--backend", "bogus", check=False)
        assert out.returncode == 2 and "bogus" in out.stderr
        out = tb(env, "up", str(file), "--backend", "process", "--name", "bad name!", check=False)
        assert out.returncode == 2
        broken = tmp_path / "broken.yaml"
        broken.write_text("name: x\nnodes: {count: -3}\n")
        assert tb(env, "run", str(broken), "--backend", "process", check=False).returncode == 2
    assert router_pids(state) == []
    assert not (state / "testbeds").exists() or StateStore(state).names() == []


def test_selector_parsing():
    import random

    from cli.testbed_cmd import select_nodes
    from orchestrator.errors import InputError

    names = [f"n{i}" for i in range(20)]
    assert select_nodes("n1,n3", names, names, random.Random(1)) == ["n1", "n3"]
    assert len(select_nodes("3", names, names, random.Random(1))) == 3
    assert len(select_nodes("10%", names, names, random.Random(1))) == 2
    for bad in ("n99", "0", "150%", "25"):
        with pytest.raises(InputError):
            select_nodes(bad, names, names, random.Random(1))


@pytest.mark.slow
def test_down_cleans_up_when_a_recorded_config_is_torn(env, tmp_path):
    """A config file emptied under the record (a CLI killed mid-write, before
    writes were atomic) must not crash `down`: it reports, then cleans up."""
    state = Path(env["TESTBED_STATE_DIR"])
    tb(env, "up", str(experiment(tmp_path)), "--backend", "process", "--name", "torn", "--out", str(tmp_path / "run"))
    record = StateStore(state).load("torn")
    Path(record["nodes"]["n1"]["config"]).write_text("")
    out = tb(env, "down", "torn")
    assert "n1's config is unreadable" in out.stdout + out.stderr
    assert router_pids(state) == []
    assert StateStore(state).names() == []


def test_write_atomic_never_leaves_a_torn_file(tmp_path, monkeypatch):
    from node import atomic

    path = tmp_path / "x.json"
    atomic.write_atomic(path, '{"a": 1}', 0o600)
    assert path.read_text() == '{"a": 1}' and path.stat().st_mode & 0o777 == 0o600

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_atomic(path, '{"a": 2}')
    assert path.read_text() == '{"a": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
