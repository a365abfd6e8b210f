"""gossipsub v1.0, rule by rule (../shared/seeds/gossipsub-v1.0-spec.md).

Each test is named after the rule it checks, grouped by the spec's sections:
Topic Membership, Control Messages, Message Processing, Control Message
Piggybacking, Heartbeat (mesh maintenance, fanout maintenance, gossip
emission, mcache shift) and the seen cache. docs/protocol-choices.md maps every
rule to these tests and to the method that implements it.

Most tests drive one engine ("me") with hand-made peers; a few use the
lockstep network in engine_harness.
"""

from __future__ import annotations

import random

import pytest

from engine_harness import (
    MS,
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
    sends,
    sub_rpc,
    types,
)
from node.engine import TraceType
from node.engine.api import FLOODSUB_ID, MESHSUB_ID
from node.engine.gossipsub import GossipSubParams, GossipSubRouter
from node.wire.rpc import IHave, IWant, Rpc, SubOpts

T = "t"
SMALL = {"D": 4, "D_low": 3, "D_high": 6}


def subscribed(params=None, peers=8, topic=T, seed=0):
    """A gossipsub router joined to `topic` with `peers` subscribed peers."""
    r = lone("gossipsub", params or SMALL, seed)
    add_peers(r, peer_names("p", peers), [topic])
    r.join(0, topic)
    return r


# ---------------------------------------------------------------- Topic Membership


def test_hello_on_connect_announces_current_subscriptions():
    r = lone()
    r.join(0, "b")
    r.join(0, "a")
    out = r.add_peer(0, b"p", MESHSUB_ID)
    rpc = sends(out)[b"p"]
    assert rpc.subscriptions == (SubOpts(True, "a"), SubOpts(True, "b"))
    assert rpc.publish == () and rpc.control is None
    assert types(out) == [TraceType.ADD_PEER]


def test_hello_on_connect_with_no_subscriptions_sends_nothing():
    out = lone().add_peer(0, b"p", MESHSUB_ID)
    assert out.sends == ()


def test_hello_on_connect_goes_to_floodsub_peers_too():
    r = lone()
    r.join(0, T)
    assert sends(r.add_peer(0, b"f", FLOODSUB_ID))[b"f"].subscriptions == (SubOpts(True, T),)


def test_join_announces_subscribe_to_all_known_peers_regardless_of_topics():
    r = lone()
    add_peers(r, [b"a", b"b"], ["other"])
    add_peers(r, [b"c"])
    out = r.join(0, T)
    for peer in (b"a", b"b", b"c"):
        assert SubOpts(True, T) in sends(out)[peer].subscriptions
    assert types(out)[0] == TraceType.JOIN


def test_leave_announces_unsubscribe_to_all_known_peers():
    r = subscribed(peers=3)
    add_peers(r, [b"x"], ["other"])
    out = r.leave(0, T)
    for peer in (b"p00", b"p01", b"p02", b"x"):
        assert SubOpts(False, T) in sends(out)[peer].subscriptions


def test_join_without_fanout_grafts_D_topic_peers():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("p", 10), [T])
    add_peers(r, peer_names("q", 5), ["other"])
    out = r.join(0, T)
    assert len(r.mesh[T]) == SMALL["D"]
    assert r.mesh[T] <= set(peer_names("p", 10))
    assert grafted(out) == r.mesh[T]
    assert {ev.peer for ev in out.trace if ev.type == TraceType.GRAFT} == r.mesh[T]


def test_join_with_fewer_than_D_topic_peers_grafts_them_all():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("p", 2), [T])
    r.join(0, T)
    assert r.mesh[T] == set(peer_names("p", 2))


def test_join_grafts_only_gossipsub_peers_not_floodsub_peers():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("f", 5), [T], protocol=FLOODSUB_ID)
    add_peers(r, peer_names("g", 2), [T])
    out = r.join(0, T)
    assert r.mesh[T] == set(peer_names("g", 2))
    assert grafted(out) == set(peer_names("g", 2))


