"""A libp2p connection on trio: the upgrade of a TCP stream, and the yamux
session that multiplexes it afterwards.

`upgrade()` runs multistream-select for the security protocol, its handshake
(noise or plaintext), then multistream-select for `/yamux/1.0.0`, and returns
a `MuxedConnection` that knows the remote peer id. A listener may refuse the
peer as soon as the handshake names it (`admit`), before yamux: the dialler's
upgrade then fails too, so neither side ever holds the refused connection.

`MuxedConnection.run()` is the connection's life: one reader task feeds the
sans-I/O `YamuxSession` and one sender task writes whatever the session has
queued. The reader never waits on the network's send side (a peer that stops
reading cannot stall our reader into a deadlock); writers on streams wait for
send window and for the queue to drain below HIGH_WATER, which is where
back-pressure reaches the pubsub queue.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

import trio

from node.identity import Identity
from node.libp2p import multistream, noise, plaintext, yamux
from node.libp2p.bufstream import READ_CHUNK, BufferedStream
from node.libp2p.errors import ProtocolError

SECURITY = {"noise": noise.PROTOCOL_ID, "plaintext": plaintext.PROTOCOL_ID}
HIGH_WATER = 256 * 1024  # queued outbound bytes before stream writers wait


async def upgrade(
    stream: trio.abc.Stream, identity: Identity, security: str, *, dialing: bool, expect: bytes | None = None,
    admit: Callable[[bytes], None] | None = None,
) -> MuxedConnection:
    """TCP -> security -> yamux. ProtocolError (or a trio/OS error) when the
    remote fails any step, or when `admit(peer_id)` raises it; the caller
    closes `stream`."""
    raw = BufferedStream(stream)
    proto = SECURITY[security]
    if dialing:
        await multistream.select(raw, [proto])
    else:
        await multistream.handle(raw, {proto})
    if proto == noise.PROTOCOL_ID:
        peer_id, channel = await noise.handshake(raw, identity, dialing, expect)
        secure = BufferedStream(channel)
    else:
        peer_id = await plaintext.handshake(raw, identity, expect)
        secure = raw
    if peer_id == identity.peer_id:
        raise ProtocolError("the remote peer has our own peer id")
    if admit is not None:
        admit(peer_id)
    if dialing:
        await multistream.select(secure, [yamux.PROTOCOL_ID])
    else:
        await multistream.handle(secure, {yamux.PROTOCOL_ID})
    return MuxedConnection(stream, secure, peer_id, client=dialing)


class YamuxStream:
    """One yamux stream: `receive_some`/`send_all`/`aclose` as a trio stream."""

    def __init__(self, conn: MuxedConnection, stream_id: int) -> None:
        self.conn = conn
        self.stream_id = stream_id
        self._inbox: list[bytes] = []
        self._readable = trio.Event()
        self._window = trio.Event()
        self.ended = False  # FIN or RST received
        self.reset = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._inbox:
            if self.ended or self.conn.closed:
                if self.reset:
                    raise trio.BrokenResourceError(f"yamux stream {self.stream_id} was reset")
                return b""
            await self._readable.wait()
            self._readable = trio.Event()
        data = self._inbox.pop(0)
        session = self.conn.session
        session.consumed(self.stream_id, len(data))
        if session.pending_output():  # a window update is due
            self.conn.wake_sender()
        return data

    async def send_all(self, data: bytes) -> None:
        conn, view = self.conn, memoryview(data)
        while view:
            if conn.closed or self.reset:
                raise trio.BrokenResourceError(f"yamux stream {self.stream_id} is closed")
            if conn.session.send_window(self.stream_id) == 0:
                await self._window.wait()
                self._window = trio.Event()
                continue
            sent = conn.session.send_data(self.stream_id, view)
            view = view[sent:]
            conn.wake_sender()
            await conn.drained()

    async def aclose(self) -> None:
        if not self.conn.closed:
            self.conn.session.close_stream(self.stream_id)
            self.conn.wake_sender()
        self.conn.streams.pop(self.stream_id, None)

    def _deliver(self, data: bytes) -> None:
        self._inbox.append(data)
        self._readable.set()

    def _end(self, reset: bool) -> None:
        self.ended = True
        self.reset = self.reset or reset
        self._readable.set()
        self._window.set()


class MuxedConnection:
    def __init__(self, tcp: trio.abc.Stream, secure: BufferedStream, peer_id: bytes, client: bool) -> None:
        self.tcp = tcp
        self.secure = secure
        self.peer_id = peer_id
        self.session = yamux.YamuxSession(client)
        self.streams: dict[int, YamuxStream] = {}
        self.closed = False
        self.close_reason = ""
        self.misbehaved = False  # closed for breaking a protocol rule
        self.bytes_in = 0
        self.bytes_out = 0
        self._leftover = secure.take_buffer()
        self._send_wanted = trio.Event()
        self._drained = trio.Event()
        self._drained.set()
        self._cancel = trio.CancelScope()

    def wake_sender(self) -> None:
        self._send_wanted.set()

    async def drained(self) -> None:
        while self.session.pending_output() > HIGH_WATER and not self.closed:
            await self._drained.wait()

    def open_stream(self) -> YamuxStream:
        stream = YamuxStream(self, self.session.open_stream())
        self.streams[stream.stream_id] = stream
        self.wake_sender()
        return stream

    def go_away(self) -> None:
        """Tell the remote we are leaving (GoAway, normal): it opens no more
        streams and closes the connection."""
        self.session.go_away()
        self.wake_sender()

    def close(self, reason: str) -> None:
        if not self.close_reason:
            self.close_reason = reason
        self._cancel.cancel()

    async def run(self, on_stream: Callable[[YamuxStream], Awaitable[None]]) -> None:
        """Until the remote closes, breaks a rule (`misbehaved`, after
        sending GoAway) or `close()` is called. `on_stream` runs, in this
        connection's nursery, for every stream the remote opens."""
        with self._cancel:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._sender)
                    await self._reader(nursery, on_stream)
                    nursery.cancel_scope.cancel()
            except* ProtocolError as group:
                self.close_reason = f"dropped: {group.exceptions[0]}"
                self.misbehaved = True
                await self._flush_go_away()
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
                self.close_reason = self.close_reason or f"connection error: {group.exceptions[0]}"
        self._finish()
        await trio.aclose_forcefully(self.tcp)

    def _finish(self) -> None:
        self.closed = True
        for stream in list(self.streams.values()):
            stream._end(reset=True)
        self._drained.set()

    async def _flush_go_away(self) -> None:
        with trio.move_on_after(1):
            try:
                await self.secure.send_all(self.session.data_to_send())
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        await trio.aclose_forcefully(self.tcp)

    async def _reader(self, nursery: trio.Nursery, on_stream: Callable[[YamuxStream], Awaitable[None]]) -> None:
        data = self._leftover
        while True:
            if data:
                self.bytes_in += len(data)
                self._handle(self.session.receive_data(data), nursery, on_stream)
                if self.session.pending_output():
                    self.wake_sender()
            data = await self.secure.receive_some(READ_CHUNK)
            if not data:
                self.close_reason = self.close_reason or "closed by peer"
                return

    def _handle(self, events: list[yamux.Event], nursery: trio.Nursery,
                on_stream: Callable[[YamuxStream], Awaitable[None]]) -> None:
        for event in events:
            if isinstance(event, yamux.DataReceived):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream._deliver(event.data)
            elif isinstance(event, yamux.StreamOpened):
                stream = self.streams[event.stream_id] = YamuxStream(self, event.stream_id)
                nursery.start_soon(on_stream, stream)
            elif isinstance(event, yamux.WindowOpened):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream._window.set()
            elif isinstance(event, (yamux.StreamEnded, yamux.StreamReset)):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream._end(reset=isinstance(event, yamux.StreamReset))
            elif isinstance(event, yamux.GoAwayReceived):
                self.close_reason = f"GoAway({event.code}) from peer"
                raise trio.ClosedResourceError(self.close_reason)

    async def _sender(self) -> None:
        while True:
            await self._send_wanted.wait()
            self._send_wanted = trio.Event()
            data = self.session.data_to_send()
            if data:
                await self.secure.send_all(data)
                self.bytes_out += len(data)
            self._drained.set()
            self._drained = trio.Event()


async def negotiate_inbound(stream: YamuxStream, supported: Collection[str]) -> tuple[str, BufferedStream]:
    buffered = BufferedStream(stream)
    return await multistream.handle(buffered, supported), buffered


async def negotiate_outbound(stream: YamuxStream, protocols: list[str]) -> tuple[str, BufferedStream]:
    buffered = BufferedStream(stream)
    return await multistream.select(buffered, protocols), buffered
