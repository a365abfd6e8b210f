"""Properties of whole networks of engines, on random overlays driven in
lockstep with a fake clock (engine_harness): mesh degree bounds, mesh
symmetry, no double delivery, and full delivery on connected overlays without
loss or churn.

Networks are small (5-25 nodes) and examples few, so the file runs in seconds.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_harness import Network, random_edges

T = "t"
FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def overlays(draw, min_nodes=5, max_nodes=25):
    n = draw(st.integers(min_nodes, max_nodes))
    p = draw(st.sampled_from([0.1, 0.25, 0.5, 0.8]))
    seed = draw(st.integers(0, 2**32 - 1))
    names = [f"n{i}" for i in range(n)]
    return names, random_edges(names, p, random.Random(seed)), seed


@st.composite
def mesh_params(draw):
    D_low = draw(st.integers(1, 4))
    D = draw(st.integers(D_low, D_low + 3))
    D_high = draw(st.integers(D, D + 4))
    return {"D": D, "D_low": D_low, "D_high": D_high}


def _network(kind, overlay, params=None, latency=(1, 40)):
    names, edges, seed = overlay
    return Network.build({n: kind for n in names}, edges=edges, params=params or {}, seed=seed, latency=latency)


def _components(names, edges):
    parent = {n: n for n in names}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    groups: dict[str, set[str]] = {}
    for n in names:
        groups.setdefault(find(n), set()).add(n)
    return list(groups.values())


def _component_of(name, names, edges):
    return next(c for c in _components(names, edges) if name in c)


def _assert_symmetric(net, topic=T):
    for a in net.names:
        for b in net.mesh(a, topic):
            assert a in net.mesh(b, topic), f"{b} in mesh({a}) but {a} not in mesh({b})"


# ---------------------------------------------------------------- mesh shape


@FAST
@given(overlays(), mesh_params(), st.sampled_from(["gossipsub", "meshsub"]))
def test_mesh_degree_within_D_low_D_high_after_a_few_heartbeats(overlay, params, kind):
    """Right after its heartbeat a node's mesh is within [min(D_low, topic
    peers), D_high]; and once a heartbeat round changes nothing, every mesh
    is (v1.0 does not promise convergence: a hub whose neighbours all need it
    can oscillate, so the global check is made at the first quiet round)."""
    net = _network(kind, overlay, params)
    net.join_all(T)
    net.settle()
    quiet = False
    for _ in range(12):
        before = {n: set(net.mesh(n, T)) for n in net.names}
        for name in net.names:
            net.heartbeat(name)
            size, peers = len(net.mesh(name, T)), len(net.neighbours(name))
            assert min(params["D_low"], peers) <= size <= params["D_high"], (name, size, peers)
        net.settle()
        net.now += 10**9
        if {n: set(net.mesh(n, T)) for n in net.names} == before:
            quiet = True
            break
    if quiet:
        for name in net.names:
            size, peers = len(net.mesh(name, T)), len(net.neighbours(name))
            assert min(params["D_low"], peers) <= size <= params["D_high"], (name, size, peers)


@FAST
@given(overlays(), mesh_params(), st.sampled_from(["gossipsub", "meshsub", "simsub"]))
def test_meshes_are_symmetric_after_processing_settles(overlay, params, kind):
    if kind == "simsub":
        params = {"N": params["D"], "N_low": params["D_low"], "N_high": params["D_high"]}
    net = _network(kind, overlay, params)
    net.join_all(T)
    net.settle()
    _assert_symmetric(net)
    net.start_heartbeats()
    for step in range(6):
        net.run_for(0.7)  # heartbeats at each engine's own phase, RPCs in flight across them
        net.settle()
        _assert_symmetric(net)


@FAST
@given(overlays(max_nodes=15), mesh_params(), st.data())
def test_meshes_stay_symmetric_through_leave_join_and_disconnect(overlay, params, data):
    net = _network("gossipsub", overlay, params)
    net.join_all(T)
    net.settle()
    net.rounds(2)
    for _ in range(4):
        node = data.draw(st.sampled_from(net.names))
        action = data.draw(st.sampled_from(["leave", "join", "disconnect"]))
        if action == "leave":
            net.leave(node, T)
        elif action == "join":
            net.join(node, T)
        elif net.neighbours(node):
            net.disconnect(node, sorted(net.neighbours(node))[0])
        net.rounds(1)
        _assert_symmetric(net)


# ---------------------------------------------------------------- delivery

KINDS = ["floodsub", "randomsub", "meshsub", "gossipsub", "simsub"]


@FAST
@given(overlays(), st.sampled_from(KINDS), st.integers(1, 6), st.data())
def test_no_message_delivered_twice(overlay, kind, messages, data):
    net = _network(kind, overlay)
    subscribers = [n for n in net.names if data.draw(st.booleans(), label=f"sub {n}")] or net.names[:1]
    net.join_all(T, subscribers)
    net.start_heartbeats()
    net.run_for(2)
    own: dict[str, list[bytes]] = {n: [] for n in net.names}
    for _ in range(messages):
        src = data.draw(st.sampled_from(net.names))
        own[src].append(net.publish(src, T, b"x"))
        net.run_for(data.draw(st.sampled_from([0.0, 0.05, 0.5, 1.5])))
    net.run_for(4)
    for name in net.names:
        ids = net.delivered_ids(name)
        assert len(ids) == len(set(ids)), name
        if name not in subscribers:  # a publisher delivers its own message, subscribed or not (go)
            assert ids == own[name]


def _publish_and_check_all(net, publishers, subscribers, run=None):
    mids = []
    for src in publishers:
        mids.append((src, net.publish(src, T, b"x")))
        if run is None:
            net.settle()
        else:
            net.run_for(run)
    if run is not None:
        net.run_for(5)
    for src, mid in mids:
        for name in subscribers:
            if name != src:
                assert mid in net.delivered_ids(name), (name, src)


@FAST
@given(overlays(), st.data())
def test_floodsub_delivers_every_message_to_every_subscriber(overlay, data):
    net = _network("floodsub", overlay)
    net.join_all(T)
    net.settle()
    # publishers need not subscribe; they flood to their topic peers
    _publish_and_check_all(net, data.draw(st.lists(st.sampled_from(net.names), min_size=1, max_size=3)), net.names)


@FAST
@given(overlays(), st.data())
def test_meshsub_delivers_to_every_subscriber_when_the_mesh_is_the_overlay(overlay, data):
    """With D_low at least the largest degree every node grafts all its
    topic peers, so the mesh is the (connected) overlay and forwarding alone
    must reach everyone."""
    names, edges, _ = overlay
    degree = max(sum(1 for e in edges if n in e) for n in names)
    net = _network("meshsub", overlay, {"D": degree, "D_low": degree, "D_high": degree + 2})
    net.join_all(T)
    net.settle()
    net.rounds(2)
    _publish_and_check_all(net, data.draw(st.lists(st.sampled_from(net.names), min_size=1, max_size=3)), net.names)


@FAST
@given(overlays(), mesh_params(), st.sampled_from(["meshsub", "gossipsub"]), st.data())
def test_mesh_forwarding_reaches_the_publishers_whole_mesh_component(overlay, params, kind, data):
    """With any D, a message published by a subscriber reaches every node of
    its connected component of the mesh graph before any heartbeat runs."""
    net = _network(kind, overlay, params)
    net.join_all(T)
    net.settle()
    net.rounds(3)
    src = data.draw(st.sampled_from(net.names))
    component = _component_of(src, net.names, net.mesh_edges(T))
    mid = net.publish(src, T, b"x")
    net.settle()
    reached = {n for n in net.names if mid in net.delivered_ids(n)}
    assert reached == component  # the publisher delivers its own message too


@FAST
@given(overlays(), mesh_params(), st.data())
def test_gossipsub_gossip_repairs_a_partial_mesh_on_a_connected_overlay(overlay, params, data):
    """Small D (the mesh may be disconnected) but D_lazy above the network
    size: every node gossips to all its non-mesh topic peers, and a node
    gossips what it got at its next heartbeat (the id stays in mcache_gossip
    windows), so gossip carries a message at least one overlay hop per
    heartbeat: within as many heartbeats as there are nodes, every subscriber
    has it.

    This needs meshes that no longer change once the message flows: v1.0 never
    forwards a message to a peer grafted after it arrived, and gossip skips
    mesh peers, so a mesh that keeps oscillating (D_high below a node's degree
    prunes and re-grafts every heartbeat) can starve a node. D_high at least
    the largest degree means nothing is ever pruned, and meshes settle in the
    first heartbeats."""
    names, edges, _ = overlay
    degree = max(sum(1 for e in edges if n in e) for n in names)
    params = params | {"D_high": max(params["D_high"], degree), "D_lazy": 64}
    net = _network("gossipsub", overlay, params)
    net.join_all(T)
    net.settle()
    net.rounds(3)
    publishers = data.draw(st.lists(st.sampled_from(net.names), min_size=1, max_size=3))
    mids = [(src, net.publish(src, T, b"x")) for src in publishers]
    net.settle()
    net.rounds(len(net.names))
    for src, mid in mids:
        for name in net.names:
            if name != src:
                assert net.delivered_ids(name).count(mid) == 1, (name, src)


@FAST
@given(overlays(), st.data())
def test_simsub_delivers_every_message_to_every_member(overlay, data):
    """simsub with N at least the largest degree: the mesh is the overlay."""
    names, edges, _ = overlay
    degree = max(sum(1 for e in edges if n in e) for n in names)
    net = _network("simsub", overlay, {"N": degree, "N_low": degree, "N_high": degree + 2})
    net.join_all(T)
    net.start_heartbeats()
    net.run_for(2.5)  # first heartbeats are in [1, 2) s
    _publish_and_check_all(net, data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)), names, run=0.2)


@FAST
@given(overlays(), st.data())
def test_simsub_gossip_reaches_every_member_with_default_N(overlay, data):
    """Default N: the mesh may be partial, but the actor's gossip (IHAVE to N
    shuffled peers) fills in within history_gossip heartbeats when degrees
    are at most N, as every peer is then drawn."""
    names, edges, _ = overlay
    degree = max(sum(1 for e in edges if n in e) for n in names)
    n = max(6, degree)
    net = _network("simsub", overlay, {"N": n, "N_low": min(4, n), "N_high": n + 6})
    net.join_all(T)
    net.start_heartbeats()
    net.run_for(2.5)
    _publish_and_check_all(net, data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)), names, run=0.2)