def test_join_takes_fanout_peers_first_then_fills_to_D_with_graft():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("early", 2), [T])
    r.publish(0, T, b"x")  # not subscribed: fanout = the 2 topic peers
    fanout = set(r.fanout[T])
    assert fanout == set(peer_names("early", 2))
    add_peers(r, peer_names("late", 8), [T])
    out = r.join(1, T)
    assert fanout <= r.mesh[T]
    assert len(r.mesh[T]) == SMALL["D"]
    assert grafted(out) == r.mesh[T]  # fanout peers are told with GRAFT too
    assert T not in r.fanout and T not in r.last_published


def test_join_with_full_fanout_moves_exactly_the_fanout_peers_to_the_mesh():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("p", 10), [T])
    r.publish(0, T, b"x")
    fanout = set(r.fanout[T])
    assert len(fanout) == SMALL["D"]
    r.join(1, T)
    assert r.mesh[T] == fanout


def test_join_sends_subscribe_and_graft_in_one_rpc():
    r = lone("gossipsub", SMALL)
    add_peers(r, [b"p"], [T])
    rpc = sends(r.join(0, T))[b"p"]
    assert rpc.subscriptions == (SubOpts(True, T),)
    assert [g.topic for g in rpc.control.graft] == [T]


def test_join_twice_is_a_no_op():
    r = subscribed()
    out = r.join(1, T)
    assert out.sends == () and out.trace == ()


def test_leave_prunes_the_mesh_and_forgets_it():
    r = subscribed()
    mesh = set(r.mesh[T])
    out = r.leave(1, T)
    assert pruned(out) == mesh
    for peer in mesh:
        assert [p.topic for p in control_of(out, peer).prune] == [T]
    assert T not in r.mesh and T not in r.subscriptions
    kinds = types(out)
    assert kinds[0] == TraceType.LEAVE and kinds.count(TraceType.PRUNE) == len(mesh)


def test_leave_unsubscribed_topic_is_a_no_op():
    out = lone().leave(0, T)
    assert out.sends == () and out.trace == ()


def test_leave_sends_unsubscribe_and_prune_in_one_rpc():
    r = subscribed(peers=1)
    rpc = sends(r.leave(1, T))[b"p00"]
    assert rpc.subscriptions == (SubOpts(False, T),)
    assert [p.topic for p in rpc.control.prune] == [T]


# ---------------------------------------------------------------- Control Messages


def test_graft_when_subscribed_adds_sender_to_mesh():
    r = lone("gossipsub", SMALL)
    add_peers(r, [b"a"], [T])
    r.join(0, T)
    add_peers(r, [b"b"], [T])
    out = r.handle_rpc(1, b"b", control_rpc(graft=(T,)))
    assert b"b" in r.mesh[T]
    assert out.sends == ()  # accepted silently
    assert [(ev.type, ev.peer, ev.topic) for ev in out.trace if ev.type == TraceType.GRAFT] == [
        (TraceType.GRAFT, b"b", T)
    ]


def test_graft_when_not_subscribed_answered_with_prune():
    r = lone("gossipsub", SMALL)
    add_peers(r, [b"a"], [T])
    out = r.handle_rpc(1, b"a", control_rpc(graft=(T,)))
    assert T not in r.mesh
    assert [p.topic for p in control_of(out, b"a").prune] == [T]
    assert TraceType.PRUNE not in types(out)  # no mesh change to trace


def test_graft_after_leave_answered_with_prune():
    r = subscribed()
    r.leave(1, T)
    out = r.handle_rpc(2, b"p00", control_rpc(graft=(T,)))
    assert [p.topic for p in control_of(out, b"p00").prune] == [T]


def test_graft_from_floodsub_peer_ignored():
    r = subscribed()
    add_peers(r, [b"f"], [T], protocol=FLOODSUB_ID)
    out = r.handle_rpc(1, b"f", control_rpc(graft=(T,)))
    assert b"f" not in r.mesh[T] and out.sends == ()


def test_prune_removes_sender_from_mesh():
    r = subscribed()
    peer = sorted(r.mesh[T])[0]
    out = r.handle_rpc(1, peer, control_rpc(prune=(T,)))
    assert peer not in r.mesh[T]
    assert out.sends == ()
    assert [(ev.type, ev.peer) for ev in out.trace if ev.type == TraceType.PRUNE] == [(TraceType.PRUNE, peer)]


