"""The RPC dataclasses and their protobuf encoding (node/wire/rpc.py): libp2p's
field numbers, round trips, rpc_size, unknown fields, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.wire.rpc import (
    FIRST_8_BYTES,
    Control,
    Graft,
    IDontWant,
    IHave,
    IWant,
    Message,
    Prune,
    Rpc,
    RpcDecoder,
    SubOpts,
    WireError,
    decode_rpc,
    encode_rpc,
    rpc_size,
    seqno_bytes,
)

# A minimal protobuf writer, independent of the generated code, so that the
# field numbers below are checked against libp2p's rpc.proto, not against ours.


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def ld(field: int, payload: bytes | str) -> bytes:
    """A length-delimited field (wire type 2)."""
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return varint(field << 3) + varint(value)


SEQ = seqno_bytes(7)
# libp2p pubsub rpc.proto: RPC{subscriptions=1, publish=2, control=3};
# SubOpts{subscribe=1, topicid=2}; Message{from=1, data=2, seqno=3, topic=4 (topicIDs in
# older versions, same number)}; ControlMessage{ihave=1, iwant=2, graft=3, prune=4};
# ControlIHave{topicID=1, messageIDs=2}; ControlIWant{messageIDs=1};
# ControlGraft{topicID=1}; ControlPrune{topicID=1}.
LIBP2P_BYTES = (
    ld(1, vi(1, 1) + ld(2, "blocks"))
    + ld(2, ld(1, b"n1") + ld(2, b"data") + ld(3, SEQ) + ld(4, "blocks"))
    + ld(3, ld(1, ld(1, "blocks") + ld(2, b"m1") + ld(2, b"m2"))
         + ld(2, ld(1, b"m3"))
         + ld(3, ld(1, "blocks"))
         + ld(4, ld(1, "tx")))
)
LIBP2P_RPC = Rpc(
    (SubOpts(True, "blocks"),),
    (Message(b"n1", b"data", SEQ, "blocks"),),
    Control((IHave("blocks", (b"m1", b"m2")),), (IWant((b"m3",)),), (Graft("blocks"),), (Prune("tx"),)),
)


def test_field_numbers_match_libp2p_rpc_proto_on_decode():
    assert decode_rpc(LIBP2P_BYTES) == LIBP2P_RPC


def test_field_numbers_match_libp2p_rpc_proto_on_encode():
    assert encode_rpc(LIBP2P_RPC) == LIBP2P_BYTES
    assert rpc_size(LIBP2P_RPC) == len(LIBP2P_BYTES)


def test_unknown_fields_are_skipped():
    unknown = (
        vi(99, 12345)  # varint
        + varint(98 << 3 | 1) + b"\x00" * 8  # fixed64
        + varint(97 << 3 | 5) + b"\x00" * 4  # fixed32
        + ld(96, b"whatever")  # length-delimited
    )
    msg = ld(1, b"n1") + ld(2, b"data") + ld(3, SEQ) + ld(4, "blocks") + ld(5, b"sig") + ld(6, b"key") + ld(42, b"?")
    data = unknown + ld(2, msg) + ld(3, ld(4, ld(1, "tx") + ld(2, ld(1, b"peer")) + vi(3, 60)) + vi(77, 1))
    rpc = decode_rpc(data)
    assert rpc.publish == (Message(b"n1", b"data", SEQ, "blocks", b"sig", b"key"),)
    assert rpc.control == Control(prune=(Prune("tx", (b"peer",), 60),))  # v1.1 peer exchange and backoff
    assert rpc.subscriptions == ()


def test_v11_prune_and_v12_idontwant_use_libp2p_field_numbers():
    """ControlPrune.peers = 2 (PeerInfo.peerID = 1), backoff = 3;
    ControlMessage.idontwant = 5 (messageIDs = 1), as go's rpc.proto."""
    data = ld(3, ld(4, ld(1, "tx") + ld(2, ld(1, b"p1")) + ld(2, ld(1, b"p2")) + vi(3, 60))
              + ld(5, ld(1, b"m1") + ld(1, b"m2")))
    rpc = Rpc(control=Control(prune=(Prune("tx", (b"p1", b"p2"), 60),), idontwant=(IDontWant((b"m1", b"m2")),)))
    assert decode_rpc(data) == rpc
    assert encode_rpc(rpc) == data
    assert rpc_size(rpc) == len(data)


def test_v10_prune_encodes_as_before():
    assert encode_rpc(Rpc(control=Control(prune=(Prune("tx"),)))) == ld(3, ld(4, ld(1, "tx")))


def test_empty_rpc_round_trips():
    assert encode_rpc(Rpc()) == b""
    assert decode_rpc(b"") == Rpc()
    assert rpc_size(Rpc()) == 0


def test_empty_control_is_kept():
    rpc = Rpc(control=Control())
    assert decode_rpc(encode_rpc(rpc)) == rpc
    assert rpc_size(rpc) == len(encode_rpc(rpc)) == 2


def test_message_id_is_from_plus_8_byte_big_endian_seqno():
    assert seqno_bytes(1) == b"\x00" * 7 + b"\x01"
    assert seqno_bytes(0x0102030405060708) == bytes(range(1, 9))
    assert Message(b"n17", b"x", seqno_bytes(258), "t").id == b"n17" + b"\x00" * 6 + b"\x01\x02"
    with pytest.raises(OverflowError):
        seqno_bytes(1 << 64)


