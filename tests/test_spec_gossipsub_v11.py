"""gossipsub v1.1, rule by rule (libp2p/specs pubsub/gossipsub/gossipsub-v1.1.md).

Each test is named after the rule it checks, grouped by the spec's sections;
docs/gossipsub-v1.1.md maps every rule to these tests and to the engine
method (node/engine/gossipsub_v11.py). The score arithmetic itself is
checked against go-libp2p-pubsub's values in test_peer_score.py; here the
score is driven through P5 (AppSpecificWeight 1) to place peers above or
below the thresholds.
"""

from __future__ import annotations

from engine_harness import (
    S,
    Network,
    add_peers,
    control_of,
    control_rpc,
    forwarded,
    grafted,
    ihave_to,
    lone,
    msg,
    peer_names,
    publish_rpc,
    pruned,
    sub_rpc,
)
from node.engine import TraceType
from node.engine.api import FLOODSUB_ID, MESHSUB_ID, MESHSUB_V11_ID, MESHSUB_V12_ID, protocol_order
from node.engine.registry import negotiate
from node.wire.rpc import IHave, IWant, Prune

T = "t"
V11 = "gossipsub-v1.1"
SMALL = {"D": 4, "D_low": 3, "D_high": 6, "D_out": 1, "D_score": 2, "AppSpecificWeight": 1.0}


def router(params=None, peers=8, topic=T, seed=0, outbound=False, kind=V11):
    r = lone(kind, {**SMALL, **(params or {})}, seed)
    add_peers(r, peer_names("p", peers), [topic], outbound=outbound)
    return r


def joined(params=None, peers=8, **kw):
    r = router(params, peers, **kw)
    r.join(0, T)
    return r


def rate(r, peer, p5):
    r.score.set_app_specific_score(peer, p5)


def prune_of(out, peer):
    (prune,) = control_of(out, peer).prune
    return prune


# ---------------------------------------------------------------- Protocol Id


def test_protocol_ids_negotiate_newest_common_version_with_fallback():
    v10 = frozenset({MESHSUB_ID, FLOODSUB_ID})
    v11 = frozenset({MESHSUB_V11_ID, MESHSUB_ID, FLOODSUB_ID})
    v12 = frozenset({MESHSUB_V12_ID, MESHSUB_V11_ID, MESHSUB_ID, FLOODSUB_ID})
    assert negotiate(v12, v12, MESHSUB_V12_ID) == MESHSUB_V12_ID
    assert negotiate(v12, v11, MESHSUB_V12_ID) == MESHSUB_V11_ID
    assert negotiate(v12, v10, MESHSUB_V12_ID) == MESHSUB_ID
    assert negotiate(v11, v10, MESHSUB_V11_ID) == MESHSUB_ID
    assert negotiate(v12, frozenset({FLOODSUB_ID}), MESHSUB_V12_ID) == FLOODSUB_ID
    assert protocol_order(MESHSUB_V12_ID, v12) == (MESHSUB_V12_ID, MESHSUB_V11_ID, MESHSUB_ID, FLOODSUB_ID)


def test_mixed_versions_form_one_mesh_and_deliver_everything():
    kinds = {f"n{i}": ("gossipsub", V11, "gossipsub-v1.2", "floodsub")[i % 4] for i in range(16)}
    net = Network.build(kinds, edges="full", seed=2)
    net.join_all(T)
    net.start_heartbeats()
    net.run_for(2)
    mids = [net.publish(f"n{i}", T) for i in range(4)]
    net.run_for(2)
    assert_all_delivered(net, mids)
    assert net.engine("n2").peers[b"n1"] == MESHSUB_V11_ID
    assert net.engine("n2").peers[b"n0"] == MESHSUB_ID
    assert net.engine("n2").peers[b"n3"] == FLOODSUB_ID


def assert_all_delivered(net, mids):
    for name in net.names:
        own = {ev.message_id for ev in net.events(name, TraceType.PUBLISH_MESSAGE)}
        assert set(mids) - own <= set(net.delivered_ids(name)), name


# ---------------------------------------------------------------- Explicit Peering Agreements


