"""Message authenticity (node.engine.authenticity) and message ids: what each
mode puts in a message, what a receiving engine rejects and with which of
go-libp2p-pubsub's reasons, and that signatures are libp2p's (checked against
an independently built protobuf encoding and a foreign RSA-keyed author)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from node.engine import TraceType, make_router
from node.engine.authenticity import (
    ANONYMOUS,
    AUTHOR,
    MODELLED_SIGNATURE,
    SIGN_PREFIX,
    STRICT,
    Authenticity,
    check_combination,
    signature_valid,
)
from node.libp2p.identity import KEY_RSA, encode_public_key, identity_for_index, peer_id_from_public_key, verify
from node.proto import rpc_pb2
from node.wire.rpc import (
    FIRST_8_BYTES,
    FROM_SEQNO,
    Message,
    Rpc,
    SubOpts,
    decode_rpc,
    encode_rpc,
    message_id,
    rpc_size,
)

T = "t"
ME, PEER = identity_for_index(0), identity_for_index(1)


def strict(identity=ME, **kw) -> Authenticity:
    return Authenticity(STRICT, signer=identity, **kw)


def receiver(auth: Authenticity, identity=ME):
    """A gossipsub engine subscribed to T with one subscribed peer (PEER)."""
    r = make_router("gossipsub", identity.peer_id, 0, {}, auth=auth)
    r.join(0, T)
    r.add_peer(0, PEER.peer_id, r.protocol_id)
    r.handle_rpc(0, PEER.peer_id, Rpc(subscriptions=(SubOpts(True, T),)))
    return r


def receive(r, msg: Message):
    out = r.handle_rpc(1, PEER.peer_id, Rpc(publish=(msg,)))
    rejects = [ev.reason for ev in out.trace if ev.type == TraceType.REJECT_MESSAGE]
    return out.deliveries, rejects


def test_strict_signature_is_over_prefix_and_message_without_signature_and_key():
    msg = strict(PEER).author(PEER.peer_id, 7, T, b"payload")
    assert msg.from_peer == PEER.peer_id and msg.seqno == (7).to_bytes(8, "big")
    assert msg.key == b""  # an ed25519 peer id inlines its key
    pb = rpc_pb2.Message(data=b"payload", seqno=(7).to_bytes(8, "big"), topic=T)
    setattr(pb, "from", PEER.peer_id)
    assert verify(PEER.public_key_proto, SIGN_PREFIX + pb.SerializeToString(), msg.signature)
    assert signature_valid(msg)


def test_strict_only_signs_its_own_messages():
    with pytest.raises(ValueError, match="own peer id"):
        strict(ME).author(PEER.peer_id, 1, T, b"x")
    with pytest.raises(ValueError, match="identity"):
        Authenticity(STRICT)


def test_strict_receiver_accepts_signed_and_rejects_with_gos_reasons():
    sender = strict(PEER)
    good = sender.author(PEER.peer_id, 1, T, b"good")
    r = receiver(strict())
    assert receive(r, good) == ((good,), [])
    unsigned = Message(PEER.peer_id, b"x", (2).to_bytes(8, "big"), T)
    assert receive(r, unsigned) == ((), ["missing signature"])
    tampered = replace(sender.author(PEER.peer_id, 3, T, b"abc"), data=b"abd")
    assert receive(r, tampered) == ((), ["invalid signature"])
    forged = replace(sender.author(PEER.peer_id, 4, T, b"x"), from_peer=identity_for_index(2).peer_id)
    assert receive(r, forged)[1] == ["invalid signature"]
    garbage_from = replace(sender.author(PEER.peer_id, 5, T, b"x"), from_peer=b"not a peer id")
    assert receive(r, garbage_from)[1] == ["invalid signature"]
    assert receive(r, good)[1] == []  # a duplicate is not verified again, nor rejected


def test_invalid_message_is_not_marked_seen():
    sender = strict(PEER)
    good = sender.author(PEER.peer_id, 1, T, b"abc")
    r = receiver(strict())
    assert receive(r, replace(good, data=b"abd", id=good.id))[1] == ["invalid signature"]
    assert receive(r, good) == ((good,), [])


def test_attached_key_is_used_and_must_match_from():
    """A foreign author with an RSA key: its peer id is a sha256 multihash, so
    the key travels in the message."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    proto = encode_public_key(KEY_RSA, key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    author = peer_id_from_public_key(proto)
    unsigned = Message(author, b"data", (1).to_bytes(8, "big"), T)
    pb = rpc_pb2.Message(data=b"data", seqno=(1).to_bytes(8, "big"), topic=T)
    setattr(pb, "from", author)
    sig = key.sign(SIGN_PREFIX + pb.SerializeToString(), padding.PKCS1v15(), hashes.SHA256())
    assert signature_valid(replace(unsigned, signature=sig, key=proto))
    assert not signature_valid(replace(unsigned, signature=sig))  # key not recoverable from `from`
    assert not signature_valid(replace(unsigned, signature=sig, key=ME.public_key_proto))


def test_author_mode_is_unsigned_but_verifies_present_signatures():
    auth = Authenticity(AUTHOR)
    msg = auth.author(PEER.peer_id, 1, T, b"x")
    assert (msg.signature, msg.key, msg.id) == (b"", b"", PEER.peer_id + (1).to_bytes(8, "big"))
    r = receiver(auth)
    assert receive(r, msg) == ((msg,), [])
    signed = strict(PEER).author(PEER.peer_id, 2, T, b"y")
    assert receive(r, replace(signed, data=b"z"))[1] == ["invalid signature"]
    assert receive(r, signed) == ((signed,), [])


