"""The attack at dawn's mechanism, a group's `connect_at`: the overlay edges
between nodes that wait open at that workload time, every other edge at
the start. Checked from the raw traces (each node's ADD_PEER times), in the
simulator and on the process and docker backends, against the run log's
`edges_open`; and the resolved experiment, the initial dials and the
dialling side of a late edge, which the simulator and the real backends
must agree on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_helpers import assert_validate_refuses
from docker_fixtures import needs_docker
from node.libp2p.identity import peer_id_to_b58
from node.trace.file import read_trace
from node.trace.vocab import TraceType
from orchestrator.experiment.spec import load_experiment
from orchestrator.routers.nodeconfigs import dials, late_dials
from orchestrator.run.wallclock import on_wall_clock

TESTBED = Path(sys.executable).with_name("testbed")
CONNECT_AT = 4.0

FILE = f"""\
name: dawn
seed: 1
groups:
  - name: honest
    count: 10
    router: gossipsub-v1.1
    connect_at: {CONNECT_AT:g}s
  - name: sybils
    count: 3
    router: gossipsub-v1.1
    adversary: {{bad_boy: true, censor: true, attack_degree: 6}}
overlay: {{type: random, degree: 3}}
links:
  latency: {{model: constant, ms: 20}}
workload:
  messages: 6
  interval: 1s
  start: 0s
  publishers: {{group: honest, count: 2}}
duration: 8s
linger: 2s
"""


def write(tmp_path: Path, text: str = FILE) -> Path:
    path = tmp_path / "dawn.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_only_edges_between_waiting_nodes_open_late_at_the_earlier_time(tmp_path) -> None:
    two = FILE.replace("    adversary:", "    connect_at: 2s\n    adversary:")
    resolved = load_experiment(write(tmp_path, two)).resolve(1)
    late = resolved.late_edges()
    honest = {f"honest-{i}" for i in range(10)}
    assert late and all(at == (CONNECT_AT if a in honest and b in honest else 2.0) for (a, b), at in late.items())
    assert set(late) == set(resolved.edges), "every node waits: every edge opens late"
    only_honest = load_experiment(write(tmp_path)).resolve(1)
    late = only_honest.late_edges()
    assert set(late) == {(a, b) for a, b in only_honest.edges if a in honest and b in honest}
    assert set(late.values()) == {CONNECT_AT}


def test_up_leaves_late_edges_out_of_the_initial_dials_and_the_later_node_dials_them(tmp_path) -> None:
    resolved = load_experiment(write(tmp_path)).resolve(1)
    late = resolved.late_edges()
    initial = dials(resolved)
    for me, peers in initial.items():
        assert not any((me, p) in late or (p, me) in late for p in peers)
    order = {n.name: i for i, n in enumerate(resolved.nodes)}
    dialled_late = late_dials(resolved)
    assert sum(len(p) for p in dialled_late.values()) == len(late)
    for dialler, peers in dialled_late.items():
        assert all(order[dialler] > order[p] and at == CONNECT_AT for p, at in peers.items())
    dilated = load_experiment(write(tmp_path, "time_dilation: 3\n" + FILE)).resolve(1)
    assert {at for peers in late_dials(on_wall_clock(dilated)).values() for at in peers.values()} == {3 * CONNECT_AT}


def test_connect_at_is_in_the_digest_and_topology(tmp_path) -> None:
    resolved = load_experiment(write(tmp_path)).resolve(1)
    prompt = load_experiment(write(tmp_path, FILE.replace(f"    connect_at: {CONNECT_AT:g}s\n", ""))).resolve(1)
    assert resolved.digest() != prompt.digest()
    assert prompt.late_edges() == {}


@pytest.mark.parametrize("old, new, line, field, words", [
    (f"connect_at: {CONNECT_AT:g}s", "connect_at: soon", 7, "groups[0].connect_at", "soon"),
    ("router: gossipsub-v1.1\n    connect_at", "router: rust-libp2p\n    connect_at", 7, "groups[0].connect_at",
     "foreign router"),
])
def test_bad_connect_at_exits_2_naming_file_line_and_field(tmp_path, capsys, old, new, line, field, words) -> None:
    assert old in FILE
    path = write(tmp_path, FILE.replace(old, new))
    assert_validate_refuses(path, line, field, words, capsys)


def added_peers(run: Path) -> tuple[int, list[tuple[str, str, int]]]:
    """The run log's edges_open time, and every (node, peer, time) of an
    ADD_PEER in the traces."""
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    (opened,) = [e for e in events if e["kind"] == "edges_open"]
    name = {n["peer_id"]: n["name"] for n in json.loads((run / "topology.json").read_text())["nodes"]}
    added = []
    for path in (run / "traces").glob("*.pb"):
        for ev in read_trace(path):
            if ev.type == TraceType.ADD_PEER:
                added.append((path.stem, name[peer_id_to_b58(ev.addPeer.peerID)], ev.timestamp))
    return opened["t_ns"], added


def check_dawn(run: Path, tmp_path: Path) -> None:
    """Every late edge came up after edges_open and none before; every
    edge to a sybil came up before it."""
    resolved = load_experiment(write(tmp_path)).resolve(1)
    late = {frozenset(e) for e in resolved.late_edges()}
    opened, added = added_peers(run)
    late_added = [(n, p, t) for n, p, t in added if frozenset((n, p)) in late]
    assert {frozenset((n, p)) for n, p, _ in late_added} == late
    assert all(t >= opened for _, _, t in late_added), min(t for _, _, t in late_added) - opened
    to_sybils = [t for n, p, t in added if n.startswith("honest") and p.startswith("sybils")]
    assert to_sybils and max(to_sybils) < opened


def test_the_simulator_opens_late_edges_at_their_time(tmp_path) -> None:
    out = tmp_path / "run"
    done = subprocess.run([TESTBED, "sim", str(write(tmp_path)), "--out", str(out), "--no-report"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    (all_up,) = [e for e in events if e["kind"] == "all_up"]
    (opened,) = [e for e in events if e["kind"] == "edges_open"]
    assert opened["t_ns"] - all_up["t_ns"] == CONNECT_AT * 1e9
    check_dawn(out, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=needs_docker)])
def test_real_backends_dial_late_edges_at_their_time(backend, tmp_path) -> None:
    out = tmp_path / "run"
    done = subprocess.run([TESTBED, "run", str(write(tmp_path)), "--backend", backend, "--out", str(out),
                           "--no-report"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    check_dawn(out, tmp_path)