def test_explicit_peer_graft_is_refused_with_prune():
    r = joined()
    r.set_direct_peers(frozenset({b"p07"}))
    r.mesh[T].discard(b"p07")
    out = r.handle_rpc(0, b"p07", control_rpc(graft=(T,)))
    assert b"p07" not in r.mesh[T]
    assert pruned(out) == {b"p07"}


def test_explicit_peers_get_every_message_outside_the_mesh_and_are_never_grafted():
    r = router(peers=8)
    r.set_direct_peers(frozenset({b"p07"}))
    r.join(0, T)
    assert b"p07" not in r.mesh[T]
    r.heartbeat(1 * S)
    assert b"p07" not in r.mesh[T]
    out = r.handle_rpc(1 * S, b"p00", publish_rpc(msg(b"o", 1)))
    assert b"p07" in forwarded(out)


def test_explicit_peers_are_never_graylisted_and_are_dialled_when_missing():
    r = joined({"GraylistThreshold": -90.0})
    r.set_direct_peers(frozenset({b"p07", b"gone"}))
    rate(r, b"p07", -1000)
    out = r.handle_rpc(0, b"p07", publish_rpc(msg(b"o", 1)))
    assert [ev.type for ev in out.trace if ev.type == TraceType.DELIVER_MESSAGE]
    assert r.heartbeat(1 * S).dials == (b"gone",)


# ---------------------------------------------------------------- PRUNE Backoff and Peer Exchange


def test_prune_to_v11_peer_carries_backoff_and_v10_peer_gets_v10_prune():
    r = router(peers=0)
    add_peers(r, [b"new"], [T])
    add_peers(r, [b"old"], [T], protocol=MESHSUB_ID)
    r.join(0, T)
    out = r.leave(1 * S, T)
    assert prune_of(out, b"new") == Prune(T, (), 10)  # UnsubscribeBackoff
    assert prune_of(out, b"old") == Prune(T)


def test_pruned_peer_is_not_regrafted_within_backoff():
    r = joined({"D_high": 6}, peers=10)
    victims = set(r.mesh[T])
    for peer in sorted(victims):
        r.handle_rpc(0, peer, control_rpc(prune=(Prune(T, (), 5),)))
    assert not r.mesh[T] & victims
    r.heartbeat(1 * S)
    assert not r.mesh[T] & victims
    r.heartbeat(7 * S)  # backoff 5 s + one heartbeat of slack has passed
    assert len(r.mesh[T]) >= 3


def test_prune_without_backoff_backs_off_for_PruneBackoff():
    r = joined()
    peer = sorted(r.mesh[T])[0]
    r.handle_rpc(0, peer, control_rpc(prune=(T,)))
    assert r.backoff.until(T, peer) == 60 * S


def test_graft_within_backoff_is_refused_and_penalised_twice_inside_GraftFloodThreshold():
    r = joined({"BehaviourPenaltyWeight": -1.0, "BehaviourPenaltyDecay": 0.9})
    peer = sorted(r.mesh[T])[0]
    r.handle_rpc(0, peer, control_rpc(prune=(T,)))
    out = r.handle_rpc(1 * S, peer, control_rpc(graft=(T,)))
    assert peer not in r.mesh[T] and pruned(out) == {peer}
    assert r.score.peer_stats[peer].behaviour_penalty == 2  # within 10 s of the PRUNE
    r.handle_rpc(30 * S, peer, control_rpc(graft=(T,)))
    assert r.score.peer_stats[peer].behaviour_penalty == 3  # later: one


def test_leave_backs_off_with_UnsubscribeBackoff():
    r = joined()
    members = sorted(r.mesh[T])
    r.leave(0, T)
    assert all(r.backoff.until(T, p) == 10 * S for p in members)


def test_prune_for_oversubscription_carries_px_of_nonnegative_peers():
    r = router({"DoPX": True, "PrunePeers": 3}, peers=12, outbound=True)
    rate(r, b"p11", -5)
    r.join(0, T)
    for peer in peer_names("p", 12):
        r.handle_rpc(0, peer, control_rpc(graft=(T,)))
    out = r.heartbeat(1 * S)
    prunes = {p: prune_of(out, p) for p in pruned(out)}
    assert len(prunes) == 11 - 4
    for target, prune in prunes.items():
        assert len(prune.peers) == 3 and target not in prune.peers and b"p11" not in prune.peers
        assert prune.backoff == 60


