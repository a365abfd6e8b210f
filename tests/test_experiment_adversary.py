"""Adversarial groups in experiment files: validated with FILE:LINE errors
(exit 2), resolved into sybil nodes whose connections reach their eclipse
targets, simulated (a censor's withheld forwards are DROP_RPC in its trace),
and run by the router daemon on the process and docker backends."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from cli_helpers import assert_validate_refuses
from docker_fixtures import needs_docker
from tests.spark_fixtures import requires_java
from node.config import NodeConfig
from node.engine.api import NS
from node.trace.vocab import DELIVER, DROP_RPC, REJECT, SEND_RPC
from node.trace.file import read_trace
from orchestrator.experiment.spec import load_experiment
from orchestrator.routers.nodeconfigs import adversary_config
from orchestrator.routers.peers import node_identities, peer_ids_b58
from orchestrator.routers.sybils import sybil_spec

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
    assert_validate_refuses(path, line, field, words, capsys)


def test_sybils_resolve_with_their_behaviours_and_edges_to_their_targets(tmp_path) -> None:
    resolved = load_experiment(write(tmp_path, FILE)).resolve(1)
    sybils = [n for n in resolved.nodes if n.adversary is not None]
    assert [n.name for n in sybils] == [f"s{i}" for i in range(6)]
    assert sybils[0].adversary.eclipse == ("h0",) and sybils[0].adversary.censor
    assert all(("h0", s.name) in resolved.edges or (s.name, "h0") in resolved.edges for s in sybils)
    assert resolved.node("h1").adversary is None


def test_attack_degree_aims_each_sybil_at_that_many_honest_nodes(tmp_path) -> None:
    resolved = load_experiment(write(tmp_path, FILE.replace("censor: true", "censor: true\n      attack_degree: 12"))).resolve(1)
    neighbours = resolved.neighbours()
    sybils = {f"s{i}" for i in range(6)}
    for s in sybils:
        assert len(set(neighbours[s]) - sybils) >= 12, s
    again = load_experiment(write(tmp_path, FILE.replace("censor: true", "censor: true\n      attack_degree: 12"))).resolve(1)
    assert again.edges == resolved.edges


def test_a_sybils_node_config_carries_the_behaviours_the_simulator_builds(tmp_path) -> None:
    """NodeConfig.adversary (peer ids as text, through JSON) gives the
    daemon the same SybilSpec the simulator builds; a covert one waits for
    the workload's start before it counts its `start`."""
    resolved = load_experiment(write(tmp_path, FILE.replace("censor: true", "censor: true\n      start: 3s"))).resolve(1)
    spec = resolved.node("s0").adversary
    cfg = NodeConfig(name="s0", router="gossipsub", seed=1, listen_host="h", listen_port=1, control_host="h",
                     control_port=2, token="t", trace_path="/dev/null", index=20,
                     adversary=adversary_config(spec, peer_ids_b58(resolved)))
    sybil = NodeConfig.from_json(cfg.to_json()).sybil()
    raw = {name: ident.peer_id for name, ident in node_identities(resolved).items()}
    assert sybil == sybil_spec(spec, raw)
    (waiting,) = sybil.behaviours(None)
    (covert,) = sybil.behaviours(10 * NS)
    assert covert.at == 13 * NS and waiting.at > covert.at and covert.then == waiting.then


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


SPAM = """\
name: spam
seed: 1
groups:
  - name: honest
    count: 12
    router: gossipsub-v1.1
    prefix: h
    router_params: {TopicWeight: 1.0, InvalidMessageDeliveriesWeight: -1.0, InvalidMessageDeliveriesDecay: 0.9}
  - name: sybils
    count: 3
    router: gossipsub-v1.1
    prefix: s
    adversary: {bad_boy: true, censor: true, invalid_messages: 2, attack_degree: 8}
overlay: {type: random, degree: 3}
links:
  latency: {model: constant, ms: 20}
workload:
  messages: 5
  interval: 1s
  publishers: {nodes: [h1]}
duration: 8s
linger: 2s
"""


