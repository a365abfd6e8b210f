"""floodsub, randomsub and meshsub: the baselines an experiment compares
gossipsub with, and the negotiation that lets gossipsub talk to floodsub."""

from __future__ import annotations

import pytest

from engine_harness import (
    S,
    Network,
    add_peers,
    control_rpc,
    forwarded,
    ihave_to,
    lone,
    msg,
    peer_names,
    publish_rpc,
    sends,
)
from node.engine import TraceType, make_router
from node.engine.api import FLOODSUB_ID, MESHSUB_ID, RANDOMSUB_ID
from node.engine.registry import ROUTERS, negotiate
from node.wire.rpc import IHave, IWant, SubOpts

T = "t"


# ---------------------------------------------------------------- floodsub


def test_floodsub_forwards_to_every_topic_peer_except_sender_and_origin():
    r = lone("floodsub")
    add_peers(r, peer_names("p", 5), [T])
    add_peers(r, peer_names("o", 3), ["other"])
    r.join(0, T)
    out = r.handle_rpc(0, b"p00", publish_rpc(msg(b"p01", 1)))
    assert set(forwarded(out)) == {b"p02", b"p03", b"p04"}


def test_floodsub_publish_goes_to_every_topic_peer_even_unsubscribed():
    r = lone("floodsub")
    add_peers(r, peer_names("p", 5), [T])
    assert set(forwarded(r.publish(0, T, b"x"))) == set(peer_names("p", 5))


def test_floodsub_seen_cache_stops_the_flood():
    r = lone("floodsub")
    add_peers(r, peer_names("p", 3), [T])
    r.join(0, T)
    m = msg(b"o", 1)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    out = r.handle_rpc(0, b"p01", publish_rpc(m))
    assert out.sends == () and out.deliveries == ()
    assert TraceType.DUPLICATE_MESSAGE in [ev.type for ev in out.trace]


def test_floodsub_ignores_control_messages_and_has_no_heartbeat_work():
    r = lone("floodsub")
    add_peers(r, peer_names("p", 3), [T])
    r.join(0, T)
    r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1)))
    out = r.handle_rpc(0, b"p01", control_rpc(graft=(T,), ihave=(IHave(T, (msg(b"o", 2).id,)),),
                                               iwant=(IWant((msg(b"o", 1).id,)),)))
    assert out.sends == ()
    assert r.heartbeat(1 * S).sends == ()


# ---------------------------------------------------------------- randomsub


def test_randomsub_forwards_to_at_most_D_random_topic_peers():
    r = lone("randomsub", {"D": 3})
    add_peers(r, peer_names("p", 10), [T])
    r.join(0, T)
    chosen = set()
    for seq in range(20):
        out = r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", seq)))
        targets = set(forwarded(out))
        assert len(targets) == 3 and b"p00" not in targets and targets <= set(peer_names("p", 10))
        chosen.add(frozenset(targets))
    assert len(chosen) > 1  # chosen per message


def test_randomsub_with_fewer_than_D_peers_sends_to_all_but_sender_and_origin():
    r = lone("randomsub", {"D": 6})
    add_peers(r, peer_names("p", 4), [T])
    r.join(0, T)
    assert set(forwarded(r.handle_rpc(0, b"p00", publish_rpc(msg(b"p01", 1))))) == {b"p02", b"p03"}


def test_randomsub_publish_at_most_D():
    r = lone("randomsub", {"D": 2})
    add_peers(r, peer_names("p", 6), [T])
    assert len(forwarded(r.publish(0, T, b"x"))) == 2


# ---------------------------------------------------------------- meshsub


def test_meshsub_never_emits_ihave():
    net = Network.build("meshsub", 12, edges="full", params={"D": 3, "D_low": 2, "D_high": 4}, seed=2)
    net.join_all(T)
    net.settle()
    net.start_heartbeats()
    for i in range(6):
        net.publish(f"n{i}", T, b"x")
        net.run_for(1.0)
    net.run_for(5)
    assert all(s.rpc.control is None or not s.rpc.control.ihave for s in net.sent)
    assert any(s.rpc.control and s.rpc.control.graft for s in net.sent)  # it does keep a mesh