def test_invalid_utf8_topic_raises_wire_error():
    with pytest.raises(WireError):
        decode_rpc(ld(1, vi(1, 1) + ld(2, b"\xff\xfe")))
    with pytest.raises(WireError):
        decode_rpc(ld(3, ld(3, ld(1, b"\xc3"))))


def test_malformed_bytes_raise_wire_error():
    for bad in (b"\x0a", b"\x0a\x05ab", b"\xff\xff\xff", b"\x12\x02\x0a\x05", b"\x07"):
        with pytest.raises(WireError):
            decode_rpc(bad)


def test_rpc_decoder_gives_one_object_for_copies_of_a_frame():
    """A message forwarded by several mesh peers arrives as the same bytes:
    the decoder decodes it once and hands back the same Rpc, equal to what
    decode_rpc gives (under the router's message-id function)."""
    msg = Message(b"origin", b"01234567-data", seqno_bytes(7), "t", b"s" * 64)
    frame = encode_rpc(Rpc(publish=(msg,)))
    decoder = RpcDecoder(FIRST_8_BYTES)
    first = decoder.decode(frame)
    assert first == decode_rpc(frame, FIRST_8_BYTES)
    assert first.publish[0].id == b"01234567"
    assert decoder.decode(bytes(frame)) is first
    other = encode_rpc(Rpc(publish=(Message(b"origin", b"x", seqno_bytes(8), "t"),)))
    assert decoder.decode(other) is not first


def test_rpc_decoder_is_bounded_and_forgets_bad_frames():
    frames = [encode_rpc(Rpc(subscriptions=(SubOpts(True, f"t{i}"),))) for i in range(9)]
    decoder = RpcDecoder(max_bytes=8 * len(frames[0]))  # room for eight
    kept = [decoder.decode(f) for f in frames]
    assert all(decoder.decode(f) is k for f, k in zip(frames[1:], kept[1:]))
    assert decoder.decode(frames[0]) is not kept[0]  # the oldest went when the ninth came
    assert decoder.decode(frames[0]) == kept[0]
    big = encode_rpc(Rpc(publish=(Message(b"o", bytes(100), seqno_bytes(1), "t"),)))
    decoder = RpcDecoder(max_bytes=8 * len(big) - 1)  # a frame above an eighth is never kept
    assert decoder.decode(big) is not decoder.decode(big)
    for _ in range(2):
        with pytest.raises(WireError):
            decoder.decode(b"\x0a")


# ---------------------------------------------------------------- random RPCs

ids = st.binary(max_size=40)
topics = st.text(max_size=20)
messages = st.builds(Message, st.binary(max_size=40), st.binary(max_size=300), st.binary(max_size=8), topics)
controls = st.builds(
    Control,
    st.lists(st.builds(IHave, topics, st.lists(ids, max_size=5).map(tuple)), max_size=3).map(tuple),
    st.lists(st.builds(IWant, st.lists(ids, max_size=5).map(tuple)), max_size=3).map(tuple),
    st.lists(st.builds(Graft, topics), max_size=3).map(tuple),
    st.lists(st.builds(Prune, topics), max_size=3).map(tuple),
)
rpcs = st.builds(
    Rpc,
    st.lists(st.builds(SubOpts, st.booleans(), topics), max_size=4).map(tuple),
    st.lists(messages, max_size=4).map(tuple),
    st.none() | controls,
)


@settings(max_examples=200, deadline=None)
@given(rpcs)
def test_rpc_size_equals_encoded_length(rpc):
    assert rpc_size(rpc) == len(encode_rpc(rpc))


@settings(max_examples=200, deadline=None)
@given(rpcs)
def test_decode_encode_round_trip(rpc):
    assert decode_rpc(encode_rpc(rpc)) == rpc


def test_rpc_size_with_large_fields():
    big = Rpc(publish=(Message(b"a" * 200, b"x" * 70_000, seqno_bytes(1), "t" * 300),))
    assert rpc_size(big) == len(encode_rpc(big))


def _well_typed(rpc: Rpc) -> None:
    assert all(isinstance(s.topic, str) for s in rpc.subscriptions)
    assert all(isinstance(m.topic, str) and isinstance(m.data, bytes) for m in rpc.publish)
    if rpc.control is not None:
        assert all(isinstance(x.topic, str) for x in rpc.control.ihave + rpc.control.graft + rpc.control.prune)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decode_random_bytes_raises_only_wire_error(data):
    try:
        rpc = decode_rpc(data)
    except WireError:
        return
    _well_typed(rpc)


@settings(max_examples=200, deadline=None)
@given(rpcs, st.data())
def test_decode_truncated_rpc_raises_only_wire_error(rpc, data):
    encoded = encode_rpc(rpc)
    cut = data.draw(st.integers(0, max(0, len(encoded) - 1)))
    try:
        _well_typed(decode_rpc(encoded[:cut]))
    except WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(rpcs, st.data())
def test_decode_corrupted_rpc_raises_only_wire_error(rpc, data):
    encoded = bytearray(encode_rpc(rpc))
    if not encoded:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    try:
        _well_typed(decode_rpc(bytes(encoded)))
    except WireError:
        pass
