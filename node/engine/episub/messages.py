"""The draft's protocol messages ("Protocol Messages") as small frozen
dataclasses, the RPC that carries them, and the builder that collects what
one input sends to each peer into one RPC.

The draft assumes "a suitable envelope"; ours is `EpisubRpc`, a list of
messages. Each topic-scoped message names its topic (the draft's overlay is
per topic; its PRUNE, GRAFT and DISCONNECT leave the topic to the envelope).
Fields the draft does not list are ours and documented in docs/episub.md:
NODES also carries the sender's active view and its random links (the
stabilization query), NEIGHBOR says whether it is a request and whether the
link is a random one.

`EpisubRpc` also shows the parts go-libp2p-pubsub has a name for (`publish`:
the GOSSIP payloads; `control`: IHAVE, GRAFT and PRUNE by topic) so traces
record them in go's RPCMeta, and so does everything that counts RPCs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Union

from node import wire
from node.engine.api import Output, TraceEvent, TraceType
from node.wire import Message, MessageId, PeerId

EPISUB_ID = "/episub/1.0.0"


@dataclass(frozen=True, slots=True)
class GetNodes:
    topic: str


@dataclass(frozen=True, slots=True)
class Nodes:
    """`peers`: the sender's passive view; `ttl`: the JOIN TTL it uses;
    `active` and `random`: its active view and which of it are random links."""

    topic: str
    peers: tuple[PeerId, ...]
    ttl: int
    active: tuple[PeerId, ...] = ()
    random: tuple[PeerId, ...] = ()


@dataclass(frozen=True, slots=True)
class GetTopics:
    pass


@dataclass(frozen=True, slots=True)
class Topics:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Join:
    topic: str
    peer: PeerId
    ttl: int


@dataclass(frozen=True, slots=True)
class ForwardJoin:
    topic: str
    peer: PeerId
    ttl: int


@dataclass(frozen=True, slots=True)
class Neighbor:
    """`peers`: the sender's active view (its length is how many active links
    the sender has); `request`: asks to be accepted (else it accepts, or
    refreshes the sender's list); `random`: the link is a random link."""

    topic: str
    peers: tuple[PeerId, ...]
    request: bool
    random: bool


@dataclass(frozen=True, slots=True)
class Disconnect:
    topic: str


@dataclass(frozen=True, slots=True)
class Leave:
    topic: str
    source: PeerId
    ttl: int


@dataclass(frozen=True, slots=True)
class Shuffle:
    topic: str
    peer: PeerId
    peers: tuple[PeerId, ...]
    ttl: int


@dataclass(frozen=True, slots=True)
class ShuffleReply:
    topic: str
    peers: tuple[PeerId, ...]


@dataclass(frozen=True, slots=True)
class Gossip:
    """The message's origin (the draft's `source`) is `msg.from_peer`."""

    hops: int
    msg: Message


@dataclass(frozen=True, slots=True)
class MessageSummary:
    id: MessageId
    hops: int


@dataclass(frozen=True, slots=True)
class IHave:
    topic: str
    summary: tuple[MessageSummary, ...]


@dataclass(frozen=True, slots=True)
class Prune:
    topic: str


@dataclass(frozen=True, slots=True)
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

    subscriptions: tuple[wire.SubOpts, ...] = ()

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


class EpisubOut:
    """What one input produces: messages per peer (one RPC each, in the order
    peers were first addressed), deliveries and trace events. Its own
    builder, not api.OutputBuilder: that one's RPC parts are gossipsub's."""

    def __init__(self, now: int) -> None:
        self.now = now
        self._messages: dict[PeerId, list[EpisubMessage]] = {}
        self.deliveries: list[Message] = []
        self.trace: list[TraceEvent] = []

    def send(self, peer: PeerId, message: EpisubMessage) -> None:
        self._messages.setdefault(peer, []).append(message)

    def deliver(self, msg: Message, received_from: PeerId) -> None:
        self.deliveries.append(msg)
        self.event(TraceType.DELIVER_MESSAGE, message_id=msg.id, topic=msg.topic, peer=received_from)

    def event(self, type_: TraceType, **fields: object) -> None:
        self.trace.append(TraceEvent(type_, self.now, **fields))  # type: ignore[arg-type]

    def build(self) -> Output:
        return Output(
            tuple((peer, EpisubRpc(tuple(msgs))) for peer, msgs in self._messages.items()),  # type: ignore[misc]
            tuple(self.deliveries),
            tuple(self.trace),
        )