def test_prune_from_peer_not_in_mesh_changes_nothing():
    r = subscribed(peers=10)
    outsider = sorted(set(peer_names("p", 10)) - r.mesh[T])[0]
    before = set(r.mesh[T])
    out = r.handle_rpc(1, outsider, control_rpc(prune=(T,)))
    assert r.mesh[T] == before and TraceType.PRUNE not in types(out)


def test_ihave_answered_with_iwant_only_for_unseen_ids():
    r = subscribed()
    seen = msg(b"o", 1)
    r.handle_rpc(1, b"p00", publish_rpc(seen))
    new1, new2 = msg(b"o", 2).id, msg(b"o", 3).id
    out = r.handle_rpc(2, b"p07", control_rpc(ihave=(IHave(T, (seen.id, new1, new2)),)))
    ctl = control_of(out, b"p07")
    assert [w.message_ids for w in ctl.iwant] == [(new1, new2)]


def test_ihave_with_only_seen_ids_sends_nothing():
    r = subscribed()
    m = msg(b"o", 1)
    r.handle_rpc(1, b"p00", publish_rpc(m))
    out = r.handle_rpc(2, b"p07", control_rpc(ihave=(IHave(T, (m.id,)),)))
    assert out.sends == ()


def test_ihave_for_topic_we_are_not_subscribed_to_ignored():
    r = subscribed()
    out = r.handle_rpc(1, b"p00", control_rpc(ihave=(IHave("other", (msg(b"o", 1, "other").id,)),)))
    assert out.sends == ()


def test_ihave_across_several_entries_is_one_iwant_without_repeats():
    r = subscribed()
    a, b = msg(b"o", 1).id, msg(b"o", 2).id
    out = r.handle_rpc(1, b"p00", control_rpc(ihave=(IHave(T, (a, b)), IHave(T, (b,)))))
    assert [w.message_ids for w in control_of(out, b"p00").iwant] == [(a, b)]


def test_iwant_answered_from_mcache():
    r = subscribed()
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    out = r.handle_rpc(1, b"p07", control_rpc(iwant=(IWant((m.id, msg(b"o", 9).id)),)))
    assert forwarded(out) == {b"p07": (m,)}


def test_iwant_answers_each_message_once_per_rpc():
    r = subscribed()
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    out = r.handle_rpc(1, b"p07", control_rpc(iwant=(IWant((m.id, m.id)), IWant((m.id,)))))
    assert forwarded(out) == {b"p07": (m,)}


def test_iwant_answered_only_while_mcache_still_holds_the_message():
    p = GossipSubParams(**SMALL, mcache_len=4, mcache_gossip=2)
    r = subscribed(SMALL | {"mcache_len": 4, "mcache_gossip": 2})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    ask = control_rpc(iwant=(IWant((m.id,)),))
    for beat in range(1, p.mcache_len):  # the current window plus mcache_len-1 older ones
        r.heartbeat(beat * S)
        assert forwarded(r.handle_rpc(beat * S, b"p07", ask)) == {b"p07": (m,)}
    r.heartbeat(p.mcache_len * S)
    assert r.handle_rpc(p.mcache_len * S, b"p07", ask).sends == ()
    assert r.seen.has(p.mcache_len * S, m.id)  # still seen: seen_ttl is separate


def test_control_handled_in_order_ihave_iwant_graft_prune():
    r = subscribed(peers=10)
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    outsider = sorted(set(peer_names("p", 10)) - r.mesh[T])[0]
    new = msg(b"o", 2).id
    rpc = control_rpc(ihave=(IHave(T, (new,)),), iwant=(IWant((m.id,)),), graft=(T,), prune=(T,))
    out = r.handle_rpc(1, outsider, rpc)
    assert outsider not in r.mesh[T]  # GRAFT, then PRUNE
    assert [ev.type for ev in out.trace if ev.type in (TraceType.GRAFT, TraceType.PRUNE)] == [
        TraceType.GRAFT, TraceType.PRUNE,
    ]
    reply = sends(out)[outsider]
    assert reply.publish == (m,) and [w.message_ids for w in reply.control.iwant] == [(new,)]


# ---------------------------------------------------------------- Message Processing


