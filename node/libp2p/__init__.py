"""The libp2p wire: TCP upgraded by multistream-select to a security protocol
(noise or plaintext), then to the yamux muxer, whose streams carry the pubsub
protocols. See docs/wire.md for the stack and its choices."""

from node.libp2p.errors import ProtocolError

__all__ = ["ProtocolError"]
