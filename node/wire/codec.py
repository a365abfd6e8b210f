"""uvarint-length-prefixed frames, as libp2p pubsub streams and go-libp2p-pubsub's
protobuf tracer write them.

`FrameDecoder` is fed bytes as they arrive and yields whole frames; anything a
peer can send that is not a well-formed frame raises one error type,
`FrameError`, so the runtime can drop that peer and carry on.
"""

from __future__ import annotations

from collections.abc import Iterator

DEFAULT_MAX_FRAME = 1 << 20  # 1 MiB, go-libp2p-pubsub's default max message size
_MAX_VARINT_BYTES = 10


class FrameError(ValueError):
    """A frame that is truncated, oversized or whose length prefix is malformed."""


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def encode_uvarint(n: int) -> bytes:
    if n < 0x80:
        if n < 0:
            raise ValueError("uvarint cannot encode a negative number")
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_frame(payload: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    if len(payload) > max_frame:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {max_frame}-byte limit")
    return encode_uvarint(len(payload)) + payload


def read_uvarint(buf: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None when the prefix is not complete yet."""
    value = 0
    shift = 0
    for i in range(pos, min(len(buf), pos + _MAX_VARINT_BYTES)):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    if len(buf) - pos >= _MAX_VARINT_BYTES:
        raise FrameError("length prefix longer than 10 bytes")
    return None


class FrameDecoder:
    """Incremental decoder: `feed(bytes)` yields every complete frame so far."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Buffer `data` now and return an iterator over the complete frames;
        the bytes are kept even if the iterator is never consumed."""
        self._buf += data
        return self._frames()

    def _frames(self) -> Iterator[bytes]:
        pos = 0
        try:
            while True:
                head = read_uvarint(self._buf, pos)
                if head is None:
                    return
                length, start = head
                if length > self.max_frame:
                    raise FrameError(
                        f"frame of {length} bytes exceeds the {self.max_frame}-byte limit"
                    )
                end = start + length
                if end > len(self._buf):
                    return
                frame = bytes(self._buf[start:end])
                pos = end
                yield frame
        finally:
            del self._buf[:pos]

    def pending(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def close(self) -> None:
        """End of stream: leftover bytes mean the last frame was truncated."""
        if self._buf:
            raise FrameError(f"stream ended inside a frame ({len(self._buf)} bytes left over)")


def decode_frames(data: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> list[bytes]:
    """Split a complete byte string into frames; a truncated tail raises FrameError."""
    decoder = FrameDecoder(max_frame)
    frames = list(decoder.feed(data))
    decoder.close()
    return frames
