"""The router-agnostic part of libp2p pubsub that every engine shares: known
peers and their protocols, which topics each peer subscribes to, our own
subscriptions and their announcements (hello on connect, SUBSCRIBE/UNSUBSCRIBE
on join/leave), the seen cache, and the message-processing pipeline up to the
point where a router decides whom to forward to.

Subclasses implement `_forward` (where a message goes) and may override the
hooks for peers, joins, leaves, control messages and the heartbeat.

A topic may take time to validate (`validation_delay`, ns per topic; test-plans'
setTopicValidationDelay, which models a blob's verification cost). As in
go-libp2p-pubsub, a message is marked seen when its validation starts, so
copies that arrive meanwhile are duplicates, and it is delivered and forwarded
only when validation ends: the router asks to be woken then (Output.wakeups)
and goes on handling everything else in between.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

from node.engine.api import NS, Output, OutputBuilder, TraceType
from node.engine.authenticity import REJECT_SELF_ORIGIN, REJECT_VALIDATION_FAILED, Authenticity
from node.engine.caches import SeenCache
from node.wire.rpc import Control, Message, PeerId, Rpc

Validator = Callable[[Message], bool]


class RouterParams(Protocol):
    """What every router's parameter class has."""

    @property
    def seen_ttl(self) -> float: ...

    def check(self) -> None: ...


P = TypeVar("P", bound=RouterParams)


def sample_sorted(rng: random.Random, peers: Iterable[PeerId], k: int) -> list[PeerId]:
    """Up to k peers chosen at random. Sorting first keeps the choice a pure
    function of the seed: set order of bytes depends on PYTHONHASHSEED."""
    pool = sorted(peers)
    if k >= len(pool):
        rng.shuffle(pool)
        return pool
    return rng.sample(pool, k)


