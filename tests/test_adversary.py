"""Adversary behaviours (node/engine/adversary/): each one on a small
lockstep network, asserting what the honest nodes around a sybil see."""

from __future__ import annotations

import random

import pytest

from node.engine import TraceType
from node.engine.adversary import (
    BadBoy, Censor, Covert, Degrade, Eclipse, GraftDuringBackoff, IHaveFlood, InvalidMessages, IWantFlood, Sybil,
)
from node.wire.rpc import Control, Graft, Prune, Rpc
from tests.engine_harness import S, Network

T = "t"
P7 = {"BehaviourPenaltyWeight": -1.0, "BehaviourPenaltyDecay": 0.9}  # only P7 counts
SMALL_MESH = {"D": 2, "D_low": 2, "D_high": 3}
V11_QUOTAS = {"D_out": 1, "D_score": 1}  # within v1.1's rules for that small a mesh
P4 = {"TopicWeight": 1.0, "InvalidMessageDeliveriesWeight": -1.0, "InvalidMessageDeliveriesDecay": 0.9}  # only P4


def line(kind: str, behaviours: tuple, params: dict | None = None) -> Network:
    """a - s - b: every message between a and b passes through the sybil s."""
    net = Network({"a": kind, "s": kind, "b": kind}, params=params or {}, seed=3)
    net.engines["s"] = Sybil(net.engines["s"], behaviours, random.Random(11))
    net.connect("a", "s")
    net.connect("s", "b")
    net.join_all(T)
    net.settle()
    net.start_heartbeats()
    net.run_for(2)  # heartbeats fill the meshes
    return net


@pytest.mark.parametrize("kind", ["gossipsub", "gossipsub-v1.1"])
def test_censor_accepts_but_never_forwards_and_traces_the_drop(kind: str) -> None:
    net = line(kind, (Censor(),))
    mid = net.publish("a", T)
    net.run_for(5)
    assert mid in net.delivered_ids("s")
    assert mid not in net.delivered_ids("b")
    drops = net.events("s", TraceType.DROP_RPC)
    assert drops and all(ev.peer == b"b" for ev in drops)
    assert drops[0].rpc is not None and drops[0].rpc.publish[0].id == mid


def test_censor_of_chosen_publishers_forwards_the_others() -> None:
    net = line("gossipsub", (Censor(frozenset({b"a"})),))
    from_a = net.publish("a", T)
    from_b = net.publish("b", T)
    net.settle()
    assert from_a not in net.delivered_ids("b")
    assert from_b in net.delivered_ids("a")


def test_a_sybil_forwards_what_it_publishes_itself() -> None:
    net = line("gossipsub", (Censor(),))
    mid = net.publish("s", T)
    net.settle()
    assert mid in net.delivered_ids("a") and mid in net.delivered_ids("b")


