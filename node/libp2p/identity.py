"""libp2p identities: keys, peer ids and signatures, as the peer-ids spec defines them.

Why this module exists: every node of a testbed is a libp2p peer. Its peer id is
what go-libp2p, rust-libp2p and py-libp2p would compute for its key, so their
traces, dials and signatures line up with ours.

- Keys are derived as libp2p test-plans' gossipsub-interop derives them: the
  ed25519 seed of node `i` is `i` as a little-endian u32, zero-padded to 32
  bytes. Any implementation can therefore compute every node's peer id.
- A public key travels as crypto.proto's `PublicKey{Type = 1, Data = 2}` in the
  spec's deterministic encoding (fields in order, minimal varints).
- A peer id is a multihash of that encoding: the identity multihash when it is at
  most 42 bytes (ed25519, secp256k1), sha2-256 otherwise (RSA, most ECDSA keys).
- Signatures are verified for the four key types the spec lists: Ed25519 (raw
  64-byte signature), Secp256k1 and ECDSA (DER ECDSA over SHA-256) and RSA
  (PKCS#1 v1.5 over SHA-256). Only Ed25519 keys are ever made here.

Every parser raises ValueError with a message that says what was wrong.

Only Ed25519 is imported up front: the other key types' modules (with
`cryptography`'s serialization, about 3 MB of a router's memory) are imported
the first time such a key is verified, which none of our routers does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ed25519

from node.wire.codec import FrameError, encode_uvarint, read_uvarint

# crypto.proto's KeyType enum.
KEY_RSA = 0
KEY_ED25519 = 1
KEY_SECP256K1 = 2
KEY_ECDSA = 3
KEY_TYPE_NAMES = {KEY_RSA: "RSA", KEY_ED25519: "Ed25519", KEY_SECP256K1: "Secp256k1", KEY_ECDSA: "ECDSA"}

# multihash codes (multicodec table) and the peer-ids spec's inlining bound.
MULTIHASH_IDENTITY = 0x00
MULTIHASH_SHA2_256 = 0x12
MAX_INLINE_KEY_LENGTH = 42

ED25519_SIGNATURE_SIZE = 64
# The author of messages the testbed injects (the reference simulator hands one
# message to several nodes): the last u32 index, which no experiment reaches,
# so every node and every tool derives the same injector key.
INJECTOR_INDEX = 0xFFFF_FFFF
B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(B58_ALPHABET)}


@dataclass(frozen=True)
class Identity:
    """One node's libp2p identity: its experiment index, key and peer id."""

    index: int
    private_key: ed25519.Ed25519PrivateKey
    public_key_proto: bytes
    peer_id: bytes

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `data`."""
        return self.private_key.sign(data)

    @property
    def peer_id_b58(self) -> str:
        return peer_id_to_b58(self.peer_id)


def ed25519_seed_for_index(index: int) -> bytes:
    """test-plans gossipsub-interop's seed: the index as a little-endian u32,
    zero-padded to 32 bytes."""
    if not 0 <= index < 1 << 32:
        raise ValueError(f"node index {index} does not fit in an unsigned 32-bit integer")
    return index.to_bytes(4, "little") + bytes(28)


@lru_cache(maxsize=None)
def identity_for_index(index: int) -> Identity:
    """The identity of the node with this experiment index (cached: keys are
    deterministic, and deriving one costs a scalar multiplication)."""
    key = ed25519.Ed25519PrivateKey.from_private_bytes(ed25519_seed_for_index(index))
    raw = key.public_key().public_bytes_raw()
    proto = encode_public_key(KEY_ED25519, raw)
    return Identity(index=index, private_key=key, public_key_proto=proto,
                    peer_id=peer_id_from_public_key(proto))


# ------------------------------------------------------------ crypto.proto PublicKey


def encode_public_key(key_type: int, data: bytes) -> bytes:
    """crypto.proto `PublicKey{Type, Data}` in the spec's deterministic encoding."""
    if key_type not in KEY_TYPE_NAMES:
        raise ValueError(f"unknown libp2p key type {key_type}")
    return bytes([0x08, key_type, 0x12]) + encode_uvarint(len(data)) + data


def decode_public_key(proto: bytes) -> tuple[int, bytes]:
    """(key type, key data) from an encoded crypto.proto PublicKey; ValueError
    when it is not one, or the type is unknown."""
    key_type: int | None = None
    data: bytes | None = None
    pos = 0
    while pos < len(proto):
        tag, pos = _read_uvarint(proto, pos, "public key field tag")
        field, wire_type = tag >> 3, tag & 7
        if field == 1 and wire_type == 0:
            key_type, pos = _read_uvarint(proto, pos, "public key Type")
        elif field == 2 and wire_type == 2:
            length, pos = _read_uvarint(proto, pos, "public key Data length")
            if pos + length > len(proto):
                raise ValueError(
                    f"public key Data says {length} bytes but {len(proto) - pos} remain")
            data, pos = bytes(proto[pos:pos + length]), pos + length
        else:
            raise ValueError(f"public key has unexpected field {field} (wire type {wire_type})")
    if key_type is None or data is None:
        raise ValueError("public key lacks its Type or its Data field")
    if key_type not in KEY_TYPE_NAMES:
        raise ValueError(f"public key has unknown key type {key_type}")
    return key_type, data


