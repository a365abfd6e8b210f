"""A libp2p connection on trio: the upgrade of a TCP stream, and the yamux
session that multiplexes it afterwards.

`upgrade()` runs multistream-select for the security protocol, its handshake
(noise or plaintext), then multistream-select for `/yamux/1.0.0`, and returns
a `MuxedConnection` that knows the remote peer id. A listener may refuse the
peer as soon as the handshake names it (`admit`), before yamux: the dialler's
upgrade then fails too, so neither side ever holds the refused connection.

`MuxedConnection.run()` is the connection's life: its reader reads the socket,
decrypts (`open_`) and feeds the sans-I/O `YamuxSession`; on a node, the
reader is a callback of the node's `ReadPoller`, which reads every connection
from one task, else a task of its own. What the session queues is sealed
(encrypted) at once, in order, and written straight onto the socket when
nothing waits before it; what the socket does not take waits in a backlog that
one sender task writes. So a frame costs no task switch on the way out, and at
most one on the way in: a stream with a sink (`YamuxStream.set_sink`) gets its
data in the reader's task. The reader never waits on the network's send side
(a peer that stops reading cannot stall our reader into a deadlock); writers
on streams wait for send window and for the backlog to drain below HIGH_WATER,
which is where back-pressure reaches the pubsub queue.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Collection

import trio

from node.libp2p.identity import Identity
from node.libp2p import multistream, noise, plaintext, yamux
from node.libp2p.bufstream import READ_CHUNK, BufferedStream
from node.libp2p.errors import ProtocolError
from node.libp2p.poller import ReadPoller

SECURITY = {"noise": noise.PROTOCOL_ID, "plaintext": plaintext.PROTOCOL_ID}
HIGH_WATER = 256 * 1024  # queued outbound bytes before stream writers wait


async def upgrade(
    stream: trio.abc.Stream, identity: Identity, security: str, *, dialing: bool, expect: bytes | None = None,
    admit: Callable[[bytes], None] | None = None, poller: ReadPoller | None = None,
) -> MuxedConnection:
    """TCP -> security -> yamux. ProtocolError (or a trio/OS error) when the
    remote fails any step, or when `admit(peer_id)` raises it; the caller
    closes `stream`. `poller`: the node's, which then reads the socket."""
    raw = BufferedStream(stream)
    proto = SECURITY[security]
    if dialing:
        await multistream.select(raw, [proto])
    else:
        await multistream.handle(raw, {proto})
    seal: Callable[[bytes], bytes] = bytes
    open_: Callable[[bytes], bytes] = bytes
    channel = None
    if proto == noise.PROTOCOL_ID:
        peer_id, channel = await noise.handshake(raw, identity, dialing, expect)
        secure = BufferedStream(channel)
        seal, open_ = channel.seal, channel.open
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
    leftover = secure.take_buffer() + (channel.take_pending() if channel is not None else b"")
    return MuxedConnection(stream, secure, peer_id, client=dialing, seal=seal, open_=open_, leftover=leftover,
                           poller=poller)


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
        self._sink: Callable[[bytes], None] | None = None

    def set_sink(self, sink: Callable[[bytes], None]) -> None:
        """From now on `sink(data)` gets the stream's data in the connection's
        reader task, as it arrives (what was buffered first); `receive_some`
        is not used after. Wait for the end with `wait_ended`."""
        self._sink = sink
        inbox, self._inbox = self._inbox, []
        for data in inbox:
            self._take(data)
        if self.conn.session.pending_output():
            self.conn.wake_sender()

    async def wait_ended(self) -> None:
        """Until FIN or RST (BrokenResourceError) or the connection closes."""
        while not (self.ended or self.conn.closed):
            await self._readable.wait()
            self._readable = trio.Event()
        if self.reset:
            raise trio.BrokenResourceError(f"yamux stream {self.stream_id} was reset")

    def _take(self, data: bytes) -> None:
        assert self._sink is not None
        self._sink(data)
        self.conn.session.consumed(self.stream_id, len(data))

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

    def try_send(self, data: bytes) -> bool:
        """Queue all of `data` now, or nothing (False) when the send window or
        the connection's backlog says wait."""
        conn = self.conn
        if (conn.closed or self.reset or conn.session.send_window(self.stream_id) < len(data)
                or len(conn.backlog) > HIGH_WATER):
            return False
        conn.session.send_data(self.stream_id, data)
        conn.wake_sender()
        return True

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
        if self._sink is not None:
            self._take(data)
            return
        self._inbox.append(data)
        self._readable.set()

    def _end(self, reset: bool) -> None:
        self.ended = True
        self.reset = self.reset or reset
        self._readable.set()
        self._window.set()


