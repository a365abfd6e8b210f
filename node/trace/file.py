"""Trace files: go-libp2p-pubsub TraceEvent protobufs, each prefixed by its
uvarint length, exactly as go's PBTracer writes them, so our traces and theirs
are read by the same code.

`to_proto` turns an engine's TraceEvent into the protobuf (the reference
mapping); `EventEncoder` produces the same bytes faster for hot paths;
`rpc_event` makes the SEND_RPC/DROP_RPC events the runtime and the simulator
record when they hand an RPC to a link or drop it. `TraceWriter` appends each
batch with one unbuffered write, so what it was given is in the kernel's hands
when `write` returns: a SIGKILL loses nothing written, and no timer has to
flush a buffer (docs/wire.md, "seventh pass").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from node.wire.codec import FrameDecoder, FrameError
from node.wire.codec import encode_uvarint as _uv
from node.engine.api import TraceEvent, TraceType
from node.proto import trace_pb2
from node.wire.rpc import PeerId, Rpc, rpc_size

PB = trace_pb2.TraceEvent
TRACE_SUFFIX = ".pb"
MAX_TRACE_EVENT = 16 << 20


def rpc_meta_proto(rpc: Rpc) -> trace_pb2.TraceEvent.RPCMeta:
    """The RPCMeta summary go-libp2p-pubsub records for a sent or received RPC."""
    meta = PB.RPCMeta()
    _rpc_meta(meta, rpc)
    return meta


def _rpc_meta(meta: trace_pb2.TraceEvent.RPCMeta, rpc: Rpc) -> None:
    for msg in rpc.publish:
        meta.messages.add(messageID=msg.id, topic=msg.topic)
    for sub in rpc.subscriptions:
        meta.subscription.add(subscribe=sub.subscribe, topic=sub.topic)
    if rpc.control is not None and not rpc.control.is_empty():
        ctl = meta.control
        for ihave in rpc.control.ihave:
            ctl.ihave.add(topic=ihave.topic, messageIDs=ihave.message_ids)
        for iwant in rpc.control.iwant:
            ctl.iwant.add(messageIDs=iwant.message_ids)
        for graft in rpc.control.graft:
            ctl.graft.add(topic=graft.topic)
        for prune in rpc.control.prune:
            ctl.prune.add(topic=prune.topic, peers=prune.peers)
        for idontwant in rpc.control.idontwant:
            ctl.idontwant.add(messageIDs=idontwant.message_ids)


def to_proto(ev: TraceEvent, self_id: PeerId) -> trace_pb2.TraceEvent:
    pb = PB(type=int(ev.type), peerID=self_id, timestamp=ev.timestamp)
    t = ev.type
    if t == TraceType.PUBLISH_MESSAGE:
        pb.publishMessage.SetInParent()
        pb.publishMessage.messageID = ev.message_id
        pb.publishMessage.topic = ev.topic
    elif t == TraceType.REJECT_MESSAGE:
        r = pb.rejectMessage
        r.messageID, r.receivedFrom, r.reason, r.topic = ev.message_id, ev.peer, ev.reason, ev.topic
    elif t == TraceType.DUPLICATE_MESSAGE:
        d = pb.duplicateMessage
        d.messageID, d.receivedFrom, d.topic = ev.message_id, ev.peer, ev.topic
    elif t == TraceType.DELIVER_MESSAGE:
        d = pb.deliverMessage
        d.messageID, d.topic, d.receivedFrom = ev.message_id, ev.topic, ev.peer
    elif t == TraceType.ADD_PEER:
        pb.addPeer.peerID, pb.addPeer.proto = ev.peer, ev.protocol
    elif t == TraceType.REMOVE_PEER:
        pb.removePeer.peerID = ev.peer
    elif t in (TraceType.RECV_RPC, TraceType.SEND_RPC, TraceType.DROP_RPC):
        rpc = ev.rpc if ev.rpc is not None else Rpc()
        if t == TraceType.RECV_RPC:
            sub = pb.recvRPC
            sub.receivedFrom = ev.peer
        else:
            sub = pb.sendRPC if t == TraceType.SEND_RPC else pb.dropRPC
            sub.sendTo = ev.peer
        sub.meta.SetInParent()
        _rpc_meta(sub.meta, rpc)
        sub.size = rpc_size(rpc)
    elif t == TraceType.JOIN:
        pb.join.topic = ev.topic
    elif t == TraceType.LEAVE:
        pb.leave.topic = ev.topic
    elif t == TraceType.GRAFT:
        pb.graft.peerID, pb.graft.topic = ev.peer, ev.topic
    elif t == TraceType.PRUNE:
        pb.prune.peerID, pb.prune.topic = ev.peer, ev.topic
    return pb


def rpc_event(type_: TraceType, now: int, peer: PeerId, rpc: Rpc) -> TraceEvent:
    """SEND_RPC when an RPC is handed to a link, DROP_RPC when it is dropped
    instead (go-libp2p-pubsub records one or the other, never both)."""
    return TraceEvent(type_, now, peer=peer, rpc=rpc)


# Fast encoding. Building protobuf objects for every event dominated the
# simulator's profile, so the events that make up most of a trace are encoded
# by hand: the same bytes as to_proto(ev).SerializeToString() (a test holds
# them equal for every type). An RPC is traced twice (SEND_RPC at its sender,
# RECV_RPC at its receiver) and most RPCs carry one message forwarded to many
# peers, so RPCMeta bytes are kept per RPC and per forwarded message.

_RPC_TAGS = {TraceType.RECV_RPC: b"\x52", TraceType.SEND_RPC: b"\x5a", TraceType.DROP_RPC: b"\x62"}
_DELIVER = int(TraceType.DELIVER_MESSAGE)
_DUPLICATE = int(TraceType.DUPLICATE_MESSAGE)
_CACHE_LIMIT = 100_000


def _ld(tag: bytes, payload: bytes) -> bytes:
    return tag + _uv(len(payload)) + payload


class EventEncoder:
    """Encodes events for any node; keeps the RPCMeta bytes of recent RPCs
    and forwarded messages (by identity, holding a reference so an id is
    never reused while cached)."""

    def __init__(self) -> None:
        self._by_rpc: dict[int, tuple[object, bytes]] = {}
        self._by_message: dict[int, tuple[object, bytes]] = {}
        self._heads: dict[tuple[int, bytes], bytes] = {}
        self._fields: dict[tuple[bytes, bytes | str], bytes] = {}
        self._last_timestamp = (-1, b"")

    @staticmethod
    def _meta_bytes(rpc: Rpc) -> bytes:
        meta = rpc_meta_proto(rpc).SerializeToString()
        return b"\x12" + _uv(len(meta)) + meta + b"\xa0\x06" + _uv(rpc_size(rpc))

    def _meta_field(self, rpc: Rpc) -> bytes:
        """The meta and size fields of an RPC event's body: kept per forwarded
        message for an RPC that only forwards one, else per RPC."""
        if len(rpc.publish) == 1 and not rpc.subscriptions and rpc.control is None:
            return self._cached(self._by_message, rpc.publish[0], rpc)
        return self._cached(self._by_rpc, rpc, rpc)

    def _cached(self, cache: dict[int, tuple[object, bytes]], owner: object, rpc: Rpc) -> bytes:
        """Keyed by the identity of `owner`; holding `owner` keeps its id from
        being reused while the entry lives."""
        entry = cache.get(id(owner))
        if entry is None or entry[0] is not owner:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            entry = cache[id(owner)] = (owner, self._meta_bytes(rpc))
        return entry[1]

    def _field(self, tag: bytes, value: bytes | str) -> bytes:
        """A length-delimited field whose value recurs (a peer id, a topic)."""
        field = self._fields.get((tag, value))
        if field is None:
            if len(self._fields) >= _CACHE_LIMIT:
                self._fields.clear()
            data = value.encode() if isinstance(value, str) else value
            field = self._fields[(tag, value)] = _ld(tag, data)
        return field

    def _head(self, type_: int, self_id: bytes, timestamp: int) -> bytes:
        """type, peerID and timestamp: kept per type and node, the timestamp's
        varint per input (the events of one input share their timestamp)."""
        head = self._heads.get((type_, self_id))
        if head is None:
            head = self._heads[(type_, self_id)] = b"\x08" + _uv(type_) + _ld(b"\x12", self_id) + b"\x18"
        last, encoded = self._last_timestamp
        if timestamp != last:
            encoded = _uv(timestamp)
            self._last_timestamp = (timestamp, encoded)
        return head + encoded

    def encode(self, ev: TraceEvent, self_id: bytes) -> bytes:
        t = ev.type
        tag = _RPC_TAGS.get(t)
        if tag is not None:
            body = self._field(b"\x0a", ev.peer) + self._meta_field(ev.rpc if ev.rpc is not None else Rpc())
            return self._head(t, self_id, ev.timestamp) + tag + _uv(len(body)) + body
        if t == _DUPLICATE or t == _DELIVER:
            mid = ev.message_id
            mid_field = b"\x0a" + _uv(len(mid)) + mid
            if t == _DUPLICATE:
                body = mid_field + self._field(b"\x12", ev.peer) + self._field(b"\x1a", ev.topic)
                return self._head(t, self_id, ev.timestamp) + b"\x32" + _uv(len(body)) + body
            body = mid_field + self._field(b"\x12", ev.topic) + self._field(b"\x1a", ev.peer)
            return self._head(t, self_id, ev.timestamp) + b"\x3a" + _uv(len(body)) + body
        return to_proto(ev, self_id).SerializeToString()

    def framed(self, ev: TraceEvent, self_id: bytes) -> bytes:
        data = self.encode(ev, self_id)
        return _uv(len(data)) + data


class TraceWriter:
    """Appends length-prefixed TraceEvents to a file, one `os.write` per
    batch (an engine step's events): nothing waits in a user-space buffer."""

    def __init__(self, path: Path, self_id: PeerId) -> None:
        self.path = path
        self.self_id = self_id
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = open(path, "ab", buffering=0)
        self._encoder = EventEncoder()
        self.events_written = 0

    def write(self, events: tuple[TraceEvent, ...] | list[TraceEvent]) -> None:
        if not events:
            return
        framed = self._encoder.framed
        data = memoryview(b"".join([framed(ev, self.self_id) for ev in events]))
        while data:  # a regular file takes it all at once; a signal may cut a write short
            data = data[self._file.write(data):]
        self.events_written += len(events)

    def close(self) -> None:
        self._file.close()


def read_trace(path: Path) -> Iterator[trace_pb2.TraceEvent]:
    """Every event in a trace file. A truncated last frame (a node killed while
    writing) ends the iteration quietly; corrupt frames raise FrameError."""
    decoder = FrameDecoder(MAX_TRACE_EVENT)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            for frame in decoder.feed(chunk):
                ev = PB()
                try:
                    ev.ParseFromString(frame)
                except Exception as exc:  # protobuf's DecodeError and friends
                    raise FrameError(f"{path}: undecodable trace event: {exc}") from None
                yield ev
