"""The router daemon speaks in libp2p identities: its trace and its peers'
traces carry the test-plans peer ids, messages are signed (strict, the
default) and a peer's unsigned or forged message is rejected with go's
reason while the peer and the router carry on."""

from __future__ import annotations

from dataclasses import replace

import trio

from node.engine.api import TraceType
from node.engine.authenticity import Authenticity
from node.trace.file import read_trace
from node.wire.rpc import Message, Rpc, SubOpts
from node.libp2p.identity import identity_for_index
from test_node_runtime import EVIL, INDEX, RawPeer, ctl, make_cfg, running, wait_for

RAW_PEER = identity_for_index(EVIL)


def test_traces_carry_peer_ids_and_bad_messages_are_rejected(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "a"), make_cfg(tmp_path, "b")) as (a, b), trio.open_nursery() as nursery:
            await a.connect("127.0.0.1", b.listen_port, "b", True)
            await wait_for(lambda: a.mesh().get("t") == ["b"] and b.mesh().get("t") == ["a"])
            await ctl(a, "publish", topic="t", size=64)
            await wait_for(lambda: b.counters["delivered"] == 1)
            evil = await RawPeer.connect(b, nursery)
            await evil.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),)))
            unsigned = Message(RAW_PEER.peer_id, b"u" * 16, (1).to_bytes(8, "big"), "t")
            signed = Authenticity("strict", signer=RAW_PEER).author(RAW_PEER.peer_id, 2, "t", b"s" * 16)
            await evil.send_rpc(Rpc(publish=(unsigned, replace(signed, data=b"forged" * 3))))
            await evil.send_rpc(Rpc(publish=(signed,)))
            await wait_for(lambda: b.counters["delivered"] == 2 and a.counters["delivered"] == 2)
            assert RAW_PEER.peer_id in b.links
            nursery.cancel_scope.cancel()

    trio.run(main)
    a_id, b_id = identity_for_index(INDEX["a"]).peer_id, identity_for_index(INDEX["b"]).peer_id
    b_trace = list(read_trace(tmp_path / "b.pb"))
    assert {ev.peerID for ev in b_trace} == {b_id}
    assert a_id in {ev.addPeer.peerID for ev in b_trace if ev.type == TraceType.ADD_PEER}
    rejects = [(ev.rejectMessage.receivedFrom, ev.rejectMessage.reason)
               for ev in b_trace if ev.type == TraceType.REJECT_MESSAGE]
    assert rejects == [(RAW_PEER.peer_id, "missing signature"), (RAW_PEER.peer_id, "invalid signature")]
    a_trace = list(read_trace(tmp_path / "a.pb"))
    mine = [ev.type for ev in a_trace if ev.type in (TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE)]
    assert mine[:2] == [TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE]
