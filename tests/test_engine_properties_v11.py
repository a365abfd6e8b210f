"""Whole-network properties of gossipsub v1.1 and v1.2 (and of networks that
mix them with v1.0 and floodsub), on the random overlays of
test_engine_properties: meshes stay symmetric through backoff, refused GRAFTs
and leaves; no message is delivered twice; gossip and flood publishing get
every message to every subscriber of a connected overlay."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine_harness import Network
from test_engine_properties import FAST, T, _assert_symmetric, mesh_params, overlays

VERSIONS = ["gossipsub-v1.1", "gossipsub-v1.2"]


def v11_params(params: dict) -> dict:
    """D_out must stay below D_low and at most D/2 (spec)."""
    return {**params, "D_out": min(params["D_low"] - 1, params["D"] // 2), "D_score": min(params["D"], 4)}


def network(overlay, kinds, params, latency=(1, 40)):
    names, edges, seed = overlay
    return Network.build({n: kinds[i % len(kinds)] for i, n in enumerate(names)}, edges=edges,
                         params=params, seed=seed, latency=latency)


@FAST
@given(overlays(), mesh_params(), st.sampled_from(VERSIONS), st.data())
def test_meshes_stay_symmetric_through_leave_rejoin_and_backoff(overlay, params, kind, data):
    net = network(overlay, [kind], v11_params(params))
    net.join_all(T)
    net.settle()
    _assert_symmetric(net)
    net.start_heartbeats()
    for _ in range(4):
        node = data.draw(st.sampled_from(net.names))
        if data.draw(st.booleans()):
            net.leave(node, T)
            net.run_for(0.3)
            net.join(node, T)  # within UnsubscribeBackoff: its old mesh peers refuse or are not asked
        net.run_for(0.7)
        net.settle()
        _assert_symmetric(net)


@FAST
@given(overlays(max_nodes=15), st.sampled_from([VERSIONS, ["gossipsub", *VERSIONS], ["floodsub", *VERSIONS]]),
       st.integers(1, 4), st.data())
def test_every_subscriber_gets_every_message_once(overlay, kinds, messages, data):
    net = network(overlay, kinds, None)
    net.join_all(T)
    net.start_heartbeats()
    net.run_for(2)
    mids = []
    for _ in range(messages):
        src = data.draw(st.sampled_from(net.names))
        mids.append((src, net.publish(src, T, bytes(data.draw(st.sampled_from([10, 2000]))))))
        net.run_for(data.draw(st.sampled_from([0.0, 0.05, 0.5])))
    net.run_for(5)
    for name in net.names:
        ids = net.delivered_ids(name)
        assert len(ids) == len(set(ids)), name
        for src, mid in mids:
            assert src == name or mid in ids, (name, src)