class MuxedConnection:
    def __init__(self, tcp: trio.abc.Stream, secure: BufferedStream, peer_id: bytes, client: bool,
                 seal: Callable[[bytes], bytes] = bytes, open_: Callable[[bytes], bytes] = bytes,
                 leftover: bytes = b"", poller: ReadPoller | None = None) -> None:
        """`seal`/`open_`: the security protocol's encryption and decryption
        of the bytes on `tcp` (identity for plaintext); `leftover`: plaintext
        the upgrade read ahead; `poller`: reads a socket `tcp` in the node's
        poller task (else this connection's reader task reads it)."""
        self.tcp = tcp
        self.secure = secure
        self.seal = seal
        self.open = open_
        self.backlog = bytearray()  # sealed bytes the socket has not taken yet
        self._direct: socket.socket | None = None  # for writes without a task switch, while run() runs
        self._writing = False
        self.peer_id = peer_id
        self.session = yamux.YamuxSession(client)
        self.streams: dict[int, YamuxStream] = {}
        self.closed = False
        self.close_reason = ""
        self.misbehaved = False  # closed for breaking a protocol rule
        self.bytes_in = 0
        self.bytes_out = 0
        self._leftover = leftover
        self._poller = poller
        self._send_wanted = trio.Event()
        self._drained = trio.Event()
        self._drained.set()
        self._cancel = trio.CancelScope()

    def wake_sender(self) -> None:
        """Seal what the session queued and write it: straight onto the
        socket when nothing waits before it, else after the backlog."""
        data = self.session.data_to_send()
        if data:
            self.bytes_out += len(data)
            sealed = self.seal(data)
            if self._direct is not None and not self.backlog and not self._writing:
                try:
                    sealed = sealed[self._direct.send(sealed):]
                except OSError:  # would block, or broken: the sender task finds out which
                    pass
            self.backlog += sealed
        if self.backlog:
            self._send_wanted.set()

    async def drained(self) -> None:
        while len(self.backlog) > HIGH_WATER and not self.closed:
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
        connection's nursery, for every stream the remote opens. However it
        ends, cancelled too (a node killed inside its process), its socket is
        closed on the way out: the remote sees the connection end then, not
        when the garbage collector happens to free the socket."""
        sock = getattr(self.tcp, "socket", None)
        if sock is not None:  # a socket of our own on the connection, for writes in the caller's task
            self._direct = socket.socket(fileno=os.dup(sock.fileno()))
            self._direct.setblocking(False)
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
            finally:
                self._close_direct()
                self._finish()
                await trio.aclose_forcefully(self.tcp)

    def _close_direct(self) -> None:
        """Before trio closes its socket: ours is a second descriptor."""
        if self._direct is not None:
            trio.lowlevel.notify_closing(self._direct)
            self._direct.close()
            self._direct = None

    def _finish(self) -> None:
        self.closed = True
        for stream in list(self.streams.values()):
            stream._end(reset=True)
        self._drained.set()

    async def _flush_go_away(self) -> None:
        self._close_direct()
        self.wake_sender()
        with trio.move_on_after(1):
            try:
                await self.tcp.send_all(bytes(self.backlog))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        await trio.aclose_forcefully(self.tcp)

    async def _reader(self, nursery: trio.Nursery, on_stream: Callable[[YamuxStream], Awaitable[None]]) -> None:
        """Until the remote closes (return) or breaks a rule (raise)."""
        if self._leftover:
            self._consume(self._leftover, nursery, on_stream)
        if self._poller is not None and self._direct is not None:
            await self._polled(self._poller, self._direct, nursery, on_stream)
            return
        while True:
            raw = await self._receive()
            data = self.open(raw)  # ProtocolError when the stream ends inside a message
            if not raw:
                self.close_reason = self.close_reason or "closed by peer"
                return
            self._consume(data, nursery, on_stream)

    def _consume(self, data: bytes, nursery: trio.Nursery,
                 on_stream: Callable[[YamuxStream], Awaitable[None]]) -> None:
        """Plaintext from the remote into the yamux session."""
        if data:
            self.bytes_in += len(data)
            self._handle(self.session.receive_data(data), nursery, on_stream)
            if self.session.pending_output():
                self.wake_sender()

    async def _polled(self, poller: ReadPoller, sock: socket.socket, nursery: trio.Nursery,
                      on_stream: Callable[[YamuxStream], Awaitable[None]]) -> None:
        """The reader, as a callback of the node's poller: what ends it (the
        remote's close, or an error, raised here) is handed to this task."""
        fd = sock.fileno()
        ended = trio.Event()
        failure: list[Exception] = []

        def readable() -> None:
            try:
                raw = sock.recv(READ_CHUNK)
            except BlockingIOError:
                return
            except OSError as exc:
                failure.append(exc)
            else:
                try:
                    data = self.open(raw)
                    if raw:
                        self._consume(data, nursery, on_stream)
                        return
                except Exception as exc:  # ProtocolError, a GoAway's ClosedResourceError, any bug: this task's
                    failure.append(exc)
            poller.remove(fd)
            ended.set()

        poller.add(fd, readable)
        try:
            await ended.wait()
        finally:
            poller.remove(fd)
        if failure:
            raise failure[0]
        self.close_reason = self.close_reason or "closed by peer"

    async def _receive(self) -> bytes:
        """What the network delivered (b"" at its end). On a socket: wait
        until it is readable, then one recv, where trio's recv tries first and
        so costs a failed recv and an exception per read."""
        sock = self._direct
        if sock is None:
            return await self.tcp.receive_some(READ_CHUNK)
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                return sock.recv(READ_CHUNK)
            except BlockingIOError:
                continue

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
        """Writes the backlog: what the socket did not take at once."""
        while True:
            await self._send_wanted.wait()
            self._send_wanted = trio.Event()
            while self.backlog:
                data = bytes(self.backlog)
                self.backlog.clear()
                self._writing = True
                try:
                    await self.tcp.send_all(data)
                finally:
                    self._writing = False
            self._drained.set()
            self._drained = trio.Event()


async def negotiate_inbound(stream: YamuxStream, supported: Collection[str]) -> tuple[str, BufferedStream]:
    buffered = BufferedStream(stream)
    return await multistream.handle(buffered, supported), buffered


async def negotiate_outbound(stream: YamuxStream, protocols: list[str]) -> tuple[str, BufferedStream]:
    buffered = BufferedStream(stream)
    return await multistream.select(buffered, protocols), buffered
