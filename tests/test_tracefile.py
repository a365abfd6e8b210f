"""Trace files (node/trace/file.py): go-libp2p-pubsub TraceEvent protobufs,
uvarint-length-prefixed, read back with go's type numbers and fields; a
truncated last frame (SIGKILL mid-write) is tolerated."""

from __future__ import annotations

import pytest

from engine_harness import Network
from node.wire.codec import FrameError, encode_frame
from node.engine import TraceEvent, TraceType
from node.proto import trace_pb2
from node.trace.file import EventEncoder, TraceWriter, read_trace, rpc_event, to_proto
from node.wire.rpc import Control, Graft, IDontWant, IHave, IWant, Message, Prune, Rpc, SubOpts, rpc_size, seqno_bytes

# go-libp2p-pubsub pb/trace.proto
GO_TYPES = {
    "PUBLISH_MESSAGE": 0, "REJECT_MESSAGE": 1, "DUPLICATE_MESSAGE": 2, "DELIVER_MESSAGE": 3,
    "ADD_PEER": 4, "REMOVE_PEER": 5, "RECV_RPC": 6, "SEND_RPC": 7, "DROP_RPC": 8,
    "JOIN": 9, "LEAVE": 10, "GRAFT": 11, "PRUNE": 12,
}
GO_FIELDS = {
    "TraceEvent": {"type": 1, "peerID": 2, "timestamp": 3, "publishMessage": 4, "rejectMessage": 5,
                   "duplicateMessage": 6, "deliverMessage": 7, "addPeer": 8, "removePeer": 9,
                   "recvRPC": 10, "sendRPC": 11, "dropRPC": 12, "join": 13, "leave": 14,
                   "graft": 15, "prune": 16},
    "PublishMessage": {"messageID": 1, "topic": 2},
    "RejectMessage": {"messageID": 1, "receivedFrom": 2, "reason": 3, "topic": 4},
    "DuplicateMessage": {"messageID": 1, "receivedFrom": 2, "topic": 3},
    "DeliverMessage": {"messageID": 1, "topic": 2, "receivedFrom": 3},
    "AddPeer": {"peerID": 1, "proto": 2},
    "RemovePeer": {"peerID": 1},
    "RecvRPC": {"receivedFrom": 1, "meta": 2},
    "SendRPC": {"sendTo": 1, "meta": 2},
    "DropRPC": {"sendTo": 1, "meta": 2},
    "Join": {"topic": 1},
    "Leave": {"topic": 2},
    "Graft": {"peerID": 1, "topic": 2},
    "Prune": {"peerID": 1, "topic": 2},
    "RPCMeta": {"messages": 1, "subscription": 2, "control": 3},
    "MessageMeta": {"messageID": 1, "topic": 2},
    "SubMeta": {"subscribe": 1, "topic": 2},
    "ControlMeta": {"ihave": 1, "iwant": 2, "graft": 3, "prune": 4, "idontwant": 5},
    "ControlIHaveMeta": {"topic": 1, "messageIDs": 2},
    "ControlIWantMeta": {"messageIDs": 1},
    "ControlGraftMeta": {"topic": 1},
    "ControlPruneMeta": {"topic": 1, "peers": 2},
    "ControlIDontWantMeta": {"messageIDs": 1},
}

PB = trace_pb2.TraceEvent
MID = b"n1" + seqno_bytes(5)
RPC = Rpc(
    (SubOpts(True, "t"),),
    (Message(b"n1", b"data", seqno_bytes(5), "t"),),
    Control((IHave("t", (MID,)),), (IWant((MID,)),), (Graft("t"),), (Prune("u"),)),
)


def test_trace_type_numbers_match_go():
    assert {t.name: int(t) for t in TraceType} == GO_TYPES
    assert {name: PB.Type.Value(name) for name in GO_TYPES} == GO_TYPES


def test_trace_field_numbers_match_go():
    for message, fields in GO_FIELDS.items():
        desc = PB.DESCRIPTOR if message == "TraceEvent" else PB.DESCRIPTOR.nested_types_by_name[message]
        got = {f.name: f.number for f in desc.fields if f.number < 100}  # 100: our size extension
        assert got == fields, message


def _all_events(t: int) -> list[TraceEvent]:
    return [
        TraceEvent(TraceType.PUBLISH_MESSAGE, t, message_id=MID, topic="t"),
        TraceEvent(TraceType.REJECT_MESSAGE, t, message_id=MID, topic="t", peer=b"n2", reason="self originated message"),
        TraceEvent(TraceType.DUPLICATE_MESSAGE, t, message_id=MID, topic="t", peer=b"n3"),
        TraceEvent(TraceType.DELIVER_MESSAGE, t, message_id=MID, topic="t", peer=b"n4"),
        TraceEvent(TraceType.ADD_PEER, t, peer=b"n5", protocol="/meshsub/1.0.0"),
        TraceEvent(TraceType.REMOVE_PEER, t, peer=b"n6"),
        TraceEvent(TraceType.RECV_RPC, t, peer=b"n7", rpc=RPC),
        rpc_event(TraceType.SEND_RPC, t, b"n8", RPC),
        rpc_event(TraceType.DROP_RPC, t, b"n9", RPC),
        TraceEvent(TraceType.JOIN, t, topic="t"),
        TraceEvent(TraceType.LEAVE, t, topic="t"),
        TraceEvent(TraceType.GRAFT, t, peer=b"n10", topic="t"),
        TraceEvent(TraceType.PRUNE, t, peer=b"n11", topic="t"),
    ]