def test_message_delivered_once_and_traced():
    r = subscribed()
    m = msg(b"o", 1)
    out = r.handle_rpc(0, b"p00", publish_rpc(m))
    assert out.deliveries == (m,)
    (ev,) = [ev for ev in out.trace if ev.type == TraceType.DELIVER_MESSAGE]
    assert (ev.message_id, ev.topic, ev.peer) == (m.id, T, b"p00")


def test_message_processing_validation_rejects_before_forwarding():
    r = GossipSubRouter(b"me", random.Random(0), GossipSubParams(**SMALL), validator=lambda m: m.data != b"bad")
    add_peers(r, peer_names("p", 8), [T])
    r.join(0, T)
    bad = msg(b"o", 1, data=b"bad")
    out = r.handle_rpc(0, b"p00", publish_rpc(bad))
    assert out.deliveries == () and forwarded(out) == {}
    (ev,) = [ev for ev in out.trace if ev.type == TraceType.REJECT_MESSAGE]
    assert ev.reason == "validation failed" and ev.peer == b"p00"
    assert not r.seen.has(0, bad.id) and r.mcache.get(bad.id) is None


def test_message_processing_seen_check_drops_duplicates_and_traces_them():
    r = subscribed()
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    out = r.handle_rpc(1, b"p01", publish_rpc(m))
    assert out.deliveries == () and forwarded(out) == {}
    (ev,) = [ev for ev in out.trace if ev.type == TraceType.DUPLICATE_MESSAGE]
    assert (ev.message_id, ev.peer) == (m.id, b"p01")


def test_message_processing_never_reforwards_own_messages():
    r = subscribed()
    own = msg(b"me", 1)
    out = r.handle_rpc(0, b"p00", publish_rpc(own))
    assert out.deliveries == () and forwarded(out) == {}
    (ev,) = [ev for ev in out.trace if ev.type == TraceType.REJECT_MESSAGE]
    assert ev.reason == "self originated message"  # go's RejectSelfOrigin


def test_message_processing_own_published_message_coming_back_is_rejected_as_self_origin():
    r = subscribed()
    mid = [ev.message_id for ev in r.publish(0, T, b"x").trace if ev.type == TraceType.PUBLISH_MESSAGE][0]
    back = r.mcache.get(mid)
    out = r.handle_rpc(1, b"p00", publish_rpc(back))
    assert [ev.type for ev in out.trace if ev.type != TraceType.RECV_RPC] == [TraceType.REJECT_MESSAGE]


def test_message_forwarded_to_floodsub_peers_first_then_mesh():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("g", 8), [T])
    add_peers(r, peer_names("f", 3), [T], protocol=FLOODSUB_ID)
    r.join(0, T)
    out = r.handle_rpc(1, b"f00", publish_rpc(msg(b"o", 1)))
    order = [peer for peer, rpc in out.sends if rpc.publish]
    assert order == [b"f01", b"f02"] + sorted(r.mesh[T])


def test_message_not_forwarded_to_gossipsub_peers_outside_the_mesh():
    r = subscribed(peers=10)
    sender = sorted(r.mesh[T])[0]
    out = r.handle_rpc(1, sender, publish_rpc(msg(b"o", 1)))
    assert set(forwarded(out)) == r.mesh[T] - {sender}


def test_message_never_forwarded_back_to_sender_or_origin():
    r = subscribed(peers=3)
    assert r.mesh[T] == set(peer_names("p", 3))
    out = r.handle_rpc(1, b"p00", publish_rpc(msg(b"p01", 1)))
    assert set(forwarded(out)) == {b"p02"}


def test_message_for_unsubscribed_topic_ignored():
    r = subscribed()
    m = msg(b"o", 1, topic="other")
    out = r.handle_rpc(0, b"p00", publish_rpc(m))
    assert out.deliveries == () and out.sends == ()
    assert not r.seen.has(0, m.id)


def test_message_payload_processed_before_control():
    r = subscribed()
    m = msg(b"o", 1)
    rpc = Rpc(publish=(m,), control=control_rpc(ihave=(IHave(T, (m.id,)),)).control)
    out = r.handle_rpc(0, b"p00", rpc)
    assert out.deliveries == (m,)
    assert control_of(out, b"p00").iwant == ()  # already seen when the IHAVE is read


