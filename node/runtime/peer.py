"""One libp2p peer: its muxed connection, the pubsub stream we write to it,
the pubsub streams it opens to us, and a bounded outbound queue drained
through the peer's delay line.

As libp2p pubsub does, each side opens one outbound stream to the other
(`/meshsub/1.0.0` or `/floodsub/1.0.0`, whichever the remote accepts first in
our order of preference) and only writes to it; RPCs are read from the
streams the remote opens. The peer joins the engine when our outbound stream
is negotiated (`on_ready`): its protocol is the one the engine is told.
Inbound RPCs wait until then, so the engine never hears from a peer it does
not know. Streams for protocols we do not speak (identify, ping, newer
meshsub versions) are answered `na` by multistream and end without harm.

The queue is the only place an RPC waits: `offer` never blocks, so one slow
or stalled peer fills its own queue (and the node records DROP_RPC) while the
router keeps serving everybody else, as go-libp2p-pubsub's per-peer outbound
queue does. An RPC due now, with nothing queued before it and room in the
stream's window, skips the queue and goes straight into the connection; the
RPCs a peer sends are decoded in the connection's reader task (the stream's
sink), so neither direction costs a task switch per RPC.

A peer ends when the connection closes, breaks a wire rule, sends an RPC the
node refuses (`on_frame` raises ValueError), or `close()` is called; the task
that runs it then tells the node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from node.wire.codec import FrameDecoder
from node.libp2p.bufstream import BufferedStream
from node.libp2p.connection import MuxedConnection, YamuxStream, negotiate_inbound, negotiate_outbound
from node.libp2p.errors import ProtocolError
from node.shaping.shaper import LinkShaper

WRITE_BATCH = 64  # frames coalesced into one send
NEGOTIATE_TIMEOUT_S = 10.0


class PeerLink:
    def __init__(
        self,
        conn: MuxedConnection,
        label: str,
        dialer: bytes,
        shaper: LinkShaper,
        queue_len: int,
        max_frame: int,
        protocols: Sequence[str],
        on_ready: Callable[[PeerLink], None],
        on_frame: Callable[[PeerLink, bytes], None],
    ) -> None:
        self.conn = conn
        self.peer_id = conn.peer_id
        self.name = label  # the experiment's name, or the base58 peer id of an outsider
        self.dialer = dialer  # peer id of the side that dialled this connection
        self.shaper = shaper
        self.max_frame = max_frame
        self.protocols = tuple(protocols)  # ours, preferred first
        self.on_ready = on_ready
        self.on_frame = on_frame
        self.protocol = ""  # negotiated on our outbound stream
        self.ready = trio.Event()
        self._send, self._recv = trio.open_memory_channel[tuple[float, bytes]](max(queue_len, 1))
        self._queued = 0  # frames in the channel
        self._held: tuple[float, bytes] | None = None
        self._writing = False
        self._out: YamuxStream | None = None  # our pubsub stream, once negotiated
        self._cancel = trio.CancelScope()
        self.close_reason = ""
        self.misbehaved = False
        self.rpcs_in = 0

    @property
    def bytes_in(self) -> int:
        return self.conn.bytes_in

    @property
    def bytes_out(self) -> int:
        return self.conn.bytes_out

    # The node's side

    def offer(self, frame: bytes) -> str:
        """Queue a frame: 'sent' (queued), 'lost' (the shaper lost it on the
        way: still a SEND_RPC) or 'dropped' (queue full: a DROP_RPC)."""
        due = 0.0  # at once
        if not self.shaper.noop:
            now = trio.current_time()
            maybe = self.shaper.schedule(now, len(frame))
            if maybe is None:
                return "lost"
            if maybe > now:
                due = maybe
        if not due and self._out is not None and self.idle() and self._out.try_send(frame):
            return "sent"
        try:
            self._send.send_nowait((due, frame))
        except trio.WouldBlock:
            return "dropped"
        self._queued += 1
        return "sent"

    def pending(self) -> int:
        return self._queued + (1 if self._held or self._writing else 0)

    def idle(self) -> bool:
        return self.pending() == 0

    def close(self, reason: str) -> None:
        if not self.close_reason:
            self.close_reason = reason
        self._cancel.cancel()
        self.conn.close(reason)

    def _drop(self, reason: str) -> None:
        self.misbehaved = True
        self.close(f"dropped: {reason}")

    # The connection's task

    async def run(self) -> None:
        """Until the connection ends or `close` is called."""
        with self._cancel:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._outbound)
                await self.conn.run(self._inbound)
                nursery.cancel_scope.cancel()
        if self.conn.misbehaved:
            self.misbehaved = True
        self.close_reason = self.close_reason or self.conn.close_reason or "connection ended"
        await trio.aclose_forcefully(self.conn.tcp)

    async def _outbound(self) -> None:
        try:
            stream = self.conn.open_stream()  # ProtocolError once the remote sent GoAway (py-libp2p does at once)
            with trio.fail_after(NEGOTIATE_TIMEOUT_S):
                self.protocol, out = await negotiate_outbound(stream, list(self.protocols))
        except (ProtocolError, trio.TooSlowError) as exc:
            self.close(f"no pubsub stream: {exc}")
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        self._out = stream
        self.ready.set()
        self.on_ready(self)
        try:
            await self._writer(out)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.close(f"pubsub stream broken: {exc}")

    async def _inbound(self, stream: YamuxStream) -> None:
        """A stream the remote opened: RPCs if it is a pubsub protocol,
        decoded as they arrive (the stream's sink) from when the peer is
        ready until the stream ends."""
        try:
            with trio.fail_after(NEGOTIATE_TIMEOUT_S):
                _, buffered = await negotiate_inbound(stream, set(self.protocols))
        except (ProtocolError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.aclose()
            return
        await self.ready.wait()
        decoder = FrameDecoder(self.max_frame)

        def sink(data: bytes) -> None:
            if self.close_reason:
                return
            try:
                for frame in decoder.feed(data):
                    self.on_frame(self, frame)
            except ValueError as exc:  # FrameError, WireError, PeerError
                self._drop(str(exc))

        sink(buffered.take_buffer())
        stream.set_sink(sink)
        try:
            await stream.wait_ended()
            decoder.close()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except ValueError as exc:  # the stream ended inside a frame
            self._drop(str(exc))
        await stream.aclose()

    async def _writer(self, stream: BufferedStream) -> None:
        while True:
            if self._held is None:
                self._held = await self._recv.receive()
                self._queued -= 1
            due, frame = self._held
            if due > trio.current_time():
                await trio.sleep_until(due)
            self._held = None
            batch = [frame]
            now = trio.current_time()
            while len(batch) < WRITE_BATCH:
                try:
                    nxt = self._recv.receive_nowait()
                except trio.WouldBlock:
                    break
                self._queued -= 1
                if nxt[0] <= now:
                    batch.append(nxt[1])
                else:
                    self._held = nxt
                    break
            self._writing = True
            try:
                await stream.send_all(b"".join(batch))
            finally:
                self._writing = False
