"""Message authenticity: how a network signs, authors and checks its messages,
and which message-id function it uses. One policy value per node, handed to
its engine like the RNG, so the engine stays sans-I/O.

The modes, in go-libp2p-pubsub's terms:
- `strict` (StrictSign, libp2p's default): every message carries from, seqno
  and a signature over `b"libp2p-pubsub:"` + the message encoded without
  signature and key; `key` is attached only when the public key cannot be
  recovered from `from` (ed25519 peer ids inline it). A message without a
  signature is rejected before the seen check ("missing signature"); the
  signature is verified after it ("invalid signature"), so a duplicate costs
  no verification.
- `author` (LaxNoSign): from and seqno, unsigned; a signature that is present
  is still verified, as go does.
- `anonymous` (StrictNoSign): no from, no seqno, no signature, no key; a
  message carrying any of them is rejected ("unexpected signature",
  "unexpected auth info"). The message id must come from the content.

`modelled=True` is the simulator's authenticity: no cryptography. Messages
carry a signature of Ed25519's real size (64 zero bytes), so byte counts are
right, and verification accepts exactly that signature; a forged one
(`forge`, 64 other bytes) fails, as it would fail a real verification.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.libp2p.identity import (
    ED25519_SIGNATURE_SIZE,
    Identity,
    peer_id_from_public_key,
    public_key_from_peer_id,
    verify,
)
from node.wire.rpc import (
    FIRST_8_BYTES,
    FROM_SEQNO,
    MESSAGE_ID_FUNCTIONS,
    Message,
    PeerId,
    encode_message,
    message_id,
    seqno_bytes,
)

STRICT = "strict"
AUTHOR = "author"
ANONYMOUS = "anonymous"
MODES = (STRICT, AUTHOR, ANONYMOUS)

SIGN_PREFIX = b"libp2p-pubsub:"
MODELLED_SIGNATURE = bytes(ED25519_SIGNATURE_SIZE)

# go-libp2p-pubsub's rejection reasons (tracer.go), as its traces spell them.
REJECT_MISSING_SIGNATURE = "missing signature"
REJECT_UNEXPECTED_SIGNATURE = "unexpected signature"
REJECT_UNEXPECTED_AUTH_INFO = "unexpected auth info"
REJECT_INVALID_SIGNATURE = "invalid signature"
REJECT_SELF_ORIGIN = "self originated message"
REJECT_VALIDATION_FAILED = "validation failed"


def check_combination(mode: str, message_id_function: str) -> None:
    """ValueError for a mode or message-id function no implementation could run."""
    if mode not in MODES:
        raise ValueError(f"unknown authenticity {mode!r} (known: {', '.join(MODES)})")
    if message_id_function not in MESSAGE_ID_FUNCTIONS:
        raise ValueError(
            f"unknown message-id function {message_id_function!r} (known: {', '.join(MESSAGE_ID_FUNCTIONS)})"
        )
    if mode == ANONYMOUS and message_id_function == FROM_SEQNO:
        raise ValueError(
            "anonymous messages have no from and no seqno, so the from-seqno message id would be "
            f"empty for all of them: use message_id: {FIRST_8_BYTES}"
        )


@dataclass(frozen=True)
class Authenticity:
    """One node's policy. `signer` is the node's identity, needed to author
    messages in strict mode."""

    mode: str = AUTHOR
    message_id: str = FROM_SEQNO
    signer: Identity | None = None
    modelled: bool = False

    def __post_init__(self) -> None:
        check_combination(self.mode, self.message_id)
        if self.mode == STRICT and self.signer is None:
            raise ValueError("strict authenticity signs every message: it needs the node's identity")

    # Publishing

    def author(self, from_peer: PeerId, seqno: int, topic: str, data: bytes) -> Message:
        """The message a node publishes: from, seqno, signature and key as the
        mode requires, and its id."""
        if self.mode == ANONYMOUS:
            return Message(b"", data, b"", topic, id=message_id(self.message_id, b"", b"", data))
        seq = seqno_bytes(seqno)
        mid = message_id(self.message_id, from_peer, seq, data)
        if self.mode == AUTHOR:
            return Message(from_peer, data, seq, topic, id=mid)
        signer = self.signer
        assert signer is not None  # __post_init__
        if from_peer != signer.peer_id:
            raise ValueError("a strict node signs only messages from its own peer id")
        if self.modelled:
            return Message(from_peer, data, seq, topic, MODELLED_SIGNATURE, id=mid)
        unsigned = Message(from_peer, data, seq, topic)
        signature = signer.sign(SIGN_PREFIX + encode_message(unsigned))
        key = b"" if public_key_from_peer_id(from_peer) is not None else signer.public_key_proto
        return Message(from_peer, data, seq, topic, signature, key, id=mid)

    def forge(self, from_peer: PeerId, seqno: int, topic: str, data: bytes, signature: bytes) -> Message:
        """A message claiming `from_peer` as its author whose `signature`
        is not its author's (an adversary's invalid message): every mode
        rejects it, as an invalid or an unexpected signature."""
        seq = seqno_bytes(seqno)
        mid = message_id(self.message_id, from_peer, seq, data)
        return Message(from_peer, data, seq, topic, signature, id=mid)

    # Receiving

    def reject_before_seen(self, msg: Message) -> str | None:
        """go's checkSigningPolicy: the reason to reject before the seen check."""
        if self.mode == STRICT:
            return None if msg.signature else REJECT_MISSING_SIGNATURE
        if self.mode == ANONYMOUS:
            if msg.signature:
                return REJECT_UNEXPECTED_SIGNATURE
            if msg.from_peer or msg.seqno or msg.key:
                return REJECT_UNEXPECTED_AUTH_INFO
        return None

    def reject_signature(self, msg: Message) -> str | None:
        """A present signature is verified (after the seen check, as go does)."""
        if not msg.signature:
            return None
        if self.modelled:
            return None if msg.signature == MODELLED_SIGNATURE else REJECT_INVALID_SIGNATURE
        return None if signature_valid(msg) else REJECT_INVALID_SIGNATURE


def signature_valid(msg: Message) -> bool:
    """Whether the message's signature is its author's: the key is the
    attached one (which must match `from`) or the one inlined in `from`."""
    try:
        if msg.key:
            if peer_id_from_public_key(msg.key) != msg.from_peer:
                return False
            public_key = msg.key
        else:
            inlined = public_key_from_peer_id(msg.from_peer)
            if inlined is None:
                return False
            public_key = inlined
        unsigned = Message(msg.from_peer, msg.data, msg.seqno, msg.topic)
        return verify(public_key, SIGN_PREFIX + encode_message(unsigned), msg.signature)
    except ValueError:
        return False