def test_subscriptions_processed_before_payload():
    r = lone("gossipsub", SMALL)
    r.add_peer(0, b"p", MESHSUB_ID)
    r.join(0, T)
    out = r.handle_rpc(0, b"p", Rpc(subscriptions=(SubOpts(True, T),), control=control_rpc(graft=(T,)).control))
    assert b"p" in r.mesh[T] and out.sends == ()


def test_publish_subscribed_sends_to_floodsub_peers_and_mesh():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("g", 8), [T])
    add_peers(r, peer_names("f", 2), [T], protocol=FLOODSUB_ID)
    r.join(0, T)
    out = r.publish(1, T, b"x")
    order = [peer for peer, rpc in out.sends if rpc.publish]
    assert order == peer_names("f", 2) + sorted(r.mesh[T])
    assert T not in r.fanout


def test_publisher_records_publish_message_then_deliver_from_itself():
    """go's publishMessage: DeliverMessage for the node's own message, with
    receivedFrom the publisher itself, before it is forwarded."""
    r = subscribed()
    out = r.publish(1, T, b"x")
    (m,) = out.deliveries
    assert m.from_peer == b"me" and m.data == b"x"
    kinds = [k for k in types(out) if k in (TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE)]
    assert kinds == [TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE]
    (ev,) = [ev for ev in out.trace if ev.type == TraceType.DELIVER_MESSAGE]
    assert (ev.message_id, ev.peer) == (m.id, b"me")


def test_publish_unsubscribed_goes_to_D_fanout_peers_with_last_publish_time():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("g", 10), [T])
    add_peers(r, peer_names("f", 2), [T], protocol=FLOODSUB_ID)
    out = r.publish(5 * S, T, b"x")
    assert len(r.fanout[T]) == SMALL["D"] and r.fanout[T] <= set(peer_names("g", 10))
    assert set(forwarded(out)) == r.fanout[T] | set(peer_names("f", 2))
    assert r.last_published[T] == 5 * S
    out2 = r.publish(7 * S, T, b"y")
    assert set(forwarded(out2)) == r.fanout[T] | set(peer_names("f", 2))  # same fanout reused
    assert r.last_published[T] == 7 * S


def test_publish_unsubscribed_with_no_topic_peers_fills_fanout_at_heartbeat():
    r = lone("gossipsub", SMALL)
    assert r.publish(0, T, b"x").sends == ()
    add_peers(r, peer_names("g", 6), [T])
    r.heartbeat(1 * S)
    assert len(r.fanout[T]) == SMALL["D"]


def test_message_ids_are_from_plus_8_byte_big_endian_seqno():
    r = subscribed()
    out = r.publish(1234, T, b"x")
    (m,) = forwarded(out)[sorted(r.mesh[T])[0]]
    assert m.from_peer == b"me" and len(m.seqno) == 8
    assert m.id == b"me" + m.seqno
    out2 = r.publish(1234, T, b"y")
    (m2,) = forwarded(out2)[sorted(r.mesh[T])[0]]
    assert int.from_bytes(m2.seqno, "big") == int.from_bytes(m.seqno, "big") + 1


def test_restarted_publisher_does_not_reuse_message_ids():
    first = subscribed()
    old = [ev.message_id for ev in first.publish(10 * S, T, b"x").trace if ev.type == TraceType.PUBLISH_MESSAGE]
    again = subscribed()  # a new engine for the same node, later
    new = [ev.message_id for ev in again.publish(20 * S, T, b"x").trace if ev.type == TraceType.PUBLISH_MESSAGE]
    assert old != new


# ---------------------------------------------------------------- seen cache


def test_seen_ttl_forgets_message_ids_after_seen_ttl():
    r = subscribed(SMALL | {"seen_ttl": 2.0})
    m = msg(b"o", 1)
    assert r.handle_rpc(0, b"p00", publish_rpc(m)).deliveries == (m,)
    assert r.handle_rpc(2 * S - 1, b"p01", publish_rpc(m)).deliveries == ()  # still seen
    assert r.handle_rpc(2 * S, b"p01", publish_rpc(m)).deliveries == (m,)  # expired: new again


def test_seen_ttl_expired_id_is_requested_again_on_ihave():
    r = subscribed(SMALL | {"seen_ttl": 2.0})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    ihave = control_rpc(ihave=(IHave(T, (m.id,)),))
    assert r.handle_rpc(1 * S, b"p01", ihave).sends == ()
    assert control_of(r.handle_rpc(3 * S, b"p01", ihave), b"p01").iwant == (IWant((m.id,)),)