class PubSubRouter(Generic[P]):
    protocol_id: str = ""
    supported_protocols: frozenset[str] = frozenset()

    def __init__(
        self, peer_id: PeerId, rng: random.Random, params: P, validator: Validator | None = None,
        auth: Authenticity = Authenticity(), validation_delay: Mapping[str, int] | None = None,
    ) -> None:
        """`params` are checked here; routers without a heartbeat interval of
        their own tick once a second (their heartbeat does nothing). `auth`
        is the network's message authenticity (unsigned from + seqno unless
        told otherwise). `validation_delay`: how long (ns) validating a
        message of a topic takes; topics not in it validate at once."""
        params.check()
        self.params = params
        self.peer_id = peer_id
        self.rng = rng
        self.auth = auth
        self.heartbeat_interval = round(getattr(params, "heartbeat_interval", 1.0) * NS)
        self.first_heartbeat = round(getattr(params, "heartbeat_initial_delay", 1.0) * NS)
        self.validator = validator
        self.peers: dict[PeerId, str] = {}
        self.topics: dict[str, set[PeerId]] = {}
        self.subscriptions: set[str] = set()
        self.seen = SeenCache(round(params.seen_ttl * NS))
        self._seqno = 0
        self.validation_delay = {t: d for t, d in (validation_delay or {}).items() if d > 0}
        self._validating: list[tuple[int, int, PeerId, Message]] = []  # heap: (due, order, sender, message)
        self._validations = 0

    def topic_peers(self, topic: str, protocols: frozenset[str] | None = None) -> set[PeerId]:
        peers = self.topics.get(topic, set())
        if protocols is None:
            return set(peers)
        return {p for p in peers if self.peers.get(p) in protocols}

    def add_peer(self, now: int, peer: PeerId, protocol: str, outbound: bool = False, address: str = "") -> Output:
        """`outbound`: we dialled the connection (gossipsub v1.1's D_out
        counts those); `address`: the peer's IP (v1.1's P6)."""
        out = OutputBuilder(now)
        if peer in self.peers or peer == self.peer_id:
            return out.build()
        self.peers[peer] = protocol
        out.event(TraceType.ADD_PEER, peer=peer, protocol=protocol)
        for topic in sorted(self.subscriptions):
            out.subscription(peer, True, topic)
        self._peer_added(out, peer, outbound, address)
        return out.build()

    def remove_peer(self, now: int, peer: PeerId) -> Output:
        out = OutputBuilder(now)
        if self.peers.pop(peer, None) is None:
            return out.build()
        for peers in self.topics.values():
            peers.discard(peer)
        self._peer_removed(out, peer)
        out.event(TraceType.REMOVE_PEER, peer=peer)
        return out.build()

    def handle_rpc(self, now: int, peer: PeerId, rpc: Rpc) -> Output:
        out = OutputBuilder(now)
        if peer not in self.peers:
            return out.build()
        out.event(TraceType.RECV_RPC, peer=peer, rpc=rpc)
        for sub in rpc.subscriptions:
            if sub.subscribe:
                self.topics.setdefault(sub.topic, set()).add(peer)
            else:
                self.topics.get(sub.topic, set()).discard(peer)
                self._peer_unsubscribed(out, peer, sub.topic)
        if not self._accept_from(out, peer):
            return out.build()
        for msg in rpc.publish:
            self._receive(out, peer, msg)
        if rpc.control is not None:
            self._control(out, peer, rpc.control)
        return out.build()

    def join(self, now: int, topic: str) -> Output:
        out = OutputBuilder(now)
        if topic in self.subscriptions:
            return out.build()
        self.subscriptions.add(topic)
        out.event(TraceType.JOIN, topic=topic)
        for peer in sorted(self.peers):
            out.subscription(peer, True, topic)
        self._joined(out, topic)
        return out.build()

    def leave(self, now: int, topic: str) -> Output:
        out = OutputBuilder(now)
        if topic not in self.subscriptions:
            return out.build()
        self.subscriptions.discard(topic)
        out.event(TraceType.LEAVE, topic=topic)
        for peer in sorted(self.peers):
            out.subscription(peer, False, topic)
        self._left(out, topic)
        return out.build()

    def publish(self, now: int, topic: str, data: bytes) -> Output:
        # go-libp2p-pubsub starts the counter at the current time in ns, so a
        # restarted router never reuses a message id; `now` plays that role.
        self._seqno = max(self._seqno + 1, now)
        return self.publish_message(now, self.auth.author(self.peer_id, self._seqno, topic, data))

    def publish_message(self, now: int, msg: Message) -> Output:
        """Publish a message built elsewhere: the reference simulator's injection
        hands one message (one id) to several nodes. As go's publishMessage,
        the publisher traces PUBLISH_MESSAGE, then DELIVER_MESSAGE (received
        from itself) and hands the message to its own application."""
        out = OutputBuilder(now)
        mid = msg.id
        if self.seen.has(now, mid):
            return out.build()
        self.seen.add(now, mid)
        out.event(TraceType.PUBLISH_MESSAGE, message_id=mid, topic=msg.topic)
        out.deliver(msg, self.peer_id)
        self._accepted(out, msg)
        self._forward(out, msg, received_from=None)
        return out.build()

    def heartbeat(self, now: int) -> Output:
        out = OutputBuilder(now)
        self._heartbeat(out)
        return out.build()

    def wake(self, now: int) -> Output:
        """Finish the validations due by `now`, in the order they are due."""
        out = OutputBuilder(now)
        while self._validating and self._validating[0][0] <= now:
            _, _, sender, msg = heapq.heappop(self._validating)
            self._finish_validation(out, sender, msg)
        return out.build()

    def _receive(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        """Payload processing: subscribed, self-origin, signing policy, seen,
        signature, validation, then deliver and forward (go-libp2p-pubsub's
        pushMsg order)."""
        if not self._wants(msg):
            return
        mid = msg.id
        now = out.now
        if msg.from_peer == self.peer_id:
            self._reject(out, sender, msg, REJECT_SELF_ORIGIN)
            return
        reason = self.auth.reject_before_seen(msg)
        if reason is not None:
            self._reject(out, sender, msg, reason)
            return
        if self.seen.has(now, mid):
            out.event(TraceType.DUPLICATE_MESSAGE, message_id=mid, topic=msg.topic, peer=sender)
            self._duplicate(out, sender, msg)
            return
        self._before_validation(out, sender, msg)
        reason = self.auth.reject_signature(msg)
        if reason is not None:
            self._reject(out, sender, msg, reason)
            return
        delay = self.validation_delay.get(msg.topic)
        if delay is None:
            self._finish_validation(out, sender, msg)
            return
        self.seen.add(now, mid)
        self._validations += 1
        heapq.heappush(self._validating, (now + delay, self._validations, sender, msg))
        out.wake_at(now + delay)

    def _finish_validation(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        """The topic's validator has run (at once, or after its delay): a
        message it accepts is seen, delivered and forwarded."""
        if self.validator is not None and not self.validator(msg):
            self._reject(out, sender, msg, REJECT_VALIDATION_FAILED)
            return
        if not self.seen.has(out.now, msg.id):
            self.seen.add(out.now, msg.id)
        out.deliver(msg, sender)
        self._validated(out, sender, msg)
        self._accepted(out, msg)
        self._forward(out, msg, received_from=sender)

    def _reject(self, out: OutputBuilder, sender: PeerId, msg: Message, reason: str) -> None:
        out.event(TraceType.REJECT_MESSAGE, message_id=msg.id, topic=msg.topic, peer=sender, reason=reason)
        self._rejected(out, sender, msg, reason)

    def _accept_from(self, out: OutputBuilder, peer: PeerId) -> bool:
        """Whether to process a peer's messages and control after its
        subscriptions (go's AcceptFrom); routers that score peers graylist."""
        return True

    def _before_validation(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        """A message not seen before is about to be validated."""

    def _validated(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        """A message received from `sender` passed validation, first copy."""

    def _duplicate(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        """Another copy of a message already seen."""

    def _rejected(self, out: OutputBuilder, sender: PeerId, msg: Message, reason: str) -> None:
        """A message from `sender` was rejected for `reason`."""

    def _wants(self, msg: Message) -> bool:
        """Messages for topics we do not subscribe to are ignored, as
        go-libp2p-pubsub does."""
        return msg.topic in self.subscriptions

    def _accepted(self, out: OutputBuilder, msg: Message) -> None:
        """A message passed processing (published or received first time)."""

    def _forward(self, out: OutputBuilder, msg: Message, received_from: PeerId | None) -> None:
        raise NotImplementedError

    def _peer_added(self, out: OutputBuilder, peer: PeerId, outbound: bool, address: str) -> None:
        """A new peer was added."""

    def _peer_removed(self, out: OutputBuilder, peer: PeerId) -> None:
        """A peer went away."""

    def _peer_unsubscribed(self, out: OutputBuilder, peer: PeerId, topic: str) -> None:
        """A peer announced it left a topic."""

    def _joined(self, out: OutputBuilder, topic: str) -> None:
        """We joined a topic."""

    def _left(self, out: OutputBuilder, topic: str) -> None:
        """We left a topic."""

    def _control(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        """Control messages; routers without them ignore them."""

    def _heartbeat(self, out: OutputBuilder) -> None:
        """Periodic maintenance; nothing for routers that have none."""

    @staticmethod
    def _excluded(msg: Message, received_from: PeerId | None) -> set[PeerId]:
        """Never forward back to the sender or to the origin."""
        excluded = {msg.from_peer}
        if received_from is not None:
            excluded.add(received_from)
        return excluded