@pytest.mark.parametrize("forward", [0.0, 0.3, 1.0])
def test_degrade_forwards_about_its_fraction(forward: float) -> None:
    net = line("meshsub", (Degrade(forward),))
    sent = [net.publish("a", T, bytes([i % 256, i // 256])) for i in range(400)]
    net.settle()
    share = sum(mid in set(net.delivered_ids("b")) for mid in sent) / len(sent)
    assert abs(share - forward) < 0.07


def test_degrade_rejects_a_fraction_outside_0_1() -> None:
    with pytest.raises(ValueError, match="degrade"):
        Degrade(1.5)


def test_covert_is_honest_until_its_time_then_attacks() -> None:
    net = line("meshsub", (Covert(at=10 * S, then=(Censor(),)),))
    before = net.publish("a", T, b"before")
    net.settle()
    net.run_for(10)
    after = net.publish("a", T, b"after")
    net.settle()
    assert before in net.delivered_ids("b")
    assert after not in net.delivered_ids("b")


def test_eclipse_grafts_its_targets_whatever_its_mesh_wants() -> None:
    """With D = 1 the sybil's engine keeps one mesh peer; eclipse grafts the
    target anyway and keeps grafting it after the target prunes."""
    params = {"D": 1, "D_low": 1, "D_high": 1}
    net = Network({"s": "gossipsub", **{f"h{i}": "gossipsub" for i in range(4)}, "v": "gossipsub"},
                  params=params, seed=5)
    net.engines["s"] = Sybil(net.engines["s"], (Eclipse(frozenset({b"v"})),), random.Random(1))
    for name in net.names:
        if name != "s":
            net.connect("s", name)
    net.join_all(T)
    net.settle()
    net.heartbeat("s")
    net.settle()
    assert b"v" in net.engines["s"].engine.mesh[T]
    assert "s" in net.mesh("v", T)
    net.receive("s", "v", Rpc(control=Control(prune=(Prune(T),))))
    assert b"v" not in net.engines["s"].engine.mesh[T]
    net.heartbeat("s")
    assert b"v" in net.engines["s"].engine.mesh[T]


def test_ihave_flood_makes_promises_a_v11_victim_scores_as_broken() -> None:
    net = line("gossipsub-v1.1", (IHaveFlood(5),), P7)
    net.run_for(30)
    ihaves = [ih for rpc in net.sent_between("s", "b") if rpc.control for ih in rpc.control.ihave]
    assert ihaves and all(len(ih.message_ids) == 5 for ih in ihaves)
    assert any(rpc.control and rpc.control.iwant for rpc in net.sent_between("b", "s"))
    assert net.engines["b"].score.score(b"s") < 0


def test_iwant_flood_asks_for_each_recent_id_repeatedly() -> None:
    net = line("gossipsub", (IWantFlood(3),))
    mid = net.publish("a", T)
    net.settle()
    net.heartbeat("s")
    iwants = [ids for rpc in net.sent_between("s", "a") if rpc.control for ids in rpc.control.iwant]
    assert [w.message_ids for w in iwants] == [(mid,)] * 3


def test_graft_during_backoff_is_a_behaviour_penalty_for_a_v11_victim() -> None:
    net = line("gossipsub-v1.1", (GraftDuringBackoff(),), P7)
    net.run_for(2)
    assert "s" in net.mesh("b", T)
    victim = net.engines["b"]
    net.apply("b", victim.leave(net.now, T))
    net.apply("b", victim.join(net.now, T))
    net.settle()
    net.heartbeat("s")
    net.settle()
    grafts = [g for rpc in net.sent_between("s", "b") if rpc.control for g in rpc.control.graft]
    assert len(grafts) >= 2
    assert victim.score.score(b"s") < 0


def star(kind: str, behaviours: tuple, params: dict, honest: int = 6) -> Network:
    """A sybil s dialled by every honest node h0.. (inbound peers, which a
    v1.1 engine refuses at D_high); the honest nodes form a ring, so each
    has other peers to mesh with."""
    names = [f"h{i}" for i in range(honest)]
    net = Network({"s": kind, **{n: kind for n in names}}, params=params, seed=7)
    net.engines["s"] = Sybil(net.engines["s"], behaviours, random.Random(5))
    for i, name in enumerate(names):
        net.connect(name, "s")
        net.connect(name, names[(i + 1) % honest])
    net.join_all(T)
    net.settle()
    return net


@pytest.mark.parametrize("kind", ["gossipsub", "gossipsub-v1.1"])
def test_bad_boy_grafts_every_peer_and_never_prunes_or_gossips(kind: str) -> None:
    """Its engine would keep 2 to 3 mesh peers; the bad boy holds all six
    and sends neither PRUNE nor IHAVE, and its trace shows no PRUNE."""
    net = star(kind, (BadBoy(),), {**SMALL_MESH, **(V11_QUOTAS if kind != "gossipsub" else {})})
    net.start_heartbeats()
    for _ in range(5):
        net.publish("h0", T, bytes([len(net.delivered_ids("s"))]))
        net.run_for(1)
    sybil = net.engines["s"]
    assert sybil.engine.mesh[T] == {f"h{i}".encode() for i in range(6)}
    sent = [rpc for n in net.names if n != "s" for rpc in net.sent_between("s", n)]
    assert not any(rpc.control and (rpc.control.prune or rpc.control.ihave) for rpc in sent)
    assert not net.events("s", TraceType.PRUNE)
    assert net.events("s", TraceType.GRAFT)


def test_bad_boy_regrafts_a_peer_a_minute_after_its_prune() -> None:
    net = star("gossipsub-v1.1", (BadBoy(),), {**SMALL_MESH, **V11_QUOTAS})
    net.heartbeat("s")
    net.settle()
    sybil = net.engines["s"]
    assert b"h0" in sybil.engine.mesh[T]
    net.receive("s", "h0", Rpc(control=Control(prune=(Prune(T, backoff=60),))))
    assert b"h0" not in sybil.engine.mesh[T]
    net.advance(59 * S)
    net.heartbeat("s")
    assert b"h0" not in sybil.engine.mesh[T]
    net.advance(1 * S)
    net.heartbeat("s")
    assert b"h0" in sybil.engine.mesh[T]


def test_bad_boy_keeps_a_graft_its_engine_would_refuse() -> None:
    """A v1.1 engine at D_high refuses an inbound GRAFT with a PRUNE; the
    bad boy takes the peer instead."""
    net = star("gossipsub-v1.1", (BadBoy(),), {**SMALL_MESH, **V11_QUOTAS}, honest=6)
    sybil = net.engines["s"]
    sybil.engine.mesh[T] = {b"h1", b"h2", b"h3"}
    net.receive("s", "h0", Rpc(control=Control(graft=(Graft(T),))))
    assert b"h0" in sybil.engine.mesh[T]
    assert not any(rpc.control and rpc.control.prune for rpc in net.sent_between("s", "h0"))


def test_invalid_messages_are_rejected_and_scored_into_p4() -> None:
    net = line("gossipsub-v1.1", (InvalidMessages(3),), P4)
    net.run_for(3)
    rejected = net.events("b", TraceType.REJECT_MESSAGE)
    assert len(rejected) >= 6 and {ev.reason for ev in rejected} == {"invalid signature"}
    assert all(ev.peer == b"s" for ev in rejected)
    assert not set(ev.message_id for ev in rejected) & set(net.delivered_ids("b"))
    assert net.engines["b"].score.score(b"s") < 0
    assert net.engines["b"].score.score(b"a") == 0