def test_peer_exchange_dials_unknown_peers_only_from_peers_above_AcceptPXThreshold():
    r = joined({"AcceptPXThreshold": 5.0})
    good, bad = sorted(r.mesh[T])[:2]
    rate(r, good, 10)
    px = Prune(T, (b"x1", b"x2", good), 60)
    assert r.handle_rpc(0, good, control_rpc(prune=(px,))).dials == (b"x1", b"x2")
    assert r.handle_rpc(0, bad, control_rpc(prune=(px,))).dials == ()


# ---------------------------------------------------------------- Flood Publishing


def test_flood_publish_sends_own_message_to_all_topic_peers_above_PublishThreshold():
    r = joined(peers=10)
    rate(r, b"p09", -60)  # below PublishThreshold (-50)
    out = r.publish(0, T, b"x")
    assert set(forwarded(out)) == set(peer_names("p", 9))


def test_without_flood_publish_own_message_goes_to_the_mesh():
    r = joined({"FloodPublish": False}, peers=10)
    assert set(forwarded(r.publish(0, T, b"x"))) == r.mesh[T]


def test_forwarded_messages_use_the_mesh_not_flooding():
    r = joined(peers=10)
    out = r.handle_rpc(0, b"p09", publish_rpc(msg(b"o", 1)))
    assert set(forwarded(out)) == r.mesh[T] - {b"p09"}


# ---------------------------------------------------------------- Adaptive Gossip Dissemination


def gossiping(params, peers):
    r = joined(params, peers=peers)
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    return r


def test_gossip_goes_to_GossipFactor_of_eligible_peers():
    r = gossiping({"D_lazy": 2, "GossipFactor": 0.25}, peers=44)
    assert len(ihave_to(r.heartbeat(1 * S))) == int(0.25 * 40)


def test_gossip_goes_to_at_least_D_lazy_peers():
    r = gossiping({"D_lazy": 6, "GossipFactor": 0.05}, peers=44)
    assert len(ihave_to(r.heartbeat(1 * S))) == 6


def test_no_gossip_to_peers_below_GossipThreshold():
    r = gossiping({"D_lazy": 50}, peers=12)
    rate(r, b"p11", -20)
    targets = set(ihave_to(r.heartbeat(1 * S)))
    assert b"p11" not in targets and targets == set(peer_names("p", 11)) - r.mesh[T]


# ---------------------------------------------------------------- Outbound Mesh Quotas


def test_graft_at_D_high_is_accepted_only_from_outbound_peers():
    r = joined(peers=0)
    add_peers(r, peer_names("i", 8), [T])
    add_peers(r, [b"out"], [T], outbound=True)
    for peer in peer_names("i", 6):
        r.handle_rpc(0, peer, control_rpc(graft=(T,)))
    assert len(r.mesh[T]) == 6  # D_high
    assert pruned(r.handle_rpc(0, b"i07", control_rpc(graft=(T,)))) == {b"i07"}
    r.handle_rpc(0, b"out", control_rpc(graft=(T,)))
    assert b"out" in r.mesh[T]


def test_pruning_for_oversubscription_keeps_D_out_outbound_peers():
    r = router({"D_out": 2}, peers=0)
    add_peers(r, peer_names("i", 10), [T])
    add_peers(r, [b"o1", b"o2"], [T], outbound=True)
    r.join(0, T)
    for peer in [*peer_names("i", 10), b"o1", b"o2"]:
        r.handle_rpc(0, peer, control_rpc(graft=(T,)))
    r.heartbeat(1 * S)
    assert len(r.mesh[T]) == 4 and {b"o1", b"o2"} <= r.mesh[T]


def test_heartbeat_grafts_outbound_peers_to_fill_D_out():
    r = router({"D_out": 2}, peers=0)
    add_peers(r, peer_names("i", 4), [T])
    r.join(0, T)
    add_peers(r, [b"o1", b"o2", b"o3"], [T], outbound=True)
    out = r.heartbeat(1 * S)
    assert len(grafted(out)) == 2 and grafted(out) <= {b"o1", b"o2", b"o3"}