# ---------------------------------------------------------------- peers coming and going


def test_peer_unsubscribe_removes_it_from_mesh_and_fanout_at_once_and_traces_prune():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("p", 8), [T, "f"])
    r.join(0, T)
    r.publish(0, "f", b"x")
    peer = sorted(r.mesh[T])[0]
    fpeer = sorted(r.fanout["f"])[0]
    out = r.handle_rpc(1, peer, sub_rpc(T, False))
    assert peer not in r.mesh[T]
    assert [(ev.type, ev.peer) for ev in out.trace if ev.type == TraceType.PRUNE] == [(TraceType.PRUNE, peer)]
    assert out.sends == ()  # nothing to tell: it left
    r.handle_rpc(1, fpeer, sub_rpc("f", False))
    assert fpeer not in r.fanout["f"]


def test_remove_peer_drops_it_from_mesh_and_fanout():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("p", 8), [T, "f"])
    r.join(0, T)
    r.publish(0, "f", b"x")
    peer = sorted(r.mesh[T] & r.fanout["f"])[0] if r.mesh[T] & r.fanout["f"] else sorted(r.mesh[T])[0]
    out = r.remove_peer(1, peer)
    assert peer not in r.mesh[T] and peer not in r.fanout["f"] and peer not in r.peers
    assert types(out) == [TraceType.REMOVE_PEER]  # as go: no PRUNE event on disconnect
    assert r.handle_rpc(2, peer, control_rpc(graft=(T,))).sends == ()  # unknown peer ignored


# ---------------------------------------------------------------- Heartbeat: mesh maintenance


def _mesh_of(r, size, topic=T):
    """Force mesh[topic] to `size` of the known topic peers."""
    r.mesh[topic] = set(sorted(r.topic_peers(topic))[:size])


def test_heartbeat_mesh_below_D_low_grafts_up_to_D():
    r = subscribed(peers=12)
    _mesh_of(r, SMALL["D_low"] - 1)
    before = set(r.mesh[T])
    out = r.heartbeat(1 * S)
    assert len(r.mesh[T]) == SMALL["D"]
    new = r.mesh[T] - before
    assert grafted(out) == new and len(new) == SMALL["D"] - SMALL["D_low"] + 1
    assert before <= r.mesh[T]


def test_heartbeat_mesh_at_D_low_grafts_nothing():
    r = subscribed(peers=12)
    _mesh_of(r, SMALL["D_low"])
    out = r.heartbeat(1 * S)
    assert grafted(out) == set() and len(r.mesh[T]) == SMALL["D_low"]


def test_heartbeat_mesh_below_D_low_grafts_only_gossipsub_topic_peers_outside_the_mesh():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("g", 2), [T])
    add_peers(r, peer_names("f", 4), [T], protocol=FLOODSUB_ID)
    add_peers(r, peer_names("o", 4), ["other"])
    r.join(0, T)
    assert r.mesh[T] == set(peer_names("g", 2))
    add_peers(r, [b"g99"], [T])
    out = r.heartbeat(1 * S)
    assert grafted(out) == {b"g99"}


def test_heartbeat_mesh_above_D_high_prunes_down_to_D():
    r = subscribed(peers=12)
    _mesh_of(r, SMALL["D_high"] + 2)
    before = set(r.mesh[T])
    out = r.heartbeat(1 * S)
    assert len(r.mesh[T]) == SMALL["D"] and r.mesh[T] <= before
    assert pruned(out) == before - r.mesh[T]
    assert {ev.peer for ev in out.trace if ev.type == TraceType.PRUNE} == before - r.mesh[T]


def test_heartbeat_mesh_at_D_high_prunes_nothing():
    r = subscribed(peers=12)
    _mesh_of(r, SMALL["D_high"])
    assert pruned(r.heartbeat(1 * S)) == set() and len(r.mesh[T]) == SMALL["D_high"]


def test_heartbeat_mesh_selection_is_random():
    chosen = set()
    for seed in range(8):
        r = subscribed(peers=12, seed=seed)
        _mesh_of(r, 0)
        r.heartbeat(1 * S)
        chosen.add(frozenset(r.mesh[T]))
    assert len(chosen) > 1


