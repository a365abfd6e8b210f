"""The Backend contract: a backend registered from outside (TESTBED_BACKENDS)
runs `testbed run` end to end through the installed console script, without
the controller knowing its name; what it declares it cannot do is refused
before anything starts; the registry rejects what is not a backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.backends import registry as backends
from orchestrator.backends.api import Backend
from orchestrator.errors import InputError
from orchestrator.backends.process.backend import ProcessBackend
from orchestrator.records.state import StateStore

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(Path(sys.executable).with_name("testbed"))

EXPERIMENT = """\
name: fake
seed: 2
nodes:
  count: 4
  router: gossipsub
  router_params: {{D: 2, D_low: 1, D_high: 4, heartbeat_interval: 0.5}}
  topics: [t]
overlay: {{type: random, degree: 2}}
links: {{latency: {{model: constant, ms: 2}}}}
workload: {{topic: t, messages: 3, interval: 200ms, size: 64, publishers: {{nodes: [n0]}}}}
linger: 1s
{churn}"""


@pytest.fixture
def env(tmp_path):
    state = tmp_path / "state"
    yield {
        **os.environ, "TESTBED_STATE_DIR": str(state), "TESTBED_BACKENDS": "fake=tests.fake_backend:FakeBackend",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    ProcessBackend.cleanup(None, StateStore(state))


def test_the_controller_never_names_a_backend():
    for module in ("run/controller", "run/readiness", "run/workload", "records/manifest", "run/runs"):
        text = (ROOT / "orchestrator" / f"{module}.py").read_text()
        for name in ("process", "docker"):
            assert f'"{name}"' not in text and f"'{name}'" not in text, (module, name)


@pytest.mark.slow
def test_a_registered_fake_backend_runs_an_experiment_end_to_end(env, tmp_path):
    path = tmp_path / "fake.yaml"
    path.write_text(EXPERIMENT.format(churn=""))
    run_dir = tmp_path / "run"
    out = subprocess.run([TESTBED, "run", str(path), "--backend", "fake", "--out", str(run_dir), "--no-report",
                          "--json"], env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)  # exactly one JSON document
    assert doc["backend"] == "fake" and doc["runs"][0]["run_dir"] == str(run_dir.resolve())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "fake" and manifest["status"] == "finished"
    assert manifest["shaping"]["netem_available"] is None  # declared: no kernel shaping
    assert sorted(p.stem for p in (run_dir / "traces").glob("*.pb")) == ["n0", "n1", "n2", "n3"]
    reached = set((run_dir / "fake-control.log").read_text().split())
    assert reached == {"n0", "n1", "n2", "n3"}  # readiness and publishing went through control_client
    kinds = [json.loads(line)["kind"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert kinds.count("publish") == 3 and kinds[-1] == "run_end"
    assert StateStore(Path(env["TESTBED_STATE_DIR"])).names() == []


def test_churn_a_backend_cannot_do_is_refused_before_anything_starts(env, tmp_path):
    path = tmp_path / "fake.yaml"
    path.write_text(EXPERIMENT.format(churn="churn:\n  timeline:\n    - {at: 0.1, action: pause, select: {nodes: [n2]}}\n"))
    run_dir = tmp_path / "run"
    out = subprocess.run([TESTBED, "run", str(path), "--backend", "fake", "--out", str(run_dir), "--no-report"],
                         env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "the fake backend cannot pause nodes" in out.stderr and "Traceback" not in out.stderr
    assert not run_dir.exists()
    assert StateStore(Path(env["TESTBED_STATE_DIR"])).names() == []


def test_registry_rejects_what_is_not_a_backend(monkeypatch):
    monkeypatch.setattr(backends, "BACKENDS", dict(backends.BACKENDS))
    backends.register_backend("notone", "orchestrator.records.state:StateStore")
    with pytest.raises(InputError, match="is not a Backend"):
        backends.backend_class("notone")
    with pytest.raises(InputError, match="expected NAME=package.module:Class"):
        backends.register_backend("bad", "no-colon")
    backends.register_backend("fake", "tests.fake_backend:FakeBackend")
    assert issubclass(backends.backend_class("fake"), Backend)


def test_an_unknown_backend_is_bad_input(tmp_path):
    path = tmp_path / "fake.yaml"
    path.write_text(EXPERIMENT.format(churn=""))
    out = subprocess.run([TESTBED, "run", str(path), "--backend", "nosuch"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")})
    assert out.returncode == 2 and "process" in out.stderr and "docker" in out.stderr, out.stderr
