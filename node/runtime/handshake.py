"""The hello exchanged on every new connection, before any RPC.

Both sides send one frame at once (no round trip to wait for): a JSON object
`{"hello": "gossip-testbed/1", "name": "n3", "peer_id": "12D3KooW...",
"protocols": ["/meshsub/1.0.0", "/floodsub/1.0.0"]}` whose first protocol is
the sender's preferred one; `peer_id` is the sender's libp2p peer id, which its
traces and messages carry. The
protocol the connection speaks is `negotiate(dialer's, listener's, dialer's
preferred)`, computed identically on both sides (as multistream-select lets the
initiator propose), so the two ends always agree. This stands in for libp2p's
multistream-select + identify until a libp2p transport exists.

Anything else (not JSON, missing fields, our own name, the wrong name for the
address we dialled, no common protocol) is a HandshakeError and the
connection is closed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from node.codec import FrameDecoder, FrameError, encode_frame
from node.engine.registry import negotiate
from node.identity import peer_id_from_b58

HELLO = "gossip-testbed/1"
MAX_HELLO = 64 << 10
MAX_NAME = 256
MAX_PROTOCOLS = 32


class HandshakeError(ValueError):
    """The peer's hello is missing, malformed or incompatible."""


@dataclass(frozen=True)
class Hello:
    name: str
    peer_id: str  # base58
    protocols: tuple[str, ...]  # preferred first

    def encode(self) -> bytes:
        body = json.dumps(
            {"hello": HELLO, "name": self.name, "peer_id": self.peer_id, "protocols": list(self.protocols)}
        )
        return encode_frame(body.encode(), MAX_HELLO)

    @property
    def peer_id_bytes(self) -> bytes:
        return peer_id_from_b58(self.peer_id)


def hello_for(name: str, peer_id: str, preferred: str, supported: frozenset[str]) -> Hello:
    return Hello(name, peer_id, (preferred, *sorted(supported - {preferred})))


def parse_hello(frame: bytes) -> Hello:
    if len(frame) > MAX_HELLO:
        raise HandshakeError(f"hello of {len(frame)} bytes is too large")
    try:
        raw = json.loads(frame.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HandshakeError(f"hello is not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("hello") != HELLO:
        raise HandshakeError("first frame is not a gossip-testbed hello")
    name, peer_id, protocols = raw.get("name"), raw.get("peer_id"), raw.get("protocols")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise HandshakeError("hello without a valid name")
    try:
        peer_id_from_b58(peer_id if isinstance(peer_id, str) else "")
    except ValueError as exc:
        raise HandshakeError(f"hello from {name!r} without a valid peer id: {exc}") from None
    if (
        not isinstance(protocols, list) or not protocols or len(protocols) > MAX_PROTOCOLS
        or not all(isinstance(p, str) and 0 < len(p) <= 256 for p in protocols)
    ):
        raise HandshakeError(f"hello from {name!r} without a valid protocol list")
    return Hello(name, peer_id, tuple(protocols))


def agree(dialer: Hello, listener: Hello) -> str:
    """The protocol a connection speaks; both ends compute the same thing."""
    proto = negotiate(frozenset(dialer.protocols), frozenset(listener.protocols), dialer.protocols[0])
    if proto is None:
        raise HandshakeError(
            f"no common protocol between {dialer.name} {list(dialer.protocols)} "
            f"and {listener.name} {list(listener.protocols)}"
        )
    return proto


def check_peer_hello(ours: Hello, theirs: Hello, expect: str | None) -> None:
    if theirs.name == ours.name:
        raise HandshakeError(f"peer claims our own name {ours.name!r}")
    if expect is not None and theirs.name != expect:
        raise HandshakeError(f"dialled {expect!r} but the peer says it is {theirs.name!r}")


def first_frame(decoder: FrameDecoder, data: bytes) -> bytes | None:
    """Feed bytes; the first complete frame, or None if more bytes are needed.
    Frames after it stay buffered in the decoder for the RPC reader."""
    try:
        for frame in decoder.feed(data):
            return frame
    except FrameError as exc:
        raise HandshakeError(f"bad hello frame: {exc}") from None
    return None