# ---------------------------------------------------------------- Heartbeat: fanout maintenance


def test_fanout_dropped_after_fanout_ttl_without_publishing():
    r = lone("gossipsub", SMALL | {"fanout_ttl": 10.0})
    add_peers(r, peer_names("g", 6), [T])
    r.publish(0, T, b"x")
    r.heartbeat(10 * S)  # exactly fanout_ttl: kept
    assert T in r.fanout
    r.heartbeat(10 * S + 1)
    assert T not in r.fanout and T not in r.last_published


def test_fanout_kept_while_publishing_within_fanout_ttl():
    r = lone("gossipsub", SMALL | {"fanout_ttl": 10.0})
    add_peers(r, peer_names("g", 6), [T])
    r.publish(0, T, b"x")
    r.publish(8 * S, T, b"y")
    r.heartbeat(15 * S)
    assert T in r.fanout


def test_fanout_topped_up_to_D_at_heartbeat():
    r = lone("gossipsub", SMALL)
    add_peers(r, peer_names("g", 2), [T])
    r.publish(0, T, b"x")
    assert len(r.fanout[T]) == 2
    add_peers(r, peer_names("h", 5), [T])
    add_peers(r, peer_names("f", 5), [T], protocol=FLOODSUB_ID)
    out = r.heartbeat(1 * S)
    assert len(r.fanout[T]) == SMALL["D"] and set(peer_names("g", 2)) <= r.fanout[T]
    assert not r.fanout[T] & set(peer_names("f", 5))
    assert grafted(out) == set()  # fanout peers are not told


# ---------------------------------------------------------------- Heartbeat: gossip emission


def test_gossip_emission_ihave_to_D_lazy_topic_peers_outside_mesh():
    r = subscribed(SMALL | {"D_lazy": 3}, peers=12)
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    out = r.heartbeat(1 * S)
    targets = ihave_to(out)
    assert len(targets) == 3
    assert not set(targets) & r.mesh[T]
    for entries in targets.values():
        assert entries == (IHave(T, (msg(b"o", 1).id,)),)


def test_gossip_emission_D_lazy_defaults_to_D():
    r = subscribed(peers=20)
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    assert len(ihave_to(r.heartbeat(1 * S))) == SMALL["D"]


def test_gossip_emission_to_all_outsiders_when_fewer_than_D_lazy():
    r = subscribed(peers=6)
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    assert set(ihave_to(r.heartbeat(1 * S))) == set(peer_names("p", 6)) - r.mesh[T]


def test_gossip_emission_skips_floodsub_peers_and_peers_outside_the_topic():
    r = lone("gossipsub", SMALL | {"D_lazy": 50})
    add_peers(r, peer_names("g", 8), [T])
    add_peers(r, peer_names("f", 3), [T], protocol=FLOODSUB_ID)
    add_peers(r, peer_names("o", 3), ["other"])
    r.join(0, T)
    r.handle_rpc(0, b"g00", publish_rpc(msg(b"o", 1)))
    assert set(ihave_to(r.heartbeat(1 * S))) == set(peer_names("g", 8)) - r.mesh[T]


def test_gossip_emission_nothing_without_recent_message_ids():
    r = subscribed(peers=12)
    assert ihave_to(r.heartbeat(1 * S)) == {}


def test_gossip_emission_for_fanout_topics_excludes_fanout_peers():
    r = lone("gossipsub", SMALL | {"D_lazy": 50})
    add_peers(r, peer_names("g", 10), [T])
    r.publish(0, T, b"x")
    targets = ihave_to(r.heartbeat(1 * S))
    assert set(targets) == set(peer_names("g", 10)) - r.fanout[T]


def test_gossip_emission_covers_the_last_mcache_gossip_windows():
    p = GossipSubParams(**SMALL, mcache_len=5, mcache_gossip=3)
    r = subscribed(SMALL | {"mcache_len": 5, "mcache_gossip": 3})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    for beat in range(1, p.mcache_gossip + 1):  # gossip happens before the shift
        targets = ihave_to(r.heartbeat(beat * S))
        assert targets and all(m.id in e[0].message_ids for e in targets.values())
    assert ihave_to(r.heartbeat((p.mcache_gossip + 1) * S)) == {}


