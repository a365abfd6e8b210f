"""The simsub reference router (../shared/seeds/simsub-reference-router.md):
fidelity to the Gerbil actor (N/N_low/N_high, IHAVE to N shuffled peers minus
the mesh, history_gossip windows, history_length forgetting, GRAFT accepted
unconditionally, first heartbeat in [1, 2) s), and the testbed's extensions
(disconnect, leave/join)."""

from __future__ import annotations

import random

from engine_harness import (
    S,
    Network,
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
    types,
)
from node.engine import TraceType
from node.engine.simsub import SIMSUB_ID, SimSubRouter, SimSubParams
from node.wire.rpc import IHave, IWant

T = "t"


def actor(peers=10, params=None, seed=0, joined=True):
    r = lone("simsub", params or {}, seed)
    for p in peer_names("p", peers):
        r.add_peer(0, p, SIMSUB_ID)
    if joined:
        r.join(0, T)
    return r


def test_simsub_first_heartbeat_in_1_to_2_seconds():
    firsts = [lone("simsub", seed=s).first_heartbeat for s in range(200)]
    assert all(S <= f < 2 * S for f in firsts)
    assert max(firsts) - min(firsts) > S // 2  # spread, not a constant
    assert lone("simsub").heartbeat_interval == S


def test_simsub_sends_no_subscription_announcements():
    r = lone("simsub")
    assert r.add_peer(0, b"p", SIMSUB_ID).sends == ()
    assert r.join(0, T).sends == ()
    assert r.handle_rpc(0, b"p", control_rpc()).sends == ()


def test_simsub_heartbeat_below_N_low_grafts_up_to_N_from_all_connected_peers():
    r = actor(peers=10, params={"N": 5, "N_low": 3, "N_high": 8})
    out = r.heartbeat(1 * S)
    assert len(r.D) == 5 and grafted(out) == set(r.D)
    r.D = r.D[:3]  # at N_low: nothing to do
    assert grafted(r.heartbeat(2 * S)) == set()
    r.D = r.D[:2]
    r.heartbeat(3 * S)
    assert len(r.D) == 5


def test_simsub_heartbeat_above_N_high_prunes_down_to_N():
    r = actor(peers=12, params={"N": 5, "N_low": 3, "N_high": 8})
    r.D = list(peer_names("p", 9))
    before = set(r.D)
    out = r.heartbeat(1 * S)
    assert len(r.D) == 5 and set(r.D) <= before and pruned(out) == before - set(r.D)
    r.D = list(peer_names("p", 8))  # at N_high: nothing to do
    assert pruned(r.heartbeat(2 * S)) == set()


def test_simsub_graft_accepted_unconditionally_even_above_N_high():
    r = actor(peers=12, params={"N": 2, "N_low": 1, "N_high": 3})
    for p in peer_names("p", 6):
        out = r.handle_rpc(0, p, control_rpc(graft=(T,)))
        assert out.sends == ()
    assert set(r.D) == set(peer_names("p", 6))
    assert [ev.type for ev in out.trace if ev.type == TraceType.GRAFT] == [TraceType.GRAFT]


def test_simsub_prune_removes_sender_from_mesh():
    r = actor()
    r.heartbeat(1 * S)
    peer = r.D[0]
    r.handle_rpc(1, peer, control_rpc(prune=(T,)))
    assert peer not in r.D


def test_simsub_forwarding_skips_only_the_sender_not_the_origin():
    r = actor(peers=4, params={"N": 4, "N_low": 4, "N_high": 4})
    r.heartbeat(1 * S)
    assert set(r.D) == set(peer_names("p", 4))
    out = r.handle_rpc(1, b"p00", publish_rpc(msg(b"p01", 1)))
    assert set(forwarded(out)) == {b"p01", b"p02", b"p03"}  # the origin p01 gets it back
    assert [m.id for m in out.deliveries] == [msg(b"p01", 1).id]


def test_simsub_seen_check_traces_duplicates():
    r = actor()
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    out = r.handle_rpc(0, b"p01", publish_rpc(m))
    assert out.deliveries == () and out.sends == ()
    assert TraceType.DUPLICATE_MESSAGE in types(out)


def test_simsub_ihave_to_N_shuffled_peers_minus_mesh():
    params = {"N": 4, "N_low": 4, "N_high": 4}
    r = actor(peers=10, params=params, seed=1)
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    counts = []
    for beat in range(1, 40):
        r.handle_rpc(beat * S, b"p00", publish_rpc(msg(b"o", 100 + beat)))  # keep history fresh
        out = r.heartbeat(beat * S)
        targets = set(ihave_to(out))
        assert not targets & set(r.D) and len(targets) <= 4
        counts.append(len(targets))
    # N peers are drawn from all peers, then the mesh ones skipped: often fewer
    # than N IHAVEs although 6 non-mesh peers exist (gossipsub would send 4)
    assert min(counts) < 4 and max(counts) > 0


