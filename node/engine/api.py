"""What goes into and comes out of every engine: the Router interface, trace
events and the Output value, plus the builder that merges everything one input
produces for a peer into a single RPC (the spec's control piggybacking)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from node.trace.tree import TreeEvent
from node.trace.vocab import TraceType
from node.wire.frozen import frozen
from node.wire.rpc import (
    Control,
    Graft,
    IDontWant,
    IHave,
    IWant,
    Message,
    MessageId,
    PeerId,
    Prune,
    Rpc,
    SubOpts,
)

NS = 1_000_000_000

FLOODSUB_ID = "/floodsub/1.0.0"
MESHSUB_ID = "/meshsub/1.0.0"
MESHSUB_V11_ID = "/meshsub/1.1.0"
MESHSUB_V12_ID = "/meshsub/1.2.0"
RANDOMSUB_ID = "/randomsub/1.0.0"

# The order a router proposes its protocols in: the newest gossipsub first,
# falling back to older ones and to floodsub (gossipsub v1.1 and v1.2 specs,
# "Protocol Id"); protocols not listed come after, in name order.
PROTOCOL_PREFERENCE = (MESHSUB_V12_ID, MESHSUB_V11_ID, MESHSUB_ID)


def protocol_order(preferred: str, supported: frozenset[str]) -> tuple[str, ...]:
    """`preferred` first, then the other supported protocols, newest
    gossipsub first."""
    rest = supported - {preferred}
    known = [p for p in PROTOCOL_PREFERENCE if p in rest]
    return (preferred, *known, *sorted(rest - set(known)))


@frozen
class TraceEvent:
    """One trace event; `peer` is receivedFrom, sendTo, or the peer added,
    removed, grafted or pruned, depending on the type."""

    type: TraceType
    timestamp: int
    message_id: MessageId = b""
    topic: str = ""
    peer: PeerId = b""
    reason: str = ""
    protocol: str = ""
    rpc: Rpc | None = None


@frozen
class Output:
    """`dials`: peers the router asks its runtime to connect to (gossipsub
    v1.1 peer exchange and explicit peers); a runtime that cannot dial by
    peer id alone ignores them. `scores`: at a heartbeat of a router that
    scores its peers, each peer's score and components (node/trace/scores.py's
    columns after time and peer). `wakeups`: times (ns) at which the
    runtime must call the router's `wake`, for work it finishes later (a
    message whose topic validation takes time). `tree`: episub's trace
    extension, the tree and view events go's format has no place for
    (node/trace/tree.py), written beside the trace by the runtime."""

    sends: tuple[tuple[PeerId, Rpc], ...] = ()
    deliveries: tuple[Message, ...] = ()
    trace: tuple[TraceEvent, ...] = ()
    dials: tuple[PeerId, ...] = ()
    scores: tuple[tuple[PeerId, tuple[float, ...]], ...] = ()
    wakeups: tuple[int, ...] = ()
    tree: tuple[TreeEvent, ...] = ()


class Router(Protocol):
    """The inputs every engine takes. `now` is in nanoseconds. `add_peer`'s
    `address`: the IP the peer's connection comes from ("" unknown), which
    gossipsub v1.1's score counts for P6 (IP colocation); engines that do
    not score ignore it."""

    peer_id: PeerId
    protocol_id: str
    heartbeat_interval: int
    first_heartbeat: int

    def add_peer(self, now: int, peer: PeerId, protocol: str, outbound: bool = False, address: str = "") -> Output: ...
    def remove_peer(self, now: int, peer: PeerId) -> Output: ...
    def handle_rpc(self, now: int, peer: PeerId, rpc: Rpc) -> Output: ...
    def join(self, now: int, topic: str) -> Output: ...
    def leave(self, now: int, topic: str) -> Output: ...
    def publish(self, now: int, topic: str, data: bytes) -> Output: ...
    def publish_message(self, now: int, msg: Message) -> Output: ...
    def heartbeat(self, now: int) -> Output: ...
    def wake(self, now: int) -> Output: ...


@dataclass
class _Pending:
    subscriptions: list[SubOpts] = field(default_factory=list)
    publish: list[Message] = field(default_factory=list)
    ihave: list[IHave] = field(default_factory=list)
    iwant: list[IWant] = field(default_factory=list)
    graft: list[Graft] = field(default_factory=list)
    prune: list[Prune] = field(default_factory=list)
    idontwant: list[IDontWant] = field(default_factory=list)

    def rpc(self) -> Rpc:
        control = None
        if self.ihave or self.iwant or self.graft or self.prune or self.idontwant:
            control = Control(
                tuple(self.ihave), tuple(self.iwant), tuple(self.graft), tuple(self.prune),
                tuple(self.idontwant),
            )
        return Rpc(tuple(self.subscriptions), tuple(self.publish), control)


class OutputBuilder:
    """Collects what one input produces; `build()` emits one RPC per peer, in the
    order peers were first addressed, so runs are reproducible. IDONTWANT is
    the exception: gossipsub v1.2 sends it at once, not piggybacked, so it
    goes out in an RPC of its own ahead of everything else."""

    def __init__(self, now: int) -> None:
        self.now = now
        self._pending: dict[PeerId, _Pending] = {}
        self._urgent: dict[PeerId, _Pending] = {}
        self.deliveries: list[Message] = []
        self.trace: list[TraceEvent] = []
        self.dials: list[PeerId] = []
        self.scores: list[tuple[PeerId, tuple[float, ...]]] = []
        self.wakeups: list[int] = []

    def _to(self, peer: PeerId) -> _Pending:
        pending = self._pending.get(peer)
        if pending is None:
            pending = self._pending[peer] = _Pending()
        return pending

    def subscription(self, peer: PeerId, subscribe: bool, topic: str) -> None:
        self._to(peer).subscriptions.append(SubOpts(subscribe, topic))

    def forward(self, peer: PeerId, msg: Message) -> None:
        self._to(peer).publish.append(msg)

    def ihave(self, peer: PeerId, topic: str, ids: tuple[MessageId, ...]) -> None:
        self._to(peer).ihave.append(IHave(topic, ids))

    def iwant(self, peer: PeerId, ids: tuple[MessageId, ...]) -> None:
        self._to(peer).iwant.append(IWant(ids))

    def graft(self, peer: PeerId, topic: str) -> None:
        self._to(peer).graft.append(Graft(topic))

    def prune(self, peer: PeerId, topic: str, peers: tuple[PeerId, ...] = (), backoff: int | None = None) -> None:
        self._to(peer).prune.append(Prune(topic, peers, backoff))

    def idontwant(self, peer: PeerId, ids: tuple[MessageId, ...]) -> None:
        pending = self._urgent.get(peer)
        if pending is None:
            pending = self._urgent[peer] = _Pending()
        pending.idontwant.append(IDontWant(ids))

    def dial(self, peer: PeerId) -> None:
        if peer not in self.dials:
            self.dials.append(peer)

    def wake_at(self, at: int) -> None:
        """Ask the runtime to call `wake` at `at` (ns)."""
        self.wakeups.append(at)

    def deliver(self, msg: Message, received_from: PeerId) -> None:
        self.deliveries.append(msg)
        self.event(TraceType.DELIVER_MESSAGE, message_id=msg.id, topic=msg.topic, peer=received_from)

    def event(self, type_: TraceType, **fields: object) -> None:
        self.trace.append(TraceEvent(type_, self.now, **fields))  # type: ignore[arg-type]

    def build(self) -> Output:
        sends = [(peer, pending.rpc()) for peer, pending in self._urgent.items()]
        sends += [(peer, pending.rpc()) for peer, pending in self._pending.items()]
        return Output(
            tuple(sends), tuple(self.deliveries), tuple(self.trace), tuple(self.dials), tuple(self.scores),
            tuple(self.wakeups),
        )
