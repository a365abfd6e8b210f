"""episub in the virtual-time simulator: its RPCs to peers it has no
connection to open one (orchestrator/sim/dial.py), a dial to a dead node
fails back to the engine, proximity comes from the link model's latency,
and a regional set-up with churn delivers every message."""

from __future__ import annotations

from pathlib import Path

from node.engine.api import NS, Output
from node.wire.episub import EpisubRpc, GetTopics
from orchestrator.experiment.spec import parse_experiment
from orchestrator.sim.dial import DialOnSend
from orchestrator.sim.simulator import _END, Simulator


REGIONS = """
name: episub-regions
seed: {seed}
groups:
  - {{name: src, count: 2, router: episub, topics: [blocks], region: europe}}
  - {{name: eu, count: 18, router: episub, topics: [blocks], region: europe}}
  - {{name: us, count: 20, router: episub, topics: [blocks], region: america}}
overlay: {{type: random, degree: 4}}
links:
  latency:
    model: regions
    matrix:
      europe: {{europe: 5, america: 60}}
      america: {{america: 5}}
workload:
  messages: 30
  interval: 500ms
  publishers: {{group: src}}
{churn}
duration: 30s
linger: 5s
"""
STEADY_CHURN = """churn:
  steady:
    fraction: 0.1
    action: kill
    session: {distribution: exponential, mean: 10s}
    downtime: {distribution: exponential, mean: 3s}
"""


def simulator(tmp_path: Path, churn: str = "", seed: int = 1) -> Simulator:
    resolved = parse_experiment(REGIONS.format(seed=seed, churn=churn), "inline.yaml").resolve(None)
    return Simulator(resolved, tmp_path / "traces", lambda *a, **k: None)


def test_episub_delivers_every_message_to_every_node_in_regions(tmp_path):
    sim = simulator(tmp_path)
    stats = sim.run()
    assert stats.expected_deliveries == 30 * 39  # all but the publisher
    assert stats.on_time_deliveries == stats.expected_deliveries


def test_episub_under_steady_churn_delivers_to_every_node_that_had_joined(tmp_path):
    sim = simulator(tmp_path, STEADY_CHURN, seed=2)
    stats = sim.run()
    missing = stats.expected_deliveries - stats.on_time_deliveries
    assert stats.expected_deliveries > 900 and missing <= stats.expected_deliveries * 0.005


def test_active_views_reach_beyond_the_topologys_neighbours_by_dialling(tmp_path):
    sim = simulator(tmp_path)
    sim.run()
    beyond = 0
    for node in sim.nodes.values():
        active = {p for p in node.engine.overlays["blocks"].membership.active}
        neighbours = {sim.nodes[n].peer_id for n in node.neighbours}
        beyond += len(active - neighbours)
        assert active <= set(node.conns)
    assert beyond > 0


def test_proximity_comes_from_the_link_models_latency(tmp_path):
    sim = simulator(tmp_path)
    sim.run()
    by_id = {n.peer_id: n for n in sim.nodes.values()}
    node = sim.nodes["eu-0"]
    rtt = node.engine.rtt
    measured = [p for p in by_id if p != node.peer_id and rtt.known(p)]
    assert measured
    for peer in measured:
        one_way_ms = 5 if by_id[peer].name.startswith(("eu", "src")) else 60
        assert rtt.rtt(peer) == 2 * one_way_ms * NS // 1000


def test_a_dial_to_a_dead_node_fails_back_to_the_sender_a_round_trip_later(tmp_path, monkeypatch):
    sim = simulator(tmp_path)
    a, b = sim.nodes["eu-0"], sim.nodes["us-0"]
    for node in sim.nodes.values():
        sim._start(node, 0)
    sim._stop(b, graceful=False)
    failed = []
    real = a.engine.remove_peer
    monkeypatch.setattr(a.engine, "remove_peer", lambda now, peer: failed.append((now, peer)) or real(now, peer))
    sim._emit(a, Output(sends=((b.peer_id, EpisubRpc((GetTopics(),))),)))  # type: ignore[arg-type]
    sim._push(NS, _END)
    sim._loop(NS, None)
    assert (2 * 60 * NS // 1000, b.peer_id) in failed


def test_rpcs_wait_for_their_dial_in_order_and_one_dial_serves_them_all():
    dials = DialOnSend({b"id-b": "b"})
    first, second = EpisubRpc((GetTopics(),)), EpisubRpc((GetTopics(), GetTopics()))
    assert dials.hold("a", b"id-b", first) == "b"  # the first RPC starts the dial
    assert dials.hold("a", b"id-b", second) is None  # the next ones wait for it
    assert dials.hold("a", b"id-unknown", first) is None  # no node of the experiment
    assert dials.release("a", "b") == [first, second] and dials.release("a", "b") == []
    dials.hold("a", b"id-b", first)
    dials.forget("a")  # a stopped
    assert dials.release("a", "b") == []
