"""node.libp2p.identity: test-plans key derivation, peer ids against published values,
base58/multihash round trips, and signatures for every key type libp2p lists."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from node.libp2p.identity import (
    KEY_ECDSA,
    KEY_ED25519,
    KEY_RSA,
    KEY_SECP256K1,
    b58decode,
    b58encode,
    decode_public_key,
    ed25519_seed_for_index,
    encode_public_key,
    identity_for_index,
    peer_id_from_b58,
    peer_id_from_public_key,
    peer_id_to_b58,
    public_key_from_peer_id,
    verify,
)

# rust-libp2p's examples derive `ed25519_from_bytes([seed, 0, ..., 0])`, the same key
# as test-plans' little-endian u32 seed for indices below 256; these two peer ids
# are printed in its relay / hole-punching tutorials (seed 0 and seed 1).
NODE0_B58 = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
NODE1_B58 = "12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X"
# RFC 8032's ed25519 public key for the all-zero seed (node 0).
NODE0_RAW_PUBLIC = bytes.fromhex("3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29")


def test_seed_is_little_endian_u32_zero_padded() -> None:
    assert ed25519_seed_for_index(0) == bytes(32)
    assert ed25519_seed_for_index(0x01020304) == bytes([4, 3, 2, 1]) + bytes(28)
    with pytest.raises(ValueError, match="32-bit"):
        ed25519_seed_for_index(1 << 32)
    with pytest.raises(ValueError, match="32-bit"):
        ed25519_seed_for_index(-1)


def test_node0_and_node1_peer_ids_match_rust_libp2p() -> None:
    node0, node1 = identity_for_index(0), identity_for_index(1)
    assert node0.public_key_proto == bytes([0x08, 0x01, 0x12, 0x20]) + NODE0_RAW_PUBLIC
    assert node0.peer_id == bytes([0x00, 0x24]) + node0.public_key_proto
    assert peer_id_to_b58(node0.peer_id) == NODE0_B58
    assert node1.peer_id_b58 == NODE1_B58
    assert identity_for_index(1) is node1  # cached
    assert node0.index == 0 and node1.index == 1


def test_every_index_gets_a_distinct_12D3KooW_peer_id() -> None:
    ids = {identity_for_index(i).peer_id_b58 for i in range(300)}
    assert len(ids) == 300
    assert all(pid.startswith("12D3KooW") for pid in ids)


def test_b58_round_trip_and_leading_zeros() -> None:
    assert b58encode(b"\0\0\x01") == "112"
    assert b58decode("112") == b"\0\0\x01"
    assert b58encode(b"hello world") == "StV1DL6CwTryKyV"  # Bitcoin's alphabet
    pid = identity_for_index(42).peer_id
    assert peer_id_from_b58(peer_id_to_b58(pid)) == pid


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("12D3KooW0", "not a base58btc character"),  # '0' is not in the alphabet
        (b58encode(bytes([0x13, 1, 0])), "neither identity"),  # sha-512 code, not a peer id
        (NODE0_B58[:-3], "digest bytes"),  # truncated
    ],
)
def test_peer_id_from_b58_rejects_garbage(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        peer_id_from_b58(text)


def test_public_key_proto_round_trip_and_errors() -> None:
    proto = identity_for_index(3).public_key_proto
    assert decode_public_key(proto) == (KEY_ED25519, proto[4:])
    assert public_key_from_peer_id(identity_for_index(3).peer_id) == proto
    with pytest.raises(ValueError, match="lacks"):
        decode_public_key(b"\x08\x01")
    with pytest.raises(ValueError, match="unknown key type 9"):
        decode_public_key(b"\x08\x09\x12\x00")
    with pytest.raises(ValueError, match="says 32 bytes"):
        decode_public_key(proto[:-1])
    with pytest.raises(ValueError, match="unexpected field 3"):
        decode_public_key(proto + b"\x18\x01")
    with pytest.raises(ValueError, match="truncated"):
        decode_public_key(b"\x08")


def test_ed25519_sign_verify() -> None:
    node = identity_for_index(7)
    sig = node.sign(b"libp2p-pubsub:payload")
    assert len(sig) == 64
    assert verify(node.public_key_proto, b"libp2p-pubsub:payload", sig)
    assert not verify(node.public_key_proto, b"libp2p-pubsub:payloaX", sig)
    assert not verify(identity_for_index(8).public_key_proto, b"libp2p-pubsub:payload", sig)
    assert not verify(node.public_key_proto, b"libp2p-pubsub:payload", sig[:63])
    with pytest.raises(ValueError, match="31 bytes"):
        verify(encode_public_key(KEY_ED25519, bytes(31)), b"x", sig)


def test_secp256k1_keys_inline_and_verify() -> None:
    key = ec.derive_private_key(12345, ec.SECP256K1())
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    proto = encode_public_key(KEY_SECP256K1, point)
    pid = peer_id_from_public_key(proto)
    assert pid[0] == 0x00 and public_key_from_peer_id(pid) == proto  # 37 bytes: inlined
    assert peer_id_to_b58(pid).startswith("16Uiu2")
    sig = key.sign(b"data", ec.ECDSA(hashes.SHA256()))  # DER, as go's secp256k1 signs
    assert verify(proto, b"data", sig)
    assert not verify(proto, b"datA", sig)
    with pytest.raises(ValueError):
        verify(encode_public_key(KEY_SECP256K1, b"\x02" + bytes(5)), b"data", sig)


def test_rsa_keys_are_hashed_and_verify() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    proto = encode_public_key(KEY_RSA, der)
    pid = peer_id_from_public_key(proto)
    assert pid == bytes([0x12, 0x20]) + hashlib.sha256(proto).digest()
    assert peer_id_to_b58(pid).startswith("Qm")
    assert public_key_from_peer_id(pid) is None  # the key must travel with the message
    sig = key.sign(b"data", padding.PKCS1v15(), hashes.SHA256())
    assert verify(proto, b"data", sig)
    assert not verify(proto, b"other", sig)


def test_ecdsa_p256_verify() -> None:
    key = ec.derive_private_key(777, ec.SECP256R1())
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    proto = encode_public_key(KEY_ECDSA, der)
    sig = key.sign(b"data", ec.ECDSA(hashes.SHA256()))
    assert verify(proto, b"data", sig)
    assert not verify(proto, b"nope", sig)
    with pytest.raises(ValueError):
        verify(encode_public_key(KEY_ECDSA, b"\x30\x03garbage"), b"data", sig)
