"""uvarint-length-prefixed frames (node/wire/codec.py): round trips in any
chunking, the 1 MiB limit, and one error type for anything malformed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.wire.codec import (
    DEFAULT_MAX_FRAME,
    FrameDecoder,
    FrameError,
    decode_frames,
    encode_frame,
    encode_uvarint,
)


def test_uvarint_known_values():
    assert encode_uvarint(0) == b"\x00"
    assert encode_uvarint(1) == b"\x01"
    assert encode_uvarint(127) == b"\x7f"
    assert encode_uvarint(128) == b"\x80\x01"
    assert encode_uvarint(300) == b"\xac\x02"
    assert encode_uvarint(1 << 20) == b"\x80\x80\x40"
    with pytest.raises(ValueError):
        encode_uvarint(-1)


def test_frame_is_uvarint_length_then_payload():
    assert encode_frame(b"abc") == b"\x03abc"
    assert encode_frame(b"") == b"\x00"
    assert decode_frames(b"\x03abc\x00\x01z") == [b"abc", b"", b"z"]


def test_default_max_frame_is_1_MiB():
    assert DEFAULT_MAX_FRAME == 1 << 20


def test_oversized_frame_rejected_on_encode():
    encode_frame(b"x" * DEFAULT_MAX_FRAME)
    with pytest.raises(FrameError):
        encode_frame(b"x" * (DEFAULT_MAX_FRAME + 1))


def test_oversized_frame_rejected_on_decode_as_soon_as_the_prefix_arrives():
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="exceeds"):
        list(decoder.feed(encode_uvarint(DEFAULT_MAX_FRAME + 1)))


def test_frame_of_exactly_1_MiB_accepted():
    payload = b"y" * DEFAULT_MAX_FRAME
    assert decode_frames(encode_frame(payload)) == [payload]


def test_custom_max_frame():
    with pytest.raises(FrameError):
        decode_frames(encode_frame(b"12345"), max_frame=4)


def test_length_prefix_longer_than_10_bytes_rejected():
    with pytest.raises(FrameError, match="10 bytes"):
        list(FrameDecoder().feed(b"\x80" * 10 + b"\x01"))


def test_truncated_stream_raises_frame_error_at_close():
    decoder = FrameDecoder()
    assert list(decoder.feed(encode_frame(b"hello")[:-1])) == []
    assert decoder.pending() == 5
    with pytest.raises(FrameError, match="ended inside a frame"):
        decoder.close()
    with pytest.raises(FrameError):
        decode_frames(b"\x05abc")


def test_feed_keeps_bytes_even_if_the_iterator_is_not_consumed():
    decoder = FrameDecoder()
    decoder.feed(b"\x03a")
    assert decoder.pending() == 2
    assert list(decoder.feed(b"bc")) == [b"abc"]
    assert decoder.pending() == 0
    decoder.close()


def test_partial_frame_carried_across_feeds():
    decoder = FrameDecoder()
    assert list(decoder.feed(b"\x02a")) == []
    assert list(decoder.feed(b"b\x01")) == [b"ab"]
    assert list(decoder.feed(b"c")) == [b"c"]


payload_lists = st.lists(st.binary(max_size=300), max_size=10)


@settings(max_examples=100, deadline=None)
@given(payload_lists, st.data())
def test_frames_round_trip_in_any_chunking(payloads, data):
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    got = []
    prev = 0
    for cut in cuts + [len(stream)]:
        got.extend(decoder.feed(stream[prev:cut]))
        prev = cut
    decoder.close()
    assert got == payloads


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(1, 64))
def test_random_bytes_raise_only_frame_error(data, max_frame):
    decoder = FrameDecoder(max_frame)
    try:
        for frame in decoder.feed(data):
            assert len(frame) <= max_frame
        decoder.close()
    except FrameError:
        pass


@settings(max_examples=100, deadline=None)
@given(payload_lists, st.data())
def test_truncated_stream_yields_whole_frames_then_frame_error(payloads, data):
    stream = b"".join(encode_frame(p) for p in payloads)
    cut = data.draw(st.integers(0, len(stream)))
    decoder = FrameDecoder()
    got = list(decoder.feed(stream[:cut]))
    assert got == payloads[: len(got)]
    if decoder.pending():
        with pytest.raises(FrameError):
            decoder.close()
