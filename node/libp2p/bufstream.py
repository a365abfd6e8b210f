"""A byte stream with a read-back buffer, for the handshakes.

Each upgrade step (multistream-select, the security handshake) reads exactly
the bytes it needs, but the network delivers whatever it has: bytes that
belong to the next layer may arrive with the last message of this one. They
stay in the buffer and are handed to whoever reads next."""

from __future__ import annotations

from node.libp2p.errors import ProtocolError

READ_CHUNK = 64 << 10
MAX_UVARINT_BYTES = 9


class BufferedStream:
    """Wraps any object with `receive_some` and `send_all` (a trio stream, the
    noise channel, a yamux stream)."""

    def __init__(self, stream, leftover: bytes = b"") -> None:
        self.stream = stream
        self._buf = bytearray(leftover)

    async def send_all(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._buf:
            data = bytes(self._buf)
            self._buf.clear()
            return data
        return await self.stream.receive_some(max_bytes or READ_CHUNK)

    async def _fill(self, what: str) -> None:
        data = await self.stream.receive_some(READ_CHUNK)
        if not data:
            raise ProtocolError(f"connection closed while reading {what}")
        self._buf += data

    async def read_exactly(self, n: int, what: str) -> bytes:
        while len(self._buf) < n:
            await self._fill(what)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def read_uvarint(self, what: str) -> int:
        value = shift = 0
        pos = 0
        while True:
            while pos >= len(self._buf):
                await self._fill(what)
            byte = self._buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                del self._buf[:pos]
                return value
            shift += 7
            if pos >= MAX_UVARINT_BYTES:
                raise ProtocolError(f"{what}: length prefix longer than {MAX_UVARINT_BYTES} bytes")

    async def read_delimited(self, limit: int, what: str) -> bytes:
        """One uvarint-length-prefixed message of at most `limit` bytes."""
        length = await self.read_uvarint(what)
        if length > limit:
            raise ProtocolError(f"{what} of {length} bytes exceeds the {limit}-byte limit")
        return await self.read_exactly(length, what)

    def take_buffer(self) -> bytes:
        """What was read ahead and not consumed (for the next layer)."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