# ------------------------------------------------------------------------ peer ids


def peer_id_from_public_key(public_key_proto: bytes) -> bytes:
    """The peer id of an encoded public key: identity multihash when it is at most
    42 bytes, sha2-256 multihash otherwise."""
    decode_public_key(public_key_proto)
    if len(public_key_proto) <= MAX_INLINE_KEY_LENGTH:
        return bytes([MULTIHASH_IDENTITY]) + encode_uvarint(len(public_key_proto)) + public_key_proto
    return bytes([MULTIHASH_SHA2_256, 32]) + hashlib.sha256(public_key_proto).digest()


def public_key_from_peer_id(peer_id: bytes) -> bytes | None:
    """The encoded public key inlined in an identity-multihash peer id, or None
    for a sha2-256 peer id (whose key must travel separately)."""
    code, _, digest = _split_multihash(peer_id)
    if code == MULTIHASH_SHA2_256:
        return None
    decode_public_key(digest)
    return digest


def peer_id_to_b58(peer_id: bytes) -> str:
    """The peer id's base58btc text form (`12D3KooW...` for ed25519 keys)."""
    _split_multihash(peer_id)
    return b58encode(peer_id)


def peer_id_from_b58(text: str) -> bytes:
    """Peer id bytes from base58btc text; ValueError when it is not a valid
    identity or sha2-256 multihash."""
    pid = b58decode(text)
    try:
        _split_multihash(pid)
    except ValueError as exc:
        raise ValueError(f"peer id {text!r}: {exc}") from None
    return pid


def _split_multihash(peer_id: bytes) -> tuple[int, int, bytes]:
    if not peer_id:
        raise ValueError("peer id is empty")
    code, pos = _read_uvarint(peer_id, 0, "multihash code")
    length, pos = _read_uvarint(peer_id, pos, "multihash length")
    digest = bytes(peer_id[pos:])
    if len(digest) != length:
        raise ValueError(f"multihash says {length} digest bytes but has {len(digest)}")
    if code == MULTIHASH_SHA2_256:
        if length != 32:
            raise ValueError(f"sha2-256 multihash has a {length}-byte digest, not 32")
    elif code == MULTIHASH_IDENTITY:
        if length > MAX_INLINE_KEY_LENGTH:
            raise ValueError(f"identity multihash inlines {length} bytes, more than 42")
    else:
        raise ValueError(f"multihash code 0x{code:x} is neither identity (0x00) nor sha2-256 (0x12)")
    return code, length, digest


# ----------------------------------------------------------------------- signatures


def verify(public_key_proto: bytes, data: bytes, signature: bytes) -> bool:
    """Whether `signature` is the key's signature of `data`. False for a wrong
    signature; ValueError for a public key that cannot be parsed."""
    key_type, key_data = decode_public_key(public_key_proto)
    try:
        if key_type == KEY_ED25519:
            if len(key_data) != 32:
                raise ValueError(f"Ed25519 public key is {len(key_data)} bytes, not 32")
            if len(signature) != ED25519_SIGNATURE_SIZE:
                return False
            ed25519.Ed25519PublicKey.from_public_bytes(key_data).verify(signature, data)
        else:
            _verify_other(key_type, key_data, data, signature)
    except InvalidSignature:
        return False
    except UnsupportedAlgorithm as exc:
        raise ValueError(f"{KEY_TYPE_NAMES[key_type]} public key: {exc}") from None
    return True


def _verify_other(key_type: int, key_data: bytes, data: bytes, signature: bytes) -> None:
    """Secp256k1, ECDSA or RSA verification; raises InvalidSignature."""
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa  # noqa: PLC0415

    if key_type == KEY_SECP256K1:
        point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), key_data)
        point.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    elif key_type == KEY_ECDSA:
        key = serialization.load_der_public_key(key_data)
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError("ECDSA public key is not an elliptic-curve key")
        key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    else:
        key = serialization.load_der_public_key(key_data)
        if not isinstance(key, rsa.RSAPublicKey):
            raise ValueError("RSA public key is not an RSA key")
        key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())


# --------------------------------------------------------------------------- base58


def b58encode(data: bytes) -> str:
    """base58btc (Bitcoin's alphabet; leading zero bytes become '1')."""
    zeros = len(data) - len(data.lstrip(b"\0"))
    number = int.from_bytes(data, "big")
    digits = []
    while number:
        number, rem = divmod(number, 58)
        digits.append(B58_ALPHABET[rem])
    return "1" * zeros + "".join(reversed(digits))


def b58decode(text: str) -> bytes:
    if not text:
        raise ValueError("base58 text is empty")
    number = 0
    for pos, char in enumerate(text):
        digit = _B58_INDEX.get(char)
        if digit is None:
            raise ValueError(f"{text!r} has {char!r} at position {pos}, not a base58btc character")
        number = number * 58 + digit
    zeros = len(text) - len(text.lstrip("1"))
    body = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return bytes(zeros) + body


# -------------------------------------------------------------------------- varints


def _read_uvarint(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    """node.wire.codec's uvarint reader, with `what` named when it is cut short."""
    try:
        head = read_uvarint(buf, pos)
    except FrameError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if head is None:
        raise ValueError(f"{what} is truncated")
    return head
