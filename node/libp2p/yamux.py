"""`/yamux/1.0.0`, sans-I/O: a session state machine fed bytes, like h11/h2.

`YamuxSession.receive_data(bytes)` returns events; every method that has
something to say (stream opens, data, window updates, FIN/RST, ping replies,
GoAway) queues frames that `data_to_send()` hands to the I/O layer. The rules
are hashicorp/yamux's spec.md, which libp2p adopts:

- a 12-byte header: version 0, type, flags (big-endian u16), stream id and
  length (big-endian u32); types Data 0, Window Update 1, Ping 2, Go Away 3;
  flags SYN 1, ACK 2, FIN 4, RST 8;
- stream ids by role: the dialer (client) opens odd ids, the listener even;
  id 0 is the session (ping, GoAway);
- every stream starts with a 256 KiB receive window each way; a receiver
  grants more with Window Update (the length is the increment), and a sender
  never sends more than the window it was granted;
- a ping with SYN is answered with ACK and the same opaque value;
- GoAway's length is the reason: 0 normal, 1 protocol error, 2 internal.

Protocol violations (wrong version, unknown frame type, a SYN on an id of the
wrong parity or already in use, data beyond the receive window) raise
ProtocolError after queueing a GoAway(protocol error): the caller flushes it
and closes the connection.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from node.libp2p.errors import ProtocolError

PROTOCOL_ID = "/yamux/1.0.0"
VERSION = 0
HEADER = struct.Struct(">BBHII")
HEADER_SIZE = HEADER.size

TYPE_DATA = 0
TYPE_WINDOW_UPDATE = 1
TYPE_PING = 2
TYPE_GO_AWAY = 3

FLAG_SYN = 1
FLAG_ACK = 2
FLAG_FIN = 4
FLAG_RST = 8

GO_AWAY_NORMAL = 0
GO_AWAY_PROTOCOL_ERROR = 1
GO_AWAY_INTERNAL_ERROR = 2

INITIAL_WINDOW = 256 * 1024
MAX_STREAMS = 256  # open streams a peer may hold with us (go-yamux's default is 1000)


@dataclass(frozen=True)
class StreamOpened:
    stream_id: int


@dataclass(frozen=True)
class DataReceived:
    stream_id: int
    data: bytes


@dataclass(frozen=True)
class StreamEnded:
    """The remote sent FIN: no more data will come on this stream."""

    stream_id: int


@dataclass(frozen=True)
class StreamReset:
    stream_id: int


@dataclass(frozen=True)
class WindowOpened:
    """The remote granted send window on a stream (writers may continue)."""

    stream_id: int


@dataclass(frozen=True)
class PongReceived:
    opaque: int


@dataclass(frozen=True)
class GoAwayReceived:
    code: int


Event = StreamOpened | DataReceived | StreamEnded | StreamReset | WindowOpened | PongReceived | GoAwayReceived


class _Stream:
    __slots__ = ("send_window", "recv_window", "unacked", "local_closed", "remote_closed", "need_ack")

    def __init__(self, need_ack: bool) -> None:
        self.send_window = INITIAL_WINDOW
        self.recv_window = INITIAL_WINDOW
        self.unacked = 0  # bytes consumed but not yet granted back
        self.local_closed = False
        self.remote_closed = False
        self.need_ack = need_ack  # an inbound stream's first frame carries ACK


def frame(type_: int, flags: int, stream_id: int, length: int) -> bytes:
    return HEADER.pack(VERSION, type_, flags, stream_id, length)


class YamuxSession:
    def __init__(self, client: bool, max_streams: int = MAX_STREAMS) -> None:
        self.client = client
        self.max_streams = max_streams
        self.streams: dict[int, _Stream] = {}
        self._next_id = 1 if client else 2
        self._out: list[bytes] = []
        self._buf = bytearray()
        self.go_away_sent = False
        self.go_away_received = False

    # Output

    def data_to_send(self) -> bytes:
        data = b"".join(self._out)
        self._out.clear()
        return data

    def pending_output(self) -> int:
        return sum(map(len, self._out))

    # Our side

    def open_stream(self) -> int:
        if self.go_away_received or self.go_away_sent:
            raise ProtocolError("yamux: session is going away")
        stream_id = self._next_id
        self._next_id += 2
        self.streams[stream_id] = _Stream(need_ack=False)
        self._out.append(frame(TYPE_WINDOW_UPDATE, FLAG_SYN, stream_id, 0))
        return stream_id

    def send_window(self, stream_id: int) -> int:
        stream = self.streams.get(stream_id)
        return 0 if stream is None or stream.local_closed else stream.send_window

    def send_data(self, stream_id: int, data: bytes | memoryview) -> int:
        """Queue as much of `data` as the send window allows; the count queued."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise ProtocolError(f"yamux: stream {stream_id} is closed for sending")
        n = min(len(data), stream.send_window)
        if n:
            stream.send_window -= n
            self._out.append(frame(TYPE_DATA, self._flags(stream), stream_id, n))
            self._out.append(bytes(data[:n]))
        return n

    def consumed(self, stream_id: int, n: int) -> None:
        """The application took `n` bytes of the stream: grant them back once
        half the window is owed (as go-yamux batches its updates)."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            return
        stream.unacked += n
        if stream.unacked >= INITIAL_WINDOW // 2:
            stream.recv_window += stream.unacked
            self._out.append(frame(TYPE_WINDOW_UPDATE, self._flags(stream), stream_id, stream.unacked))
            stream.unacked = 0

    def close_stream(self, stream_id: int) -> None:
        """Half-close: FIN, no more data from us."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        stream.local_closed = True
        self._out.append(frame(TYPE_WINDOW_UPDATE, self._flags(stream) | FLAG_FIN, stream_id, 0))
        self._forget_if_done(stream_id, stream)

    def reset_stream(self, stream_id: int) -> None:
        if self.streams.pop(stream_id, None) is not None:
            self._out.append(frame(TYPE_WINDOW_UPDATE, FLAG_RST, stream_id, 0))

    def ping(self, opaque: int) -> None:
        self._out.append(frame(TYPE_PING, FLAG_SYN, 0, opaque))

    def go_away(self, code: int = GO_AWAY_NORMAL) -> None:
        if not self.go_away_sent:
            self.go_away_sent = True
            self._out.append(frame(TYPE_GO_AWAY, 0, 0, code))

    def _flags(self, stream: _Stream) -> int:
        if stream.need_ack:
            stream.need_ack = False
            return FLAG_ACK
        return 0

    def _forget_if_done(self, stream_id: int, stream: _Stream) -> None:
        if stream.local_closed and stream.remote_closed:
            del self.streams[stream_id]

    # Their side

    def receive_data(self, data: bytes | bytearray) -> list[Event]:
        self._buf += data
        events: list[Event] = []
        pos = 0
        try:
            while len(self._buf) - pos >= HEADER_SIZE:
                version, type_, flags, stream_id, length = HEADER.unpack_from(self._buf, pos)
                if version != VERSION:
                    self._violation(f"frame version {version}, not {VERSION}")
                if type_ == TYPE_DATA:
                    end = pos + HEADER_SIZE + length
                    if end > len(self._buf):
                        if length > max(self._window_of(stream_id), INITIAL_WINDOW):
                            self._violation(f"data frame of {length} bytes exceeds the stream window")
                        break
                    self._data(events, flags, stream_id, bytes(self._buf[pos + HEADER_SIZE:end]))
                    pos = end
                    continue
                pos += HEADER_SIZE
                if type_ == TYPE_WINDOW_UPDATE:
                    self._window_update(events, flags, stream_id, length)
                elif type_ == TYPE_PING:
                    if flags & FLAG_SYN:
                        self._out.append(frame(TYPE_PING, FLAG_ACK, 0, length))
                    elif flags & FLAG_ACK:
                        events.append(PongReceived(length))
                elif type_ == TYPE_GO_AWAY:
                    self.go_away_received = True
                    events.append(GoAwayReceived(length))
                else:
                    self._violation(f"frame of unknown type {type_}")
        finally:
            del self._buf[:pos]
        return events

    def _violation(self, what: str) -> None:
        self.go_away(GO_AWAY_PROTOCOL_ERROR)
        raise ProtocolError(f"yamux: {what}")

    def _window_of(self, stream_id: int) -> int:
        stream = self.streams.get(stream_id)
        return stream.recv_window if stream is not None else 0

    def _stream_for(self, events: list[Event], flags: int, stream_id: int) -> _Stream | None:
        """The stream a frame is about, opening it on SYN; None when the
        frame is about a stream we already forgot (closed or reset)."""
        if flags & FLAG_SYN:
            if stream_id == 0 or (stream_id % 2 == 1) == self.client:
                self._violation(f"SYN for stream {stream_id}, an id the remote may not open")
            if stream_id in self.streams:
                self._violation(f"SYN for stream {stream_id}, which is already open")
            if len(self.streams) >= self.max_streams or self.go_away_sent:
                self._out.append(frame(TYPE_WINDOW_UPDATE, FLAG_RST, stream_id, 0))
                return None
            stream = self.streams[stream_id] = _Stream(need_ack=True)
            events.append(StreamOpened(stream_id))
            return stream
        return self.streams.get(stream_id)

    def _close_flags(self, events: list[Event], flags: int, stream_id: int, stream: _Stream) -> None:
        if flags & FLAG_RST:
            del self.streams[stream_id]
            events.append(StreamReset(stream_id))
        elif flags & FLAG_FIN and not stream.remote_closed:
            stream.remote_closed = True
            events.append(StreamEnded(stream_id))
            self._forget_if_done(stream_id, stream)

    def _data(self, events: list[Event], flags: int, stream_id: int, payload: bytes) -> None:
        stream = self._stream_for(events, flags, stream_id)
        if stream is None:
            return
        if payload:
            if stream.remote_closed:
                self._violation(f"data on stream {stream_id} after its FIN")
            if len(payload) > stream.recv_window:
                self._violation(
                    f"{len(payload)} bytes on stream {stream_id} exceed its {stream.recv_window}-byte window")
            stream.recv_window -= len(payload)
            events.append(DataReceived(stream_id, payload))
        self._close_flags(events, flags, stream_id, stream)

    def _window_update(self, events: list[Event], flags: int, stream_id: int, delta: int) -> None:
        stream = self._stream_for(events, flags, stream_id)
        if stream is None:
            return
        if delta:
            stream.send_window += delta
            events.append(WindowOpened(stream_id))
        self._close_flags(events, flags, stream_id, stream)
