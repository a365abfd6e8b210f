"""The broadcast protocol (episub draft, "Broadcast Protocol"): Plumtree's
eager and lazy push over the active view, one `Broadcast` per topic.

Eager peers are the edges of the multicast tree, lazy peers get IHAVE
summaries. Each rule of the draft is one method, named after it:
`publish` / `on_gossip` / `on_duplicate` (Message Propagation and Multicast
Tree Construction), `flush_lazy_queue` (IHAVE on the background timer),
`on_ihave` / `missing_timer` / `on_graft` / `on_prune` (Multicast Tree
Repair), `optimize_tree` (Multicast Tree Optimization), `neighbor_up` /
`neighbor_down` (Active View Changes).

A peer entering the eager set is traced as go's GRAFT event, leaving it as
go's PRUNE event: the tree's edges are what gossipsub's mesh is to gossipsub.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from node.engine.api import NS, TraceType
from node.engine.episub.output import EpisubOut
from node.engine.episub.params import EpisubParams
from node.trace import tree
from node.wire.episub import Gossip, Graft, IHave, MessageSummary, Prune
from node.wire.rpc import Message, MessageId, PeerId


@dataclass(frozen=True)
class Cached:
    """A message in the time-based cache: the hops it came with, the
    neighbour it came from (None: published here, or from outside the active
    view), whether it came as the answer to our
    GRAFT (tree repair) rather than by eager push, and when it expires."""

    msg: Message
    hops: int
    parent: PeerId | None
    grafted: bool
    expires: int


@dataclass
class Missing:
    """A message known by IHAVE only: its announcements (peer, hops) in the
    order seen, how often the missing-message timer touched it, and how many
    GRAFTs were sent for it."""

    announcements: list[tuple[PeerId, int]] = field(default_factory=list)
    touches: int = 0
    grafts: int = 0


class Broadcast:
    def __init__(
        self, topic: str, me: PeerId, params: EpisubParams, seen: Callable[[int, MessageId], bool],
    ) -> None:
        """`seen(now, id)`: the node's seen cache."""
        self.topic = topic
        self.me = me
        self.params = params
        self.seen = seen
        self.eager: dict[PeerId, None] = {}
        self.lazy: dict[PeerId, None] = {}
        self.cache: dict[MessageId, Cached] = {}
        self.lazy_queue: list[MessageSummary] = []
        self.missing: dict[MessageId, Missing] = {}

    # Tree edges

    def _make_eager(self, out: EpisubOut, peer: PeerId) -> None:
        if peer in self.eager:
            return
        self.lazy.pop(peer, None)
        self.eager[peer] = None
        out.event(TraceType.GRAFT, peer=peer, topic=self.topic)

    def _make_lazy(self, out: EpisubOut, peer: PeerId) -> None:
        if self.eager.pop(peer, 0) is None:
            out.event(TraceType.PRUNE, peer=peer, topic=self.topic)
        self.lazy[peer] = None

    def _store(self, now: int, msg: Message, hops: int, parent: PeerId | None, grafted: bool) -> None:
        """Entries expire in the order they were stored (time only moves
        forward), so the sweep stops at the first one still valid."""
        cache = self.cache
        while cache:
            oldest = next(iter(cache))
            if cache[oldest].expires > now:
                break
            del cache[oldest]
        cache[msg.id] = Cached(msg, hops, parent, grafted, now + round(self.params.cache_ttl * NS))

    # Message Propagation and Multicast Tree Construction

    def publish(self, out: EpisubOut, msg: Message) -> None:
        """GOSSIP with a hopcount of 1 to every eager peer; cache; queue for IHAVE."""
        self._push(out, msg, hops=1, exclude=())
        self._store(out.now, msg, 0, None, False)

    def on_gossip(self, out: EpisubOut, sender: PeerId, g: Gossip) -> None:
        """A message seen for the first time (already delivered by the
        router): the sender becomes eager, the tree may be optimized, and the
        message goes on to the eager peers with the hopcount incremented."""
        mid = g.msg.id
        missing = self.missing.pop(mid, None)
        neighbour = sender in self.lazy or sender in self.eager
        if neighbour:
            self._make_eager(out, sender)
            if missing is not None:
                self.optimize_tree(out, sender, g.hops, missing.announcements)
        self._push(out, g.msg, hops=g.hops + 1, exclude=(sender, g.msg.from_peer))
        self._store(out.now, g.msg, g.hops, sender if neighbour else None, missing is not None and missing.grafts > 0)

    def _push(self, out: EpisubOut, msg: Message, hops: int, exclude: tuple[PeerId, ...]) -> None:
        for peer in self.eager:
            if peer not in exclude:
                out.send(peer, Gossip(hops, msg))
        self.lazy_queue.append(MessageSummary(msg.id, hops))

    def on_duplicate(self, out: EpisubOut, sender: PeerId, g: Gossip) -> None:
        """A message already seen: PRUNE the edge, the sender becomes lazy.
        Unless the first copy came from outside the active view (sent before
        that link was dropped): then the first copy from a neighbour is the
        tree's, and its sender stays eager, as a first receipt's would."""
        cached = self.cache.get(g.msg.id)
        if cached is not None and cached.parent is None and cached.hops > 0 and sender in self.eager:
            self.cache[g.msg.id] = replace(cached, parent=sender, hops=g.hops)
        elif sender in self.eager:
            self._make_lazy(out, sender)
            out.send(sender, Prune(self.topic))

    def flush_lazy_queue(self, out: EpisubOut) -> None:
        """The short periodic timer: every queued summary in one IHAVE to each lazy peer."""
        if not self.lazy_queue:
            return
        summary = tuple(self.lazy_queue)
        self.lazy_queue.clear()
        for peer in self.lazy:
            out.send(peer, IHave(self.topic, summary))

    # Multicast Tree Repair

    def on_ihave(self, out: EpisubOut, sender: PeerId, m: IHave) -> None:
        """Unknown ids are marked missing, remembering who announced them
        with which hopcount; for known ones the tree may be optimized."""
        for summary in m.summary:
            if self.seen(out.now, summary.id):
                cached = self.cache.get(summary.id)
                if cached is not None and cached.parent is not None:
                    self.optimize_tree(out, cached.parent, cached.hops, [(sender, summary.hops)])
                continue
            entry = self.missing.get(summary.id)
            if entry is None:
                entry = self.missing[summary.id] = Missing()
                out.extension(tree.MISSING, self.topic, sender, message_id=summary.id, hops=summary.hops)
            entry.announcements.append((sender, summary.hops))

    def missing_timer(self, out: EpisubOut) -> None:
        """The single missing-message timer: a message is marked on its first
        touch and missing on the second; then, every tick, GRAFT the first
        announcer not yet asked (piggybacking every other message it
        announced) until graft_attempts ticks make the message lost."""
        grafts: dict[PeerId, list[MessageId]] = {}
        for mid in list(self.missing):
            entry = self.missing[mid]
            entry.touches += 1
            if entry.touches < 2 or not entry.announcements:
                continue
            if entry.grafts >= self.params.graft_attempts:
                del self.missing[mid]
                continue
            peer, hops = entry.announcements.pop(0)
            entry.announcements.append((peer, hops))
            entry.grafts += 1
            grafts.setdefault(peer, []).append(mid)
            out.extension(tree.GRAFT, self.topic, peer, message_id=mid)
        for peer, mids in grafts.items():
            if peer in self.lazy or peer in self.eager:
                self._make_eager(out, peer)
            out.send(peer, Graft(self.topic, tuple(mids)))

    def on_graft(self, out: EpisubOut, sender: PeerId, m: Graft) -> None:
        """The sender becomes eager and gets the messages it asks for."""
        if sender in self.lazy or sender in self.eager:
            self._make_eager(out, sender)
        for mid in m.msgs:
            cached = self.cache.get(mid)
            if cached is not None:
                out.send(sender, Gossip(cached.hops + 1, cached.msg))

    def on_prune(self, out: EpisubOut, sender: PeerId) -> None:
        if sender in self.eager:
            self._make_lazy(out, sender)

    # Multicast Tree Optimization

    def optimize_tree(
        self, out: EpisubOut, parent: PeerId, eager_hops: int, announcements: list[tuple[PeerId, int]],
    ) -> None:
        """If the eager hopcount exceeds a lazy announcement's by more than
        the threshold, the lazy link replaces the eager one: an empty GRAFT
        to the announcer, PRUNE to the eager parent."""
        better = [(hops, peer) for peer, hops in announcements if peer in self.lazy and peer != parent]
        if not better or parent not in self.eager:
            return
        hops, peer = min(better)
        if eager_hops - hops > self.params.optimization_threshold:
            self._make_eager(out, peer)
            out.send(peer, Graft(self.topic, ()))
            self._make_lazy(out, parent)
            out.send(parent, Prune(self.topic))

    # Active View Changes

    def neighbor_up(self, out: EpisubOut, peer: PeerId) -> None:
        """A new active neighbour is an eager peer."""
        self._make_eager(out, peer)

    def neighbor_down(self, out: EpisubOut, peer: PeerId) -> None:
        """A lazy peer leaving changes nothing; an eager one may cut the tree:
        with eager_repair, every lazy peer is promoted with an empty GRAFT."""
        was_eager = self.eager.pop(peer, 0) is None
        self.lazy.pop(peer, None)
        for entry in self.missing.values():
            entry.announcements = [(p, h) for p, h in entry.announcements if p != peer]
        if not was_eager:
            return
        out.event(TraceType.PRUNE, peer=peer, topic=self.topic)
        if self.params.eager_repair:
            for lazy in list(self.lazy):
                self._make_eager(out, lazy)
                out.send(lazy, Graft(self.topic, ()))
