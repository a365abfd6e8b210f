"""The router daemon speaks in libp2p identities: its trace and its peers'
traces carry the test-plans peer ids, messages are signed (strict, the
default) and a peer's unsigned or forged message is rejected with go's
reason while the peer and the router carry on."""

from __future__ import annotations

from dataclasses import replace

import trio

from node.engine.api import TraceType
from node.engine.authenticity import Authenticity
from node.tracefile import read_trace
from node.wire import Message, Rpc, SubOpts
from test_node_runtime import RAW_PEER, RawPeer, ctl, make_cfg, running, wait_for


def test_traces_carry_peer_ids_and_bad_messages_are_rejected(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "ia"), make_cfg(tmp_path, "ib")) as (a, b):
            await a.connect("127.0.0.1", b.listen_port, "ib", True)
            await wait_for(lambda: a.mesh().get("t") == ["ib"] and b.mesh().get("t") == ["ia"])
            await ctl(a, "publish", topic="t", size=64)
            await wait_for(lambda: b.counters["delivered"] == 1)
            evil = await RawPeer.connect(b)
            await evil.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),)))
            unsigned = Message(RAW_PEER.peer_id, b"u" * 16, (1).to_bytes(8, "big"), "t")
            signed = Authenticity("strict", signer=RAW_PEER).author(RAW_PEER.peer_id, 2, "t", b"s" * 16)
            await evil.send_rpc(Rpc(publish=(unsigned, replace(signed, data=b"forged" * 3))))
            await evil.send_rpc(Rpc(publish=(signed,)))
            await wait_for(lambda: b.counters["delivered"] == 2 and a.counters["delivered"] == 2)
            assert "evil" in b.links

    trio.run(main)
    a_id, b_id = make_cfg(tmp_path, "ia").peer_id, make_cfg(tmp_path, "ib").peer_id
    b_trace = list(read_trace(tmp_path / "ib.pb"))
    assert {ev.peerID for ev in b_trace} == {b_id}
    assert a_id in {ev.addPeer.peerID for ev in b_trace if ev.type == TraceType.ADD_PEER}
    rejects = [(ev.rejectMessage.receivedFrom, ev.rejectMessage.reason)
               for ev in b_trace if ev.type == TraceType.REJECT_MESSAGE]
    assert rejects == [(RAW_PEER.peer_id, "missing signature"), (RAW_PEER.peer_id, "invalid signature")]
    a_trace = list(read_trace(tmp_path / "ia.pb"))
    mine = [ev.type for ev in a_trace if ev.type in (TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE)]
    assert mine[:2] == [TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE]
