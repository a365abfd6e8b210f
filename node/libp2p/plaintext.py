"""`/plaintext/2.0.0`: no encryption, only an exchange of identities.

Each side sends one uvarint-length-prefixed Exchange{id, pubkey}; the
receiver checks that `id` is the peer id of `pubkey` (plaintext spec) and, when
dialling, that it is the peer it meant to reach. The connection then carries
the next layer's bytes unchanged. For experiments that want to measure the
cost of encryption, or to interoperate with hosts configured without it.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from node.wire.codec import encode_uvarint
from node.libp2p.identity import Identity, decode_public_key, peer_id_from_public_key, peer_id_to_b58
from node.libp2p.bufstream import BufferedStream
from node.libp2p.errors import ProtocolError
from node.proto import libp2p_pb2

PROTOCOL_ID = "/plaintext/2.0.0"
MAX_EXCHANGE = 8192


def encode_exchange(identity: Identity) -> bytes:
    key_type, data = decode_public_key(identity.public_key_proto)
    exchange = libp2p_pb2.Exchange(id=identity.peer_id, pubkey=libp2p_pb2.PublicKey(Type=key_type, Data=data))
    body = exchange.SerializeToString()
    return encode_uvarint(len(body)) + body


def check_exchange(body: bytes) -> bytes:
    """The remote peer id, checked against its public key."""
    exchange = libp2p_pb2.Exchange()
    try:
        exchange.ParseFromString(body)
    except DecodeError as exc:
        raise ProtocolError(f"plaintext: Exchange does not decode: {exc}") from None
    if not exchange.HasField("id") or not exchange.HasField("pubkey"):
        raise ProtocolError("plaintext: Exchange lacks its id or pubkey")
    try:
        derived = peer_id_from_public_key(exchange.pubkey.SerializeToString())
    except ValueError as exc:
        raise ProtocolError(f"plaintext: public key: {exc}") from None
    if derived != exchange.id:
        raise ProtocolError(
            f"plaintext: Exchange claims peer id {peer_id_to_b58(exchange.id) if exchange.id else '(empty)'} "
            f"but its key is {peer_id_to_b58(derived)}")
    return derived


async def handshake(stream: BufferedStream, identity: Identity, expect: bytes | None = None) -> bytes:
    """The remote peer id; `stream` then carries the next layer."""
    await stream.send_all(encode_exchange(identity))
    peer_id = check_exchange(await stream.read_delimited(MAX_EXCHANGE, "a plaintext Exchange"))
    if expect is not None and peer_id != expect:
        raise ProtocolError(f"plaintext: dialled {peer_id_to_b58(expect)} but the peer is {peer_id_to_b58(peer_id)}")
    return peer_id