def test_anonymous_messages_carry_no_auth_and_take_their_id_from_content():
    auth = Authenticity(ANONYMOUS, FIRST_8_BYTES)
    data = (123456789).to_bytes(8, "big") + b"rest"
    msg = auth.author(PEER.peer_id, 1, T, data)
    assert (msg.from_peer, msg.seqno, msg.signature, msg.key) == (b"", b"", b"", b"")
    assert msg.id == data[:8] and int.from_bytes(msg.id, "big") == 123456789
    r = receiver(auth)
    assert receive(r, msg) == ((msg,), [])
    other = auth.author(PEER.peer_id, 2, T, (5).to_bytes(8, "big"))
    assert receive(r, replace(other, from_peer=PEER.peer_id))[1] == ["unexpected auth info"]
    assert receive(r, replace(other, seqno=b"\x01"))[1] == ["unexpected auth info"]
    assert receive(r, replace(other, signature=b"s"))[1] == ["unexpected signature"]
    assert receive(r, other) == ((other,), [])


def test_combinations_no_implementation_could_run_are_refused():
    with pytest.raises(ValueError, match="first-8-bytes"):
        check_combination(ANONYMOUS, FROM_SEQNO)
    with pytest.raises(ValueError, match="unknown authenticity"):
        check_combination("signed", FROM_SEQNO)
    with pytest.raises(ValueError, match="unknown message-id function"):
        check_combination(STRICT, "sha256")
    check_combination(STRICT, FIRST_8_BYTES)


def test_message_ids():
    assert message_id(FROM_SEQNO, b"p", b"\x00\x01", b"data") == b"p\x00\x01"
    assert message_id(FIRST_8_BYTES, b"p", b"\x00\x01", b"0123456789") == b"01234567"
    assert message_id(FIRST_8_BYTES, b"p", b"", b"abc") == b"abc"
    with pytest.raises(ValueError, match="unknown message-id function"):
        message_id("hash", b"", b"", b"")
    rpc = encode_rpc(Rpc(publish=(Message(b"p", b"0123456789", b"\x01", T),)))
    assert decode_rpc(rpc, FIRST_8_BYTES).publish[0].id == b"01234567"
    assert decode_rpc(rpc).publish[0].id == b"p\x01"


@pytest.mark.parametrize("mode", [STRICT, AUTHOR, ANONYMOUS])
@pytest.mark.parametrize("modelled", [False, True])
def test_wire_round_trip_and_exact_size(mode, modelled):
    auth = Authenticity(mode, FIRST_8_BYTES, signer=ME, modelled=modelled)
    msg = auth.author(ME.peer_id, 9, T, b"01234567-data")
    rpc = Rpc(publish=(msg,))
    assert decode_rpc(encode_rpc(rpc), FIRST_8_BYTES) == rpc
    assert rpc_size(rpc) == len(encode_rpc(rpc))
    if mode == STRICT:
        assert len(msg.signature) == 64
        assert (msg.signature == MODELLED_SIGNATURE) == modelled


def test_modelled_signatures_have_the_real_size_and_verify_by_size():
    real = strict().author(ME.peer_id, 1, T, b"x")
    modelled = strict(modelled=True).author(ME.peer_id, 1, T, b"x")
    assert rpc_size(Rpc(publish=(real,))) == rpc_size(Rpc(publish=(modelled,)))
    r = receiver(strict(PEER, modelled=True), identity=PEER)
    r.add_peer(0, ME.peer_id, r.protocol_id)
    r.handle_rpc(0, ME.peer_id, Rpc(subscriptions=(SubOpts(True, T),)))
    out = r.handle_rpc(1, ME.peer_id, Rpc(publish=(modelled,)))
    assert out.deliveries == (modelled,)
    out = r.handle_rpc(1, ME.peer_id, Rpc(publish=(replace(modelled, signature=b"short", id=b"other"),)))
    assert [ev.reason for ev in out.trace if ev.type == TraceType.REJECT_MESSAGE] == ["invalid signature"]


def test_strict_network_delivers_everywhere():
    """Strict gossipsub engines in a line pass a signed message along, and
    nobody rejects anything."""
    ids = [identity_for_index(i) for i in range(5)]
    routers = {i.peer_id: make_router("gossipsub", i.peer_id, n, {"D": 2, "D_low": 1, "D_high": 3},
                                      auth=strict(i)) for n, i in enumerate(ids)}
    delivered: dict[bytes, list[bytes]] = {pid: [] for pid in routers}
    rejects = []
    inbox: list[tuple[bytes, bytes, Rpc]] = []

    def emit(src: bytes, out) -> None:
        delivered[src] += [m.data for m in out.deliveries]
        rejects.extend(ev for ev in out.trace if ev.type == TraceType.REJECT_MESSAGE)
        inbox.extend((dst, src, rpc) for dst, rpc in out.sends)

    def drain(now: int) -> None:
        while inbox:
            dst, src, rpc = inbox.pop(0)
            emit(dst, routers[dst].handle_rpc(now, src, rpc))

    for pid, r in routers.items():
        emit(pid, r.join(0, T))
    for a, b in zip(ids, ids[1:]):
        emit(a.peer_id, routers[a.peer_id].add_peer(0, b.peer_id, routers[a.peer_id].protocol_id))
        emit(b.peer_id, routers[b.peer_id].add_peer(0, a.peer_id, routers[b.peer_id].protocol_id))
    drain(0)
    for pid, r in routers.items():
        emit(pid, r.heartbeat(1))
    drain(1)
    emit(ids[0].peer_id, routers[ids[0].peer_id].publish(2, T, b"hello"))
    drain(2)
    assert rejects == []
    assert all(d == [b"hello"] for d in delivered.values())