def test_written_events_read_back_with_go_types_and_fields(tmp_path):
    path = tmp_path / "n0.pb"
    w = TraceWriter(path, b"n0")
    w.write(_all_events(1_700_000_000_123_456_789))
    w.close()
    evs = list(read_trace(path))
    assert [ev.type for ev in evs] == list(range(13))
    assert all(ev.peerID == b"n0" and ev.timestamp == 1_700_000_000_123_456_789 for ev in evs)
    pub, rej, dup, dlv, add, rem, recv, send, drop, join, leave, graft, prune = evs
    assert (pub.publishMessage.messageID, pub.publishMessage.topic) == (MID, "t")
    assert (rej.rejectMessage.messageID, rej.rejectMessage.receivedFrom, rej.rejectMessage.reason,
            rej.rejectMessage.topic) == (MID, b"n2", "self originated message", "t")
    assert (dup.duplicateMessage.messageID, dup.duplicateMessage.receivedFrom, dup.duplicateMessage.topic) == (
        MID, b"n3", "t")
    assert (dlv.deliverMessage.messageID, dlv.deliverMessage.receivedFrom, dlv.deliverMessage.topic) == (
        MID, b"n4", "t")
    assert (add.addPeer.peerID, add.addPeer.proto) == (b"n5", "/meshsub/1.0.0")
    assert rem.removePeer.peerID == b"n6"
    assert recv.recvRPC.receivedFrom == b"n7"
    assert send.sendRPC.sendTo == b"n8" and drop.dropRPC.sendTo == b"n9"
    for sub in (recv.recvRPC, send.sendRPC, drop.dropRPC):
        meta = sub.meta
        assert [(m.messageID, m.topic) for m in meta.messages] == [(MID, "t")]
        assert [(s.subscribe, s.topic) for s in meta.subscription] == [(True, "t")]
        assert [(i.topic, list(i.messageIDs)) for i in meta.control.ihave] == [("t", [MID])]
        assert [list(i.messageIDs) for i in meta.control.iwant] == [[MID]]
        assert [g.topic for g in meta.control.graft] == ["t"]
        assert [p.topic for p in meta.control.prune] == ["u"]
        assert sub.size == rpc_size(RPC)
    assert join.join.topic == "t" and leave.leave.topic == "t"
    assert (graft.graft.peerID, graft.graft.topic) == (b"n10", "t")
    assert (prune.prune.peerID, prune.prune.topic) == (b"n11", "t")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def test_hand_encoded_go_event_is_read(tmp_path):
    """A LEAVE event as go's PBTracer writes it: type=10, peerID, timestamp,
    leave{topic (field 2)}."""
    event = _varint(1 << 3) + _varint(10) + _ld(2, b"gopeer") + _varint(3 << 3) + _varint(42) + _ld(14, _ld(2, b"blocks"))
    path = tmp_path / "go.pb"
    path.write_bytes(_varint(len(event)) + event)
    (ev,) = read_trace(path)
    assert (ev.type, ev.peerID, ev.timestamp, ev.leave.topic) == (10, b"gopeer", 42, "blocks")
    ours = to_proto(TraceEvent(TraceType.LEAVE, 42, topic="blocks"), b"gopeer").SerializeToString()
    assert ours == event


@pytest.mark.parametrize("cut", [1, 2, 5, 10, 30])
def test_truncated_last_frame_is_tolerated(tmp_path, cut):
    path = tmp_path / "n0.pb"
    w = TraceWriter(path, b"n0")
    w.write(_all_events(7)[:3])
    w.close()
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    evs = list(read_trace(path))
    assert [ev.type for ev in evs] == [0, 1]


def test_corrupt_frame_raises_frame_error(tmp_path):
    path = tmp_path / "bad.pb"
    path.write_bytes(encode_frame(b"\xff\xff\xff\xff") + b"\x00")
    with pytest.raises(FrameError):
        list(read_trace(path))


def test_empty_trace_file_reads_as_no_events(tmp_path):
    path = tmp_path / "empty.pb"
    path.write_bytes(b"")
    assert list(read_trace(path)) == []


def test_every_write_is_in_the_file_when_it_returns(tmp_path):
    path = tmp_path / "n0.pb"
    w = TraceWriter(path, b"n0")
    w.write([TraceEvent(TraceType.JOIN, 0, topic="t")])
    assert [ev.type for ev in read_trace(path)] == [TraceType.JOIN]  # no buffer: read before close
    w.write([TraceEvent(TraceType.LEAVE, 1, topic="t"), TraceEvent(TraceType.JOIN, 2, topic="u")])
    w.write([])
    assert [ev.type for ev in read_trace(path)] == [TraceType.JOIN, TraceType.LEAVE, TraceType.JOIN]
    w.close()
    assert w.events_written == 3


