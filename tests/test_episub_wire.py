"""The episub wire: every message of the draft round-trips through
node/proto/episub.proto, field numbers are the documented ones, and bad
bytes are a WireError."""

from __future__ import annotations

import pytest

from node.wire import episub as m
from node.wire.episub import decode_episub_rpc, encode_episub_rpc
from node.proto import episub_pb2
from node.trace.vocab import TraceType
from node.trace.file import TraceWriter, read_trace, rpc_event
from node.wire.rpc import FIRST_8_BYTES, Message, WireError, rpc_size

MSG = Message(b"origin", b"\x00\x00\x00\x00\x00\x00\x00\x07payload", (7).to_bytes(8, "big"), "t")
EVERY_MESSAGE = (
    m.GetNodes("t"),
    m.Nodes("t", (b"p1", b"p2"), 6, (b"a1",), (b"a1",)),
    m.GetTopics(),
    m.Topics(("t", "u")),
    m.Join("t", b"new", 6),
    m.ForwardJoin("t", b"new", 3),
    m.Neighbor("t", (b"a1", b"a2"), True, False),
    m.Disconnect("t"),
    m.Leave("t", b"gone", 2),
    m.Shuffle("t", b"me", (b"me", b"x"), 5),
    m.ShuffleReply("t", (b"y",)),
    m.Gossip(3, MSG),
    m.IHave("t", (m.MessageSummary(b"id1", 2), m.MessageSummary(b"id2", 4))),
    m.Prune("t"),
    m.Graft("t", (b"id1",)),
)


def test_every_draft_message_round_trips():
    rpc = m.EpisubRpc(EVERY_MESSAGE)
    assert decode_episub_rpc(encode_episub_rpc(rpc)) == rpc


def test_gossip_messages_get_their_id_from_the_networks_function():
    (gossip,) = decode_episub_rpc(encode_episub_rpc(m.EpisubRpc((m.Gossip(1, MSG),))), FIRST_8_BYTES).messages
    assert gossip.msg.id == MSG.data[:8]


@pytest.mark.parametrize("name, number", [
    ("getnodes", 1), ("nodes", 2), ("gettopics", 3), ("topics", 4), ("join", 5), ("forwardjoin", 6),
    ("neighbor", 7), ("disconnect", 8), ("leave", 9), ("shuffle", 10), ("shufflereply", 11), ("gossip", 12),
    ("ihave", 13), ("prune", 14), ("graft", 15),
])
def test_envelope_field_numbers_are_the_documented_ones(name, number):
    assert episub_pb2.Envelope.DESCRIPTOR.fields_by_name[name].number == number


def test_the_go_view_of_an_episub_rpc_names_gossip_ihave_graft_and_prune():
    rpc = m.EpisubRpc(EVERY_MESSAGE)
    assert rpc.publish == (MSG,)
    assert [i.message_ids for i in rpc.control.ihave] == [(b"id1", b"id2")]
    assert [g.topic for g in rpc.control.graft] == ["t"] and [p.topic for p in rpc.control.prune] == ["t"]
    assert m.EpisubRpc((m.Join("t", b"x", 1),)).control is None


@pytest.mark.parametrize("data", [b"\x0a\x05\x01", b"\x0a\x00", b"\xff\xff"])
def test_bad_bytes_are_a_wire_error(data):
    with pytest.raises(WireError):
        decode_episub_rpc(data)


def test_a_topic_that_is_not_utf8_is_a_wire_error():
    good = encode_episub_rpc(m.EpisubRpc((m.Disconnect("t"),)))
    assert decode_episub_rpc(good).messages == (m.Disconnect("t"),)
    with pytest.raises(WireError, match="UTF-8"):
        decode_episub_rpc(good.replace(b"\x0a\x01t", b"\x0a\x01\xff"))


def test_rpc_size_of_an_episub_rpc_is_its_encoded_length():
    rpc = m.EpisubRpc(EVERY_MESSAGE)
    assert rpc_size(rpc) == len(encode_episub_rpc(rpc))  # type: ignore[arg-type]


def test_episub_rpcs_are_traced_in_gos_format_with_their_gossip_ihave_graft_and_prune(tmp_path):
    rpc = m.EpisubRpc(EVERY_MESSAGE)
    writer = TraceWriter(tmp_path / "n.pb", b"me")
    writer.write([rpc_event(TraceType.SEND_RPC, 5, b"peer", rpc)])  # type: ignore[arg-type]
    writer.close()
    (ev,) = read_trace(tmp_path / "n.pb")
    meta = ev.sendRPC.meta
    assert [x.messageID for x in meta.messages] == [MSG.id]
    assert [list(i.messageIDs) for i in meta.control.ihave] == [[b"id1", b"id2"]]
    assert [g.topic for g in meta.control.graft] == ["t"] and [p.topic for p in meta.control.prune] == ["t"]
    assert ev.sendRPC.size == len(encode_episub_rpc(rpc))
