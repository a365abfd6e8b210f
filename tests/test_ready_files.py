"""Every experiment the project ships runs and passes its own expectations,
with figures that agree with an independent count of its traces
(tests/trace_census.py):

- in the simulator, every file of topologies/ it can run, at its full size
  (the files it cannot run, those with foreign routers, are refused with
  exit 2 before anything starts); topologies/scale/ holds the files whose
  simulation takes minutes (the attacks and episub at 1,000 nodes), run by
  hand with their figures in the docs, each with a 100-node twin here;
- on the real backends, the small ready files (up to about 20 nodes, over
  within a minute) on each backend they are written for. Longer ones are run
  by hand and their figures kept in the docs (subnet-blob-msg-docker.yaml,
  16 messages 12 s apart as test-plans sends them: docs/foreign-routers.md).

Issue 38: simsub-100.yaml failed its own expectation in the simulator (the
analysis lost events) and mixed.yaml died on docker (py-libp2p needs a
nameserver), and no test ran either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from analysis.assertions import known_metric
from orchestrator.experiment.spec import load_experiment
from tests import trace_census
from tests.cli_helpers import run_cli
from tests.docker_fixtures import needs_docker
from tests.pylibp2p_helpers import pylibp2p_missing
from tests.spark_fixtures import requires_java, spark  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ROOT / "topologies"
TESTBED = Path(sys.executable).with_name("testbed")
FOREIGN = ("rust-libp2p", "py-libp2p")
SMALL = 20  # nodes: a "small" ready file runs on every real backend in CI ...
SHORT_S = 60.0  # ... and is over by this workload time


def groups(path: Path) -> list[dict]:
    doc = yaml.safe_load(path.read_text())
    return doc.get("groups") or [doc["nodes"]]


def foreign(path: Path) -> set[str]:
    """The foreign router kinds a file names (the simulator runs none)."""
    out = set()
    for g in groups(path):
        router = g.get("router")
        out.add("image" if isinstance(router, dict) else router)
    return out & {*FOREIGN, "image"}


# Variants that fail an expectation of their file. Mostly what a hardening
# is for: the file's expectation states what the hardened router achieves,
# and the older router fails it (issue 39: a v1.0 victim's mesh stays all
# sybils, v1.1's scores evict them). Also a hardened router that falls
# short of its file's expectation, kept as it ran (never tuned) and
# explained in docs/attacks.md: the censored target's mesh keeps its sybils
# in v1.1 too (they deliver every other message first, so its scores rank
# them high). Every other expectation passes. (scale/attack-dawn-100.yaml
# fails p99 and the mesh share in both variants: docs/attacks.md; in scale/
# for CI's time, its timing checked by tests/test_attack_dawn.py.)
EXPECTED_TO_FAIL = {
    ("attack-eclipse-100.yaml", "v1_0"): {"victim_mesh_sybil_fraction_end < 0.5"},
    ("attack-censorship-100.yaml", "v1_0"): {"victim_mesh_sybil_fraction_end < 0.5"},
    ("attack-censorship-100.yaml", "v1_1"): {"victim_mesh_sybil_fraction_end < 0.5"},
    ("attack-eclipse-publishers-100.yaml", "v1_0"): {"victim_mesh_sybil_fraction_end < 0.5"},
}

FILES = sorted(TOPOLOGIES.glob("*.yaml"))
SIMULATED = [f.name for f in FILES if not foreign(f)]
REFUSED = [f.name for f in FILES if foreign(f)]


def run_dirs(out: Path) -> list[Path]:
    """The run directory, or one per variant under it."""
    return [out] if (out / "summary.json").is_file() else sorted(p.parent for p in out.glob("*/summary.json"))


@requires_java
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", SIMULATED)
def test_every_simulated_file_passes_its_expectations(name, spark, tmp_path):  # noqa: F811
    """`testbed sim FILE` (in this process, at the warm session) exits 0,
    and every run's figures are the traces' own."""
    out = tmp_path / "run"
    failing = any(n == name for n, _ in EXPECTED_TO_FAIL)
    assert run_cli("sim", str(TOPOLOGIES / name), "--out", str(out)) == (1 if failing else 0)
    runs = run_dirs(out)
    assert runs, f"{name}: no analysed run under {out}"
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["expectations"], run
        assert failed(summary) == EXPECTED_TO_FAIL.get((name, run.name), set()), run
        assert [k for k in summary if not known_metric(k)] == [], run  # `testbed analyze --assert` takes each
        trace_census.assert_agrees(run, trace_census.count(run), summary)
    shutil.rmtree(out)  # checked: its traces (up to GBs) need not wait for the session's end


def failed(summary: dict) -> set[str]:
    return {e["expr"] for e in summary["expectations"] if not e["passed"]}


@pytest.mark.parametrize("name", REFUSED)
def test_files_the_simulator_cannot_run_are_refused(name, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([str(TESTBED), "sim", str(TOPOLOGIES / name), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "error:" in done.stderr and not out.exists()


def node_count(path: Path) -> int:
    return sum(int(g.get("count", 1)) for g in groups(path))


def missing_for(path: Path) -> str | None:
    """Why a file's foreign routers cannot run here (None: they can)."""
    kinds = foreign(path)
    if "rust-libp2p" in kinds and shutil.which("cargo") is None:
        return "the rust-libp2p adapter needs cargo to build"
    if "py-libp2p" in kinds and (why := pylibp2p_missing()):
        return why
    return None


SMALL_FILES = [f.name for f in FILES if node_count(f) <= SMALL and load_experiment(f).resolve().end_time() <= SHORT_S]
REAL = [(name, backend) for name in SMALL_FILES for backend in ("process", "docker")]


@requires_java
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize(("name", "backend"), REAL)
def test_small_files_pass_on_the_real_backends(name, backend, tmp_path):
    """`testbed run FILE --backend B` through the installed console script:
    exit 0 and the traces' own figures."""
    path = TOPOLOGIES / name
    if backend == "docker" and needs_docker.args[0]:
        pytest.skip(needs_docker.kwargs["reason"])
    if why := missing_for(path):
        pytest.skip(why)
    out = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([str(TESTBED), "run", str(path), "--backend", backend, "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=1800, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for run in run_dirs(out):
        summary = json.loads((run / "summary.json").read_text())
        assert all(e["passed"] for e in summary["expectations"]), summary["expectations"]
        assert [k for k in summary if not known_metric(k)] == [], run
        trace_census.assert_agrees(run, trace_census.count(run), summary)
    shutil.rmtree(out)