def test_simulated_bad_boys_never_prune_and_their_forged_messages_are_rejected_and_scored(tmp_path) -> None:
    """In the simulator (modelled signatures): every forged message a sybil
    sends is rejected as an invalid signature by the honest node it reaches,
    none is delivered, the honest nodes' P4 of the sybils goes negative, and
    bad boy GRAFTs and never sends a PRUNE or an IHAVE (the PRUNEs in its
    trace are honest nodes leaving its mesh)."""
    out = tmp_path / "run"
    done = subprocess.run([TESTBED, "sim", str(write(tmp_path, SPAM)), "--out", str(out), "--no-report"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    traces = {p.stem: list(read_trace(p)) for p in (out / "traces").glob("*.pb")}
    sybil_ids = {traces[f"s{i}"][0].peerID for i in range(3)}
    rejected = [ev.rejectMessage for h in range(12) for ev in traces[f"h{h}"] if ev.type == REJECT]
    assert rejected and {r.reason for r in rejected} == {"invalid signature"}
    assert {r.receivedFrom for r in rejected} <= sybil_ids
    delivered = {ev.deliverMessage.messageID for evs in traces.values() for ev in evs if ev.type == DELIVER}
    assert not delivered & {r.messageID for r in rejected}
    for i in range(3):
        sent = [ev.sendRPC.meta.control for ev in traces[f"s{i}"] if ev.type == SEND_RPC]
        assert any(c.graft for c in sent) and not any(c.prune or c.ihave for c in sent), i
    b58 = peer_ids_b58(load_experiment(write(tmp_path, SPAM)).resolve(1))
    sybils_b58 = {b58[f"s{i}"] for i in range(3)}
    last: dict[tuple[str, str], float] = {}
    for h in range(12):
        with (out / "scores" / f"h{h}.csv").open() as f:
            for row in csv.DictReader(f):
                last[(f"h{h}", row["peer"])] = float(row["p4"])
    assert any(peer in sybils_b58 for _, peer in last)
    assert all(p4 < 0 for (_, peer), p4 in last.items() if peer in sybils_b58)
    assert all(p4 == 0 for (_, peer), p4 in last.items() if peer not in sybils_b58)


@requires_java
def test_analyze_checks_an_attack_runs_own_expectations_and_asserts(tmp_path) -> None:
    """`testbed analyze` (the console script) on a simulated attack run: the
    experiment's expectations and --assert on the attack figures are checked,
    not refused as unknown metrics (they were, 2026-12-02: its list of
    summary keys had none of them)."""
    out = tmp_path / "run"
    text = FILE + "expectations:\n  - honest_delivery_ratio >= 0.5\n  - victim_mesh_sybil_fraction_end <= 1\n"
    done = subprocess.run([TESTBED, "sim", str(write(tmp_path, text)), "--out", str(out), "--no-report"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    analysed = subprocess.run([TESTBED, "analyze", str(out), "--json", "--assert", "honest_latency_p99_ms < 60000",
                               "--assert", "mesh_sybil_fraction_max <= 1"], capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    summary = json.loads(analysed.stdout)
    checked = {a["expr"]: a["passed"] for a in summary["assertions"]}
    assert checked == {"honest_delivery_ratio >= 0.5": True, "victim_mesh_sybil_fraction_end <= 1": True,
                       "honest_latency_p99_ms < 60000": True, "mesh_sybil_fraction_max <= 1": True}
    assert summary["sybils"] == 6 and summary["honest_delivery_ratio"] >= 0.5


COVERT = """\
  - name: covert
    count: 3
    router: gossipsub
    prefix: c
    adversary: {censor: true, start: 4s}
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["process", "docker"])
def test_real_backends_run_sybils_and_covert_ones_switch_at_their_start(backend, tmp_path) -> None:
    """The router daemon wraps its engine in the sybil's behaviours: the
    eclipsing censors withhold from the start, the covert ones only from
    `start` seconds after the workload began (which the controller tells
    them), and the honest nodes withhold nothing."""
    if backend == "docker" and needs_docker.args[0]:
        pytest.skip(needs_docker.kwargs["reason"])
    text = FILE.replace("overlay:", COVERT + "overlay:")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "TESTBED_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([TESTBED, "run", str(write(tmp_path, text)), "--backend", backend, "--out", str(out),
                           "--no-report"], capture_output=True, text=True, env=env, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    drops = {p.stem: [ev.timestamp for ev in read_trace(p) if ev.type == DROP_RPC] for p in (out / "traces").glob("*.pb")}
    assert all(drops[f"s{i}"] for i in range(6)) and all(drops[f"c{i}"] for i in range(3))
    assert not any(drops[f"h{i}"] for i in range(20))
    workload_t0 = json.loads((out / "manifest.json").read_text())["workload_t0_ns"]
    assert min(min(drops[f"c{i}"]) for i in range(3)) >= workload_t0 + 4 * 10**9
