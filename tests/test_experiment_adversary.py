"""Adversarial groups in experiment files: validated with FILE:LINE errors
(exit 2), resolved into sybil nodes whose connections reach their eclipse
targets, simulated (a censor's withheld forwards are DROP_RPC in its trace),
and refused by the real backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from cli_helpers import run_cli
from node.trace.vocab import DROP_RPC
from node.trace.file import read_trace
from orchestrator.experiment.spec import load_experiment

TESTBED = Path(sys.executable).with_name("testbed")

FILE = """\
name: adv
seed: 1
groups:
  - name: honest
    count: 20
    router: gossipsub
    prefix: h
  - name: sybils
    count: 6
    router: gossipsub
    prefix: s
    adversary:
      eclipse: [h0]
      censor: true
overlay: {type: random, degree: 3}
links:
  latency: {model: constant, ms: 20}
workload:
  messages: 10
  interval: 0.5
  publishers: {nodes: [h1]}
duration: 10s
linger: 2s
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "adv.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("old, new, line, field, words", [
    ("eclipse: [h0]", "eclipse: [h99]", 13, "groups[1].adversary.eclipse[0]", "no node is named 'h99'"),
    ("eclipse: [h0]", "eclipse: [s1]", 13, "groups[1].adversary.eclipse[0]", "sybil itself"),
    ("    router: gossipsub\n    prefix: s", "    router: floodsub\n    prefix: s", 10, "groups[1].router",
     "sybils run one of our gossipsub engines"),
    ("      eclipse: [h0]\n      censor: true\n", "      start: 5s\n", 12, "groups[1].adversary",
     "at least one behaviour"),
    ("censor: true", "degrade: 1.5", 14, "groups[1].adversary.degrade", "<= 1"),
    ("censor: true", "censor: true\n      censor_publishers: [h1]", 15, "groups[1].adversary.censor_publishers",
     "give one of them"),
    ("censor: true", "censor: true\n      bribe: 3", 15, "groups[1].adversary.bribe", "unknown"),
])
def test_bad_adversaries_exit_2_naming_file_line_and_field(tmp_path, capsys, old, new, line, field, words) -> None:
    assert old in FILE
    path = write(tmp_path, FILE.replace(old, new))
    code = run_cli("validate", str(path))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert f"{path}:{line}: {field}:" in err, err
    assert words in err, err


def test_sybils_resolve_with_their_behaviours_and_edges_to_their_targets(tmp_path) -> None:
    resolved = load_experiment(write(tmp_path, FILE)).resolve(1)
    sybils = [n for n in resolved.nodes if n.adversary is not None]
    assert [n.name for n in sybils] == [f"s{i}" for i in range(6)]
    assert sybils[0].adversary.eclipse == ("h0",) and sybils[0].adversary.censor
    assert all(("h0", s.name) in resolved.edges or (s.name, "h0") in resolved.edges for s in sybils)
    assert resolved.node("h1").adversary is None


def test_the_simulator_runs_sybils_and_their_traces_show_what_they_withheld(tmp_path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([TESTBED, "sim", str(write(tmp_path, FILE)), "--out", str(out), "--no-report"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    drops = {p.stem: Counter(ev.type for ev in read_trace(p))[DROP_RPC] for p in (out / "traces").glob("*.pb")}
    assert all(drops[f"s{i}"] > 0 for i in range(6))
    assert not any(drops[f"h{i}"] for i in range(20))
    topology = json.loads((out / "topology.json").read_text())
    by_name = {n["name"]: n for n in topology["nodes"]}
    assert by_name["s0"]["adversary"]["eclipse"] == ["h0"] and by_name["h0"]["adversary"] is None


def test_the_process_backend_refuses_sybils_with_exit_2(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "COLUMNS": "300"}
    done = subprocess.run([TESTBED, "run", str(write(tmp_path, FILE)), "--backend", "process",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert "cannot run adversaries yet" in done.stderr and "s0" in done.stderr
