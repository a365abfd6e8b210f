"""Trace-event encoding for hot paths: the same bytes as
`to_proto(ev, self_id).SerializeToString()` (a test holds them equal for every
event type), produced faster for the events that make up most of a trace.

An RPC is traced twice (SEND_RPC at its sender, RECV_RPC at its receiver) and
most RPCs carry one message that is forwarded to many peers, so RPCMeta bytes
are kept per RPC and per forwarded message; the envelope around them, and the
few fields of DELIVER/DUPLICATE events, are put together by hand.
"""

from __future__ import annotations

from node.codec import encode_uvarint as _uv
from node.engine.api import TraceEvent, TraceType
from node.tracefile import rpc_meta_proto, to_proto
from node.wire import Message, Rpc, rpc_size

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
        self._by_rpc: dict[int, tuple[Rpc, bytes]] = {}
        self._by_message: dict[int, tuple[Message, bytes]] = {}
        self._heads: dict[bytes, bytes] = {}
        self._last_timestamp = (-1, b"")

    def _meta_of_forward(self, rpc: Rpc) -> bytes:
        """The meta+size fields of an RPC that only forwards one message."""
        msg = rpc.publish[0]
        entry = self._by_message.get(id(msg))
        if entry is None or entry[0] is not msg:
            if len(self._by_message) >= _CACHE_LIMIT:
                self._by_message.clear()
            entry = self._by_message[id(msg)] = (msg, self._meta_bytes(rpc))
        return entry[1]

    @staticmethod
    def _meta_bytes(rpc: Rpc) -> bytes:
        meta = rpc_meta_proto(rpc).SerializeToString()
        return b"\x12" + _uv(len(meta)) + meta + b"\xa0\x06" + _uv(rpc_size(rpc))

    def _meta_field(self, rpc: Rpc) -> bytes:
        if len(rpc.publish) == 1 and not rpc.subscriptions and rpc.control is None:
            return self._meta_of_forward(rpc)
        entry = self._by_rpc.get(id(rpc))
        if entry is None or entry[0] is not rpc:
            if len(self._by_rpc) >= _CACHE_LIMIT:
                self._by_rpc.clear()
            entry = self._by_rpc[id(rpc)] = (rpc, self._meta_bytes(rpc))
        return entry[1]

    def _head(self, type_: int, self_id: bytes, timestamp: int) -> bytes:
        head = self._heads.get(self_id)
        if head is None:
            head = self._heads[self_id] = _ld(b"\x12", self_id) + b"\x18"
        last, encoded = self._last_timestamp
        if timestamp != last:  # the events of one input share their timestamp
            encoded = _uv(timestamp)
            self._last_timestamp = (timestamp, encoded)
        return b"\x08" + _uv(type_) + head + encoded

    def encode(self, ev: TraceEvent, self_id: bytes) -> bytes:
        t = ev.type
        tag = _RPC_TAGS.get(t)
        if tag is not None:
            peer = ev.peer
            body = b"\x0a" + _uv(len(peer)) + peer + self._meta_field(ev.rpc if ev.rpc is not None else Rpc())
            return self._head(t, self_id, ev.timestamp) + tag + _uv(len(body)) + body
        if t == _DUPLICATE or t == _DELIVER:
            mid, peer, topic = ev.message_id, ev.peer, ev.topic.encode()
            mid_field = b"\x0a" + _uv(len(mid)) + mid
            if t == _DUPLICATE:
                body = mid_field + b"\x12" + _uv(len(peer)) + peer + b"\x1a" + _uv(len(topic)) + topic
                return self._head(t, self_id, ev.timestamp) + b"\x32" + _uv(len(body)) + body
            body = mid_field + b"\x12" + _uv(len(topic)) + topic + b"\x1a" + _uv(len(peer)) + peer
            return self._head(t, self_id, ev.timestamp) + b"\x3a" + _uv(len(body)) + body
        return to_proto(ev, self_id).SerializeToString()

    def framed(self, ev: TraceEvent, self_id: bytes) -> bytes:
        data = self.encode(ev, self_id)
        return _uv(len(data)) + data
