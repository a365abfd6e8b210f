"""Episub's messages (the episub draft, "Protocol Messages") as small frozen
dataclasses, the RPC that carries them, and their protobuf encoding
(node/proto/episub.proto) on our own protocol id, /episub/1.0.0, carried
exactly as pubsub RPCs are on /meshsub/1.0.0 (uvarint-delimited frames,
1 MiB limit). As node/wire/rpc.py for pubsub: engines speak the dataclasses,
the runtime encodes them.

The draft assumes "a suitable envelope"; ours is `EpisubRpc`, a list of
messages. Each topic-scoped message names its topic (the draft's overlay is
per topic; its PRUNE, GRAFT and DISCONNECT leave the topic to the envelope).
Fields the draft does not list are ours and documented in docs/episub.md:
NODES also carries the sender's active view and its random links (the
stabilization query), NEIGHBOR says whether it is a request and whether the
link is a random one.

`EpisubRpc` also shows the parts go-libp2p-pubsub has a name for (`publish`:
the GOSSIP payloads; `control`: IHAVE, GRAFT and PRUNE by topic) so traces
record them in go's RPCMeta, and so does everything that counts RPCs; its
`wire_size` is its encoded length.

The dataclasses and the protobuf messages share their names and field names,
so one generic mapping encodes and decodes every message; the two nested
types (a GOSSIP's libp2p Message, an IHAVE's summaries) are converted by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Union

from google.protobuf.message import DecodeError

from node.wire import rpc as wire
from node.proto import episub_pb2, rpc_pb2
from node.wire.frozen import frozen
from node.wire.rpc import FROM_SEQNO, Message, MessageId, PeerId, WireError, message_id

EPISUB_ID = "/episub/1.0.0"


@frozen
class GetNodes:
    topic: str


@frozen
class Nodes:
    """`peers`: the sender's passive view; `ttl`: the JOIN TTL it uses;
    `active` and `random`: its active view and which of it are random links."""

    topic: str
    peers: tuple[PeerId, ...]
    ttl: int
    active: tuple[PeerId, ...] = ()
    random: tuple[PeerId, ...] = ()


@frozen
class GetTopics:
    pass


@frozen
class Topics:
    topics: tuple[str, ...]


@frozen
class Join:
    topic: str
    peer: PeerId
    ttl: int


@frozen
class ForwardJoin:
    topic: str
    peer: PeerId
    ttl: int


@frozen
class Neighbor:
    """`peers`: the sender's active view (its length is how many active links
    the sender has); `request`: asks to be accepted (else it accepts, or
    refreshes the sender's list); `random`: the link is a random link."""

    topic: str
    peers: tuple[PeerId, ...]
    request: bool
    random: bool


@frozen
class Disconnect:
    topic: str


@frozen
class Leave:
    topic: str
    source: PeerId
    ttl: int


@frozen
class Shuffle:
    topic: str
    peer: PeerId
    peers: tuple[PeerId, ...]
    ttl: int


@frozen
class ShuffleReply:
    topic: str
    peers: tuple[PeerId, ...]


@frozen
class Gossip:
    """The message's origin (the draft's `source`) is `msg.from_peer`."""

    hops: int
    msg: Message


@frozen
class MessageSummary:
    id: MessageId
    hops: int


@frozen
class IHave:
    topic: str
    summary: tuple[MessageSummary, ...]


@frozen
class Prune:
    topic: str


@frozen
class Graft:
    topic: str
    msgs: tuple[MessageId, ...]


EpisubMessage = Union[
    GetNodes, Nodes, GetTopics, Topics, Join, ForwardJoin, Neighbor, Disconnect, Leave, Shuffle,
    ShuffleReply, Gossip, IHave, Prune, Graft,
]


@dataclass(frozen=True)
class EpisubRpc:
    messages: tuple[EpisubMessage, ...]

    subscriptions: ClassVar[tuple[wire.SubOpts, ...]] = ()  # episub has no subscription announcements

    @cached_property
    def publish(self) -> tuple[Message, ...]:
        return tuple(m.msg for m in self.messages if isinstance(m, Gossip))

    @cached_property
    def control(self) -> wire.Control | None:
        ihave = tuple(
            wire.IHave(m.topic, tuple(s.id for s in m.summary)) for m in self.messages if isinstance(m, IHave)
        )
        graft = tuple(wire.Graft(m.topic) for m in self.messages if isinstance(m, Graft))
        prune = tuple(wire.Prune(m.topic) for m in self.messages if isinstance(m, Prune))
        if not (ihave or graft or prune):
            return None
        return wire.Control(ihave, (), graft, prune)

    @cached_property
    def wire_size(self) -> int:
        return len(encode_episub_rpc(self))


_KINDS: dict[str, type] = {
    cls.__name__.lower(): cls
    for cls in (GetNodes, Nodes, GetTopics, Topics, Join, ForwardJoin, Neighbor, Disconnect,
                Leave, Shuffle, ShuffleReply, Gossip, IHave, Prune, Graft)
}
_MESSAGE_FIELDS = ("from_peer", "data", "seqno", "topic", "signature", "key")
_PB_MESSAGE_FIELDS = ("from", "data", "seqno", "topic", "signature", "key")


def encode_episub_rpc(rpc: EpisubRpc) -> bytes:
    pb = episub_pb2.EpisubRPC()
    for message in rpc.messages:
        body = getattr(pb.messages.add(), type(message).__name__.lower())
        body.SetInParent()
        for f in dataclasses.fields(message):
            value = getattr(message, f.name)
            if isinstance(value, Message):
                _fill_message(getattr(body, f.name), value)
            elif f.name == "summary":
                for s in value:
                    body.summary.add(id=s.id, hops=s.hops)
            elif isinstance(value, tuple):
                getattr(body, f.name).extend(value)
            else:
                setattr(body, f.name, value)
    return pb.SerializeToString()


def _fill_message(pb: rpc_pb2.Message, msg: Message) -> None:
    for ours, theirs in zip(_MESSAGE_FIELDS, _PB_MESSAGE_FIELDS):
        value = getattr(msg, ours)
        if value or ours in ("data", "topic"):
            setattr(pb, theirs, value)


def decode_episub_rpc(data: bytes, message_id_function: str = FROM_SEQNO) -> EpisubRpc:
    """Decode one frame, giving each GOSSIP's message its id under
    `message_id_function`; malformed bytes raise WireError."""
    pb = episub_pb2.EpisubRPC()
    try:
        pb.ParseFromString(data)
    except DecodeError as exc:
        raise WireError(f"undecodable episub RPC ({len(data)} bytes): {exc}") from None
    out = []
    for env in pb.messages:
        name = env.WhichOneof("body")
        if name is None:
            raise WireError("episub RPC with an empty envelope")
        out.append(_decode(_KINDS[name], getattr(env, name), message_id_function))
    return EpisubRpc(tuple(out))


def _decode(cls: type, body: object, message_id_function: str) -> object:
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(body, f.name)
        if f.name == "msg":
            values[f.name] = _message(value, message_id_function)
        elif f.name == "summary":
            values[f.name] = tuple(MessageSummary(s.id, s.hops) for s in value)
        elif isinstance(value, (str, bytes, bool, int)):
            values[f.name] = _checked(value, f.type)
        else:
            values[f.name] = tuple(_checked(v, f.type) for v in value)
    return cls(**values)


def _checked(value: object, annotation: object) -> object:
    """protobuf hands back raw bytes for a string field with invalid UTF-8."""
    if isinstance(value, bytes) and "str" in str(annotation):
        raise WireError(f"string field is not valid UTF-8: {value[:32]!r}")
    return value


def _message(pb: rpc_pb2.Message, message_id_function: str) -> Message:
    sender = getattr(pb, "from")
    return Message(
        sender, pb.data, pb.seqno, _checked(pb.topic, "str"), pb.signature, pb.key,  # type: ignore[arg-type]
        message_id(message_id_function, sender, pb.seqno, pb.data),
    )
