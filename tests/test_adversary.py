"""Adversary behaviours (node/engine/adversary/): each one on a small
lockstep network, asserting what the honest nodes around a sybil see."""

from __future__ import annotations

import random

import pytest

from node.engine import TraceType
from node.engine.adversary import (
    Censor, Covert, Degrade, Eclipse, GraftDuringBackoff, IHaveFlood, IWantFlood, Sybil,
)
from node.wire.rpc import Control, Prune, Rpc
from tests.engine_harness import S, Network

T = "t"
P7 = {"BehaviourPenaltyWeight": -1.0, "BehaviourPenaltyDecay": 0.9}  # only P7 counts


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