# ---------------------------------------------------------------- Heartbeat Maintenance (score)


def test_heartbeat_prunes_negative_score_peers_without_px():
    r = joined({"DoPX": True}, peers=8)
    bad = sorted(r.mesh[T])[0]
    rate(r, bad, -1)
    out = r.heartbeat(1 * S)
    assert bad not in r.mesh[T] and prune_of(out, bad).peers == ()


def test_negative_score_peers_are_not_grafted():
    r = router(peers=6)
    for peer in peer_names("p", 3):
        rate(r, peer, -1)
    r.join(0, T)
    assert r.mesh[T] == set(peer_names("p", 6)[3:])


def test_pruning_for_oversubscription_keeps_the_best_D_score_peers():
    r = joined({"D_score": 2, "D_out": 0}, peers=10, outbound=True)
    for i, peer in enumerate(peer_names("p", 10)):
        rate(r, peer, float(i))
        r.handle_rpc(0, peer, control_rpc(graft=(T,)))
    r.heartbeat(1 * S)
    assert {b"p09", b"p08"} <= r.mesh[T] and len(r.mesh[T]) == 4


def test_graft_from_negative_score_peer_is_refused():
    r = joined(peers=8)
    outsider = sorted(set(peer_names("p", 8)) - r.mesh[T])[0]
    rate(r, outsider, -1)
    assert pruned(r.handle_rpc(0, outsider, control_rpc(graft=(T,)))) == {outsider}


# ---------------------------------------------------------------- Opportunistic Grafting


def test_opportunistic_grafting_adds_peers_above_a_low_median():
    r = joined({"OpportunisticGraftTicks": 1, "OpportunisticGraftPeers": 2,
                "OpportunisticGraftThreshold": 5.0}, peers=10)
    for peer in sorted(set(peer_names("p", 10)) - r.mesh[T]):
        rate(r, peer, 10)
    out = r.heartbeat(1 * S)
    assert len(grafted(out)) == 2 and len(r.mesh[T]) == 6


def test_no_opportunistic_grafting_when_the_median_is_high_enough():
    r = joined({"OpportunisticGraftTicks": 1, "OpportunisticGraftThreshold": 0.0}, peers=10)
    assert grafted(r.heartbeat(1 * S)) == set()


# ---------------------------------------------------------------- Score in the engine


def test_first_deliveries_through_the_engine_raise_the_score():
    r = joined({"TopicWeight": 1.0, "FirstMessageDeliveriesWeight": 1.0, "FirstMessageDeliveriesCap": 10.0})
    for i in range(3):
        r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", i)))
    r.handle_rpc(0, b"p01", publish_rpc(msg(b"o", 0)))  # a duplicate earns nothing
    assert (r.score.score(b"p00"), r.score.score(b"p01")) == (3.0, 0.0)


def test_score_decays_every_DecayInterval_at_the_heartbeat():
    r = joined({"BehaviourPenaltyWeight": -1.0, "BehaviourPenaltyDecay": 0.5, "DecayInterval": 2.0})
    r.score.add_penalty(b"p00", 4)
    r.heartbeat(1 * S)
    r.heartbeat(2 * S)
    assert r.score.score(b"p00") == -16.0
    r.heartbeat(3 * S)
    assert r.score.score(b"p00") == -4.0


def test_negative_score_is_retained_across_reconnect():
    r = joined({"RetainScore": 30.0, "BehaviourPenaltyWeight": -1.0})
    r.score.add_penalty(b"p00", 3)
    r.remove_peer(1 * S, b"p00")
    r.add_peer(2 * S, b"p00", MESHSUB_V11_ID)
    assert r.score.score(b"p00") == -9.0


def test_invalid_message_lowers_the_senders_score():
    r = joined({"TopicWeight": 1.0, "InvalidMessageDeliveriesWeight": -1.0})
    r.validator = lambda m: False
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    assert r.score.score(b"p00") == -1.0


