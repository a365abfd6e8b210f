"""multistream-select 1.0 (`/multistream/1.0.0`), both sides.

Every message is a uvarint length, then UTF-8 text ending in a newline. Both
sides first send the protocol id `/multistream/1.0.0`; the dialer then
proposes protocols one at a time and the listener echoes the one it accepts
or answers `na`. As go-libp2p does, the dialer sends its header and first
proposal together (no round trip wasted when the listener speaks it).

`ls` is answered with `na` like any other protocol we do not speak: the spec
makes listing optional.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from node.wire.codec import encode_uvarint
from node.libp2p.bufstream import BufferedStream
from node.libp2p.errors import ProtocolError

MULTISTREAM = "/multistream/1.0.0"
NA = "na"
MAX_MESSAGE = 1024  # go-multistream's limit on a protocol message
MAX_PROPOSALS = 64  # a listener stops answering after this many refusals


def encode_message(text: str) -> bytes:
    body = text.encode() + b"\n"
    return encode_uvarint(len(body)) + body


async def read_message(stream: BufferedStream) -> str:
    body = await stream.read_delimited(MAX_MESSAGE, "a multistream message")
    if not body.endswith(b"\n"):
        raise ProtocolError("multistream message does not end with a newline")
    try:
        return body[:-1].decode()
    except UnicodeDecodeError:
        raise ProtocolError("multistream message is not UTF-8") from None


async def _expect_header(stream: BufferedStream) -> None:
    header = await read_message(stream)
    if header != MULTISTREAM:
        raise ProtocolError(f"peer speaks {header!r}, not {MULTISTREAM}")


async def select(stream: BufferedStream, protocols: Sequence[str]) -> str:
    """Dialer side: the first of `protocols` (in order) the listener accepts;
    ProtocolError when it refuses them all."""
    if not protocols:
        raise ValueError("nothing to propose")
    await stream.send_all(encode_message(MULTISTREAM) + encode_message(protocols[0]))
    await _expect_header(stream)
    for i, proto in enumerate(protocols):
        if i:
            await stream.send_all(encode_message(proto))
        answer = await read_message(stream)
        if answer == proto:
            return proto
        if answer != NA:
            raise ProtocolError(f"proposed {proto!r}, the listener answered {answer!r}")
    raise ProtocolError(f"the listener speaks none of {list(protocols)}")


async def handle(stream: BufferedStream, supported: Collection[str]) -> str:
    """Listener side: the protocol the dialer settles on among `supported`;
    everything else gets `na`."""
    await stream.send_all(encode_message(MULTISTREAM))
    await _expect_header(stream)
    for _ in range(MAX_PROPOSALS):
        proposal = await read_message(stream)
        if proposal in supported:
            await stream.send_all(encode_message(proposal))
            return proposal
        await stream.send_all(encode_message(NA))
    raise ProtocolError(f"the dialer made {MAX_PROPOSALS} proposals we do not speak")