def test_meshsub_heartbeat_keeps_mesh_but_no_gossip():
    r = lone("meshsub", {"D": 3, "D_low": 2, "D_high": 4})
    add_peers(r, peer_names("p", 10), [T])
    r.join(0, T)
    r.handle_rpc(0, sorted(r.mesh[T])[0], publish_rpc(msg(b"o", 1)))
    assert ihave_to(r.heartbeat(1 * S)) == {}
    assert r.mcache.get(msg(b"o", 1).id) is not None  # still answers IWANT from gossipsub peers


def test_meshsub_gossip_flag_is_fixed_by_the_router_kind():
    with pytest.raises(ValueError, match="gossip"):
        make_router("meshsub", b"a", 0, {"gossip": True})
    assert make_router("gossipsub", b"a", 0).params.gossip is True
    assert make_router("meshsub", b"a", 0).params.gossip is False


# ---------------------------------------------------------------- negotiation and parameters


def test_negotiate_gossipsub_with_floodsub_speaks_floodsub():
    gs, fs = make_router("gossipsub", b"a", 0), make_router("floodsub", b"b", 0)
    assert negotiate(gs.supported_protocols, fs.supported_protocols, gs.protocol_id) == FLOODSUB_ID
    assert negotiate(fs.supported_protocols, gs.supported_protocols, fs.protocol_id) == FLOODSUB_ID
    assert negotiate(gs.supported_protocols, gs.supported_protocols, gs.protocol_id) == MESHSUB_ID
    rs = make_router("randomsub", b"c", 0)
    assert negotiate(rs.supported_protocols, rs.supported_protocols, rs.protocol_id) == RANDOMSUB_ID
    ss = make_router("simsub", b"d", 0)
    assert negotiate(ss.supported_protocols, gs.supported_protocols, ss.protocol_id) is None


def test_mixed_network_gossipsub_and_floodsub_deliver_to_everyone():
    kinds = {f"n{i}": ("floodsub" if i % 3 == 0 else "gossipsub") for i in range(9)}
    net = Network.build(kinds, edges="ring", params={}, seed=4)
    net.join_all(T)
    net.settle()
    net.rounds(2)
    for src in ("n0", "n1"):
        mid = net.publish(src, T, b"x")
        net.settle()
        for name in net.names:
            if name != src:
                assert net.delivered_ids(name).count(mid) == 1, name


@pytest.mark.parametrize("kind", sorted(ROUTERS))
def test_unknown_parameter_is_rejected_by_name(kind):
    with pytest.raises(ValueError, match="no_such"):
        make_router(kind, b"a", 0, {"no_such": 1})


@pytest.mark.parametrize(
    "params",
    [{"D": 3, "D_low": 4}, {"D": 5, "D_high": 4}, {"D": 0, "D_low": 0}, {"mcache_gossip": 6},
     {"heartbeat_interval": 0}, {"D_lazy": -1}],
)
def test_gossipsub_rejects_inconsistent_parameters(params):
    with pytest.raises(ValueError):
        make_router("gossipsub", b"a", 0, params)


def test_subscription_announcements_are_tracked_per_peer():
    r = lone("gossipsub")
    r.add_peer(0, b"p", MESHSUB_ID)
    r.handle_rpc(0, b"p", publish_rpc())
    from node.wire.rpc import Rpc
    r.handle_rpc(0, b"p", Rpc(subscriptions=(SubOpts(True, "a"), SubOpts(True, "b"))))
    assert r.topic_peers("a") == {b"p"} and r.topic_peers("b") == {b"p"}
    r.handle_rpc(0, b"p", Rpc(subscriptions=(SubOpts(False, "a"),)))
    assert r.topic_peers("a") == set()
    r.remove_peer(0, b"p")
    assert r.topic_peers("b") == set()
    assert sends(r.add_peer(0, b"p", MESHSUB_ID)) == {}
