"""One connection to one peer, after the handshake: a reader that turns bytes
into frames for the node, and a writer that drains a bounded outbound queue
through the peer's delay line.

The queue is the only place an RPC waits: `offer` never blocks, so one slow
or stalled peer fills its own queue (and the node records DROP_RPC) while the
router keeps serving everybody else, as go-libp2p-pubsub's per-peer outbound
queue does.

A link ends when the peer closes, sends something that is not a frame, or
`close()` is called; the task that runs it then tells the node.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from node.codec import FrameDecoder
from node.runtime.shaper import LinkShaper

READ_CHUNK = 64 << 10
WRITE_BATCH = 64  # frames coalesced into one send
FRAMES_PER_CHECKPOINT = 64  # yield to other tasks while a peer floods us


class PeerLink:
    def __init__(
        self,
        name: str,
        peer_id: bytes,
        stream: trio.abc.Stream,
        decoder: FrameDecoder,
        dialer: str,
        protocol: str,
        shaper: LinkShaper,
        queue_len: int,
        on_frame: Callable[[PeerLink, bytes], None],
    ) -> None:
        self.name = name
        self.peer_id = peer_id
        self.stream = stream
        self.decoder = decoder
        self.dialer = dialer
        self.protocol = protocol
        self.shaper = shaper
        self.on_frame = on_frame
        self._send, self._recv = trio.open_memory_channel[tuple[float, bytes]](max(queue_len, 1))
        self._held: tuple[float, bytes] | None = None
        self._writing = False
        self._cancel = trio.CancelScope()
        self.close_reason = ""
        self.misbehaved = False
        self.bytes_in = 0
        self.bytes_out = 0
        self.rpcs_in = 0

    # The node's side

    def offer(self, frame: bytes) -> str:
        """Queue a frame: 'sent' (queued), 'lost' (the shaper lost it on the
        way: still a SEND_RPC) or 'dropped' (queue full: a DROP_RPC)."""
        now = trio.current_time()
        if self.shaper.noop:
            due = now
        else:
            maybe = self.shaper.schedule(now, len(frame))
            if maybe is None:
                return "lost"
            due = maybe
        try:
            self._send.send_nowait((due, frame))
        except trio.WouldBlock:
            return "dropped"
        return "sent"

    def pending(self) -> int:
        return self._recv.statistics().current_buffer_used + (1 if self._held or self._writing else 0)

    def close(self, reason: str) -> None:
        if not self.close_reason:
            self.close_reason = reason
        self._cancel.cancel()

    # The connection's task

    async def run(self) -> None:
        """Until the peer goes away or `close` is called; returns the reason."""
        with self._cancel:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    await self._reader()
                    nursery.cancel_scope.cancel()
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
                self.close_reason = self.close_reason or f"connection error: {group.exceptions[0]}"
        await trio.aclose_forcefully(self.stream)

    async def _reader(self) -> None:
        """Frames to the node until EOF; a malformed frame, or one the node
        refuses (`on_frame` raises ValueError: undecodable RPC, oversized
        frame), ends the link and marks the peer as misbehaving."""
        count = 0
        data = b""
        try:
            while True:
                for frame in self.decoder.feed(data):
                    self.on_frame(self, frame)
                    count += 1
                    if count % FRAMES_PER_CHECKPOINT == 0:
                        await trio.lowlevel.checkpoint()
                data = await self.stream.receive_some(READ_CHUNK)
                if not data:
                    self.close_reason = self.close_reason or "closed by peer"
                    return
                self.bytes_in += len(data)
        except ValueError as exc:  # FrameError, WireError, PeerError
            self.misbehaved = True
            self.close_reason = f"dropped: {exc}"

    async def _writer(self) -> None:
        while True:
            if self._held is None:
                self._held = await self._recv.receive()
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
                if nxt[0] <= now:
                    batch.append(nxt[1])
                else:
                    self._held = nxt
                    break
            data = b"".join(batch)
            self._writing = True
            try:
                await self.stream.send_all(data)
            finally:
                self._writing = False
            self.bytes_out += len(data)

    def idle(self) -> bool:
        return self.pending() == 0
