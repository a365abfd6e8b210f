"""One error type for everything a remote peer can get wrong on the wire.

Every layer (multistream, noise, plaintext, yamux) raises ProtocolError, a
ValueError, with a message that says which layer and what was wrong, so the
runtime drops that peer with one `except` and keeps running."""

from __future__ import annotations


class ProtocolError(ValueError):
    """The remote peer broke a libp2p protocol rule; the connection is dropped."""
