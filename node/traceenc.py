"""Trace-event encoding for hot paths: the bytes of
`to_proto(ev, self_id).SerializeToString()` (a test holds them equal for every
event type), produced faster for the RPC events that make up most of a trace.
An RPC is traced twice, SEND_RPC at its sender and RECV_RPC at its receiver, so
its RPCMeta is serialized once and kept; the envelope around it is a few bytes
put together by hand."""

from __future__ import annotations

from node.codec import encode_uvarint as _uv
from node.engine.api import TraceEvent, TraceType
from node.tracefile import rpc_meta_proto, to_proto
from node.wire import Rpc, rpc_size

_RPC_TAGS = {TraceType.RECV_RPC: b"\x52", TraceType.SEND_RPC: b"\x5a", TraceType.DROP_RPC: b"\x62"}
_CACHE_LIMIT = 100_000


class EventEncoder:
    """Encodes events for any node; keeps the RPCMeta bytes of recent RPCs."""

    def __init__(self) -> None:
        self._rpc_meta: dict[int, tuple[Rpc, bytes]] = {}
        self._heads: dict[bytes, bytes] = {}

    def _meta_field(self, rpc: Rpc) -> bytes:
        """RPCMeta (field 2) and size (field 100) of an RPC event's body."""
        entry = self._rpc_meta.get(id(rpc))
        if entry is None or entry[0] is not rpc:
            if len(self._rpc_meta) >= _CACHE_LIMIT:
                self._rpc_meta.clear()
            meta = rpc_meta_proto(rpc).SerializeToString()
            entry = self._rpc_meta[id(rpc)] = (rpc, b"\x12" + _uv(len(meta)) + meta + b"\xa0\x06" + _uv(rpc_size(rpc)))
        return entry[1]

    def encode(self, ev: TraceEvent, self_id: bytes) -> bytes:
        tag = _RPC_TAGS.get(ev.type)
        if tag is None:
            return to_proto(ev, self_id).SerializeToString()
        head = self._heads.get(self_id)
        if head is None:
            head = self._heads[self_id] = b"\x12" + _uv(len(self_id)) + self_id + b"\x18"
        body = b"\x0a" + _uv(len(ev.peer)) + ev.peer + self._meta_field(ev.rpc if ev.rpc is not None else Rpc())
        return b"\x08" + bytes((ev.type,)) + head + _uv(ev.timestamp) + tag + _uv(len(body)) + body

    def framed(self, ev: TraceEvent, self_id: bytes) -> bytes:
        data = self.encode(ev, self_id)
        return _uv(len(data)) + data