# ---------------------------------------------------------------- Spam Protection Measures


def test_graft_for_unknown_topic_is_ignored():
    r = joined()
    out = r.handle_rpc(0, b"p00", control_rpc(graft=("unknown",)))
    assert out.sends == ()


def test_iwant_promise_broken_earns_a_behaviour_penalty():
    r = joined({"IWantFollowupTime": 3.0, "BehaviourPenaltyWeight": -1.0})
    outsider = sorted(set(peer_names("p", 8)) - r.mesh[T])[0]
    out = r.handle_rpc(0, outsider, control_rpc(ihave=(IHave(T, (b"m1", b"m2")),)))
    assert control_of(out, outsider).iwant == (IWant((b"m1", b"m2")),)
    r.heartbeat(2 * S)
    assert r.score.score(outsider) == 0
    r.heartbeat(4 * S)
    assert r.score.score(outsider) == -1.0


def test_iwant_promise_is_kept_by_a_delivery_from_anyone():
    r = joined({"IWantFollowupTime": 3.0, "BehaviourPenaltyWeight": -1.0})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p07", control_rpc(ihave=(IHave(T, (m.id,)),)))
    r.handle_rpc(1 * S, b"p00", publish_rpc(m))
    r.heartbeat(4 * S)
    assert r.score.score(b"p07") == 0


def test_ihave_beyond_MaxIHaveMessages_per_heartbeat_is_ignored():
    r = joined({"MaxIHaveMessages": 2})
    asks = [control_of(r.handle_rpc(0, b"p07", control_rpc(ihave=(IHave(T, (bytes([i]),)),))), b"p07").iwant
            for i in range(3)]
    assert [bool(a) for a in asks] == [True, True, False]
    r.heartbeat(1 * S)
    assert control_of(r.handle_rpc(1 * S, b"p07", control_rpc(ihave=(IHave(T, (b"z",)),))), b"p07").iwant


def test_ids_asked_per_heartbeat_are_capped_at_MaxIHaveLength():
    r = joined({"MaxIHaveLength": 3})
    out = r.handle_rpc(0, b"p07", control_rpc(ihave=(IHave(T, tuple(bytes([i]) for i in range(5))),)))
    assert len(control_of(out, b"p07").iwant[0].message_ids) == 3
    assert r.handle_rpc(0, b"p07", control_rpc(ihave=(IHave(T, (b"z",)),))).sends == ()


def test_iwant_answers_at_most_GossipRetransmission_times_per_peer():
    r = joined({"GossipRetransmission": 2})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    answers = [bool(forwarded(r.handle_rpc(0, b"p07", control_rpc(iwant=(IWant((m.id,)),))))) for _ in range(3)]
    assert answers == [True, True, False]


def test_gossip_from_peers_below_GossipThreshold_is_ignored():
    r = joined()
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    rate(r, b"p07", -20)
    assert r.handle_rpc(0, b"p07", control_rpc(ihave=(IHave(T, (b"new",)),))).sends == ()
    assert r.handle_rpc(0, b"p07", control_rpc(iwant=(IWant((m.id,)),))).sends == ()


def test_graylisted_peer_rpcs_are_ignored_but_subscriptions_are_kept():
    r = joined()
    rate(r, b"p07", -100)  # below GraylistThreshold (-80)
    out = r.handle_rpc(0, b"p07", publish_rpc(msg(b"o", 1)))
    assert not out.deliveries
    r.handle_rpc(0, b"p07", sub_rpc("other"))
    assert b"p07" in r.topics["other"]
    assert r.handle_rpc(0, b"p07", control_rpc(ihave=(IHave(T, (b"new",)),))).sends == ()


# ---------------------------------------------------------------- A network


def test_v11_network_delivers_everything_under_latency():
    net = Network.build(V11, 20, edges="full", seed=4, latency=(10, 80))
    net.join_all(T)
    net.start_heartbeats()
    net.run_for(2)
    mids = [net.publish(f"n{i}", T, bytes(100)) for i in range(5)]
    net.run_for(3)
    assert_all_delivered(net, mids)
    assert all(3 <= len(net.mesh(n, T)) for n in net.names)