def test_writer_appends_to_an_existing_trace(tmp_path):
    path = tmp_path / "n0.pb"
    for topic in ("a", "b"):
        w = TraceWriter(path, b"n0")
        w.write([TraceEvent(TraceType.JOIN, 0, topic=topic)])
        w.close()
    assert [ev.join.topic for ev in read_trace(path)] == ["a", "b"]


def test_engine_traces_read_back_consistently(tmp_path):
    net = Network.build("gossipsub", 8, edges="full", params={"D": 3, "D_low": 2, "D_high": 4}, seed=1)
    net.join_all("t")
    net.settle()
    net.rounds(2)
    mid = net.publish("n0", "t", b"x")
    net.settle()
    net.rounds(1)
    net.write_traces(tmp_path)
    for name in net.names:
        evs = list(read_trace(tmp_path / f"{name}.pb"))
        assert len(evs) == len(net.trace[name])
        assert all(ev.peerID == name.encode() for ev in evs)
        delivered = [ev.deliverMessage.messageID for ev in evs if ev.type == TraceType.DELIVER_MESSAGE]
        assert delivered == [mid]  # the publisher too, as go traces it
        sends = sum(1 for ev in evs if ev.type == TraceType.SEND_RPC)
        assert sends == sum(1 for s in net.sent if s.src == name)
    published = [ev for ev in read_trace(tmp_path / "n0.pb") if ev.type == TraceType.PUBLISH_MESSAGE]
    assert [ev.publishMessage.messageID for ev in published] == [mid]


def _every_kind_of_event() -> list[TraceEvent]:
    msg = Message(b"n1", b"data", seqno_bytes(5), "blocks")
    rpcs = [
        Rpc((SubOpts(True, "blocks"), SubOpts(False, "other")), (msg,),
            Control((IHave("blocks", (b"a", b"b")),), (IWant((b"c",)),), (Graft("blocks"),), (Prune("x"),))),
        Rpc((), (msg,), None),
        Rpc((), (msg, msg), None),
        Rpc(),
    ]
    events = [TraceEvent(kind, 10**18 + i, peer=b"n2", rpc=rpc)
              for i, rpc in enumerate(rpcs)
              for kind in (TraceType.SEND_RPC, TraceType.RECV_RPC, TraceType.DROP_RPC)]
    long_id, long_topic, long_peer = b"i" * 300, "t" * 200, b"p" * 150  # multi-byte lengths
    events += [
        TraceEvent(TraceType.DELIVER_MESSAGE, 5, message_id=long_id, topic="blocks", peer=b"n3"),
        TraceEvent(TraceType.DELIVER_MESSAGE, 5, message_id=b"id", topic=long_topic, peer=long_peer),
        TraceEvent(TraceType.DUPLICATE_MESSAGE, 2**40, message_id=long_id, topic=long_topic, peer=b"n3"),
        TraceEvent(TraceType.DUPLICATE_MESSAGE, 0, message_id=b"id", topic="blocks", peer=long_peer),
        TraceEvent(TraceType.PUBLISH_MESSAGE, 1, message_id=b"id", topic="blocks"),
        TraceEvent(TraceType.REJECT_MESSAGE, 1, message_id=b"id", topic="blocks", peer=b"n3", reason="self originated message"),
        TraceEvent(TraceType.ADD_PEER, 1, peer=b"n3", protocol="/meshsub/1.0.0"),
        TraceEvent(TraceType.REMOVE_PEER, 1, peer=b"n3"),
        TraceEvent(TraceType.JOIN, 1, topic="blocks"),
        TraceEvent(TraceType.LEAVE, 1, topic="blocks"),
        TraceEvent(TraceType.GRAFT, 1, peer=b"n3", topic="blocks"),
        TraceEvent(TraceType.PRUNE, 1, peer=b"n3", topic="blocks"),
    ]
    return events


def test_fast_encoder_writes_the_same_bytes_as_the_protobuf_library():
    encoder = EventEncoder()
    events = _every_kind_of_event()
    for ev in events + events:  # the second pass hits every cache
        assert encoder.encode(ev, b"self") == to_proto(ev, b"self").SerializeToString(), ev.type.name


def test_idontwant_and_px_peers_are_in_the_rpc_meta_as_go_numbers_them():
    """go's trace.proto: ControlMeta.idontwant = 5, ControlPruneMeta.peers = 2."""
    rpc = Rpc(control=Control(prune=(Prune("t", (b"p1",), 60),), idontwant=(IDontWant((MID,)),)))
    pb = to_proto(rpc_event(TraceType.SEND_RPC, 1, b"n8", rpc), b"self")
    ctl = pb.sendRPC.meta.control
    assert [list(i.messageIDs) for i in ctl.idontwant] == [[MID]]
    assert [(p.topic, list(p.peers)) for p in ctl.prune] == [("t", [b"p1"])]
    assert pb.SerializeToString() == EventEncoder().encode(rpc_event(TraceType.SEND_RPC, 1, b"n8", rpc), b"self")