def test_simsub_ihave_matches_the_actor_draw():
    """Replay the actor's heartbeat with the same RNG: shuffle(peers), take N,
    skip mesh peers."""
    params = SimSubParams(N=3, N_low=0, N_high=12)
    r = SimSubRouter(b"me", random.Random(7), params)
    for p in peer_names("p", 8):
        r.add_peer(0, p, SIMSUB_ID)
    r.join(0, T)
    r.handle_rpc(0, b"p00", control_rpc(graft=(T,)))
    r.handle_rpc(0, b"p03", publish_rpc(msg(b"o", 1)))
    shadow = random.Random(7)
    shadow.random()  # first_heartbeat
    peers = list(r.peers)
    shadow.shuffle(peers)  # the heartbeat's gossip draw (no mesh change: N_low=0)
    expected = {p for p in peers[:3] if p not in r.D}
    assert set(ihave_to(r.heartbeat(1 * S))) == expected


def test_simsub_ihave_answered_with_iwant_for_unknown_ids_only():
    r = actor()
    known = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(known))
    new = msg(b"o", 2).id
    out = r.handle_rpc(1, b"p01", control_rpc(ihave=(IHave(T, (known.id, new)),)))
    assert sends(out)[b"p01"].control.iwant == (IWant((new,)),)


def test_simsub_iwant_answered_from_history():
    r = actor()
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    assert forwarded(r.handle_rpc(1, b"p01", control_rpc(iwant=(IWant((m.id,)),)))) == {b"p01": (m,)}


def test_simsub_gossip_covers_history_gossip_windows():
    r = actor(params={"history_gossip": 2, "history_length": 10, "N": 10, "N_low": 0})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    # the window is rolled into history first, then gossiped
    for beat in (1, 2):
        assert any(m.id in e[0].message_ids for e in ihave_to(r.heartbeat(beat * S)).values())
    assert ihave_to(r.heartbeat(3 * S)) == {}


def test_simsub_history_length_forgets_messages():
    r = actor(params={"history_gossip": 1, "history_length": 5})
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    for beat in range(1, 6):  # history_length heartbeats: still known
        r.heartbeat(beat * S)
    assert r.handle_rpc(6 * S, b"p01", publish_rpc(m)).deliveries == ()
    r.heartbeat(6 * S)  # one more: forgotten, a copy is new again
    assert m.id not in r.messages
    assert r.handle_rpc(7 * S, b"p01", control_rpc(iwant=(IWant((m.id,)),))).sends == ()
    assert r.handle_rpc(7 * S, b"p02", publish_rpc(m)).deliveries == (m,)


def test_simsub_disconnect_removes_peer_from_peers_and_mesh():
    r = actor()
    r.heartbeat(1 * S)
    peer = r.D[0]
    out = r.remove_peer(2 * S, peer)
    assert peer not in r.D and peer not in r.peers
    assert types(out) == [TraceType.REMOVE_PEER]
    assert r.handle_rpc(2 * S, peer, publish_rpc(msg(b"o", 1))).trace == ()


def test_simsub_leave_prunes_mesh_then_ignores_messages_and_answers_graft_with_prune():
    r = actor()
    r.heartbeat(1 * S)
    mesh = set(r.D)
    out = r.leave(2 * S, T)
    assert pruned(out) == mesh and r.D == []
    assert TraceType.LEAVE in types(out)
    assert r.handle_rpc(3 * S, b"p00", publish_rpc(msg(b"o", 1))).deliveries == ()
    reply = r.handle_rpc(3 * S, b"p00", control_rpc(graft=(T,)))
    assert [p.topic for p in sends(reply)[b"p00"].control.prune] == [T] and r.D == []
    assert ihave_to(r.heartbeat(4 * S)) == {} and grafted(r.heartbeat(5 * S)) == set()


def test_simsub_left_node_ignores_ihave():
    r = actor()
    r.leave(1 * S, T)
    assert r.handle_rpc(2 * S, b"p00", control_rpc(ihave=(IHave(T, (msg(b"o", 1).id,)),))).sends == ()


def test_simsub_rejoin_rebuilds_mesh_at_next_heartbeat():
    r = actor()
    r.leave(1 * S, T)
    r.join(2 * S, T)
    r.heartbeat(3 * S)
    assert len(r.D) == 6


def test_simsub_network_delivers_to_all():
    net = Network.build("simsub", 15, edges="full", seed=9, latency=(10, 150))
    net.join_all(T)
    net.start_heartbeats()
    net.run_for(3)
    mid = net.publish("n0", T, b"x")
    net.run_for(5)
    for name in net.names[1:]:
        assert net.delivered_ids(name) == [mid]