def test_mcache_shift_after_gossip_each_heartbeat():
    r = subscribed(SMALL | {"mcache_len": 3, "mcache_gossip": 1})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    assert ihave_to(r.heartbeat(1 * S))  # the current window is gossiped, then shifted
    assert ihave_to(r.heartbeat(2 * S)) == {}
    assert r.mcache.get(m.id) is not None
    r.heartbeat(3 * S)
    assert r.mcache.get(m.id) is None


def test_gossip_emission_one_ihave_per_topic():
    r = lone("gossipsub", SMALL | {"D_lazy": 50})
    add_peers(r, peer_names("p", 8), [T, "u"])
    r.join(0, T)
    r.join(0, "u")
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1), msg(b"o", 2, "u")))
    out = r.heartbeat(1 * S)
    for peer, entries in ihave_to(out).items():
        topics = [e.topic for e in entries]
        assert len(topics) == len(set(topics))


# ---------------------------------------------------------------- Control message piggybacking


def test_piggyback_heartbeat_graft_and_ihave_for_one_peer_in_one_rpc():
    r = lone("gossipsub", {"D": 1, "D_low": 1, "D_high": 1, "D_lazy": 10})
    add_peers(r, [b"a"], ["u"])
    add_peers(r, [b"b"], [T, "u"])
    r.join(0, T)
    r.join(0, "u")
    r.handle_rpc(0, b"a", publish_rpc(msg(b"o", 2, "u")))
    r.mesh[T] = set()
    r.mesh["u"] = {b"a"}
    out = r.heartbeat(1 * S)
    rpc = sends(out)[b"b"]  # sends() asserts one RPC per peer
    assert [g.topic for g in rpc.control.graft] == [T]  # grafted for T ...
    assert [i.topic for i in rpc.control.ihave] == ["u"]  # ... and gossiped to for u, in one RPC


def test_piggyback_iwant_reply_and_prune_to_one_peer_in_one_rpc():
    r = lone("gossipsub", SMALL)
    add_peers(r, [b"a"], [T])
    r.join(0, T)
    m = msg(b"o", 1)
    r.handle_rpc(0, b"a", publish_rpc(m))
    out = r.handle_rpc(1, b"a", control_rpc(iwant=(IWant((m.id,)),), graft=("other",)))
    rpc = sends(out)[b"a"]
    assert rpc.publish == (m,) and [p.topic for p in rpc.control.prune] == ["other"]


@pytest.mark.parametrize("kind", ["gossipsub", "meshsub", "floodsub", "randomsub", "simsub"])
def test_piggyback_outputs_address_each_peer_at_most_once(kind):
    net = Network.build(kind, 8, edges="full", seed=5)
    outputs = []
    orig = net.apply

    def spy(name, out):
        outputs.append(out)
        return orig(name, out)

    net.apply = spy
    net.join_all(T)
    net.settle()
    net.start_heartbeats()
    for i in range(4):
        net.publish(f"n{i}", T, b"x")
        net.run_for(1.3)
    net.run_for(3)
    assert outputs and any(out.sends for out in outputs)
    for out in outputs:
        sends(out)


# ---------------------------------------------------------------- heartbeat timing


def test_heartbeat_initial_delay_100ms_then_every_heartbeat_interval():
    r = lone("gossipsub")
    assert r.first_heartbeat == 100 * MS  # go-libp2p-pubsub's GossipSubHeartbeatInitialDelay
    assert r.heartbeat_interval == 1 * S  # the spec's default
    r2 = lone("gossipsub", {"heartbeat_interval": 0.7, "heartbeat_initial_delay": 0.0})
    assert (r2.first_heartbeat, r2.heartbeat_interval) == (0, 700 * MS)



def test_publish_message_already_seen_is_a_no_op():
    r = subscribed()
    m = msg(b"injector", 1)
    assert forwarded(r.publish_message(0, m))
    out = r.publish_message(1, m)
    assert out.sends == () and out.trace == ()
    received = msg(b"o", 2)
    r.handle_rpc(2, b"p00", publish_rpc(received))
    assert r.publish_message(3, received).trace == ()
