"""The membership management protocol (episub draft, "Membership Management
Protocol"): HyParView's active and passive views with GoCast's proximity
split, one `Membership` per topic.

The active view maps each neighbour to whether the link is a random link
(made by a JOIN random walk, or accepted for a peer below C_rand) or a near
link; `C_rand` random links keep the overlay connected, the rest are
optimized for proximity. Each rule of the draft is one method, named after
it: `join` / `on_nodes` / `on_join` / `on_forward_join` / `on_neighbor`
(Joining the Overlay), `leave` / `on_leave` (Leaving), `peer_failed` /
`on_disconnect` / `stabilize` / `optimize` (Active View Management),
`shuffle` / `on_shuffle` / `on_shuffle_reply` / `check_passive` /
`on_topics` (Passive View Management). Changes of the active view reach the
broadcast protocol as NeighborUp / NeighborDown notifications.

Choices the draft leaves open are listed in docs/episub.md.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from node.engine.api import NS
from node.engine.episub.output import EpisubOut
from node.engine.episub.params import EpisubParams
from node.engine.episub.proximity import RttTable
from node.engine.pubsub import sample_sorted
from node.trace import tree
from node.wire.episub import (
    Disconnect,
    ForwardJoin,
    GetNodes,
    Join,
    Leave,
    Neighbor,
    Nodes,
    Shuffle,
    ShuffleReply,
)
from node.wire.rpc import PeerId

NeighborNotice = Callable[[EpisubOut, PeerId], None]
Ping = Callable[[EpisubOut, PeerId], None]


@dataclass(frozen=True)
class PendingNeighbor:
    """A NEIGHBOR request we sent: whether it asks for a random link, which
    near neighbour it is to replace (optimization), and when it was sent."""

    random: bool
    replaces: PeerId | None
    sent: int


@dataclass(frozen=True)
class NeighborList:
    """A neighbour's active view and its random links, as it last told us."""

    active: frozenset[PeerId]
    random: frozenset[PeerId]


class Membership:
    def __init__(
        self, topic: str, me: PeerId, params: EpisubParams, rng: random.Random, rtt: RttTable,
        contacts: dict[PeerId, None], ping: Ping, neighbor_up: NeighborNotice, neighbor_down: NeighborNotice,
    ) -> None:
        self.topic = topic
        self.me = me
        self.params = params
        self.rng = rng
        self.rtt = rtt
        self.contacts = contacts
        self.ping = ping
        self.neighbor_up = neighbor_up
        self.neighbor_down = neighbor_down
        self.active: dict[PeerId, bool] = {}
        self.passive: dict[PeerId, None] = {}
        self.pending: dict[PeerId, PendingNeighbor] = {}
        self.deferred: dict[PeerId, Neighbor] = {}
        self.lists: dict[PeerId, NeighborList] = {}
        self.joins_out = 0
        self.nodes_asked = False
        self._last_exchange: tuple[PeerId, ...] = ()

    # Views

    def random_links(self) -> int:
        return sum(self.active.values())

    def near(self) -> list[PeerId]:
        """The near neighbours, nearest first."""
        return self.rtt.nearest_first(p for p, is_random in self.active.items() if not is_random)

    def _neighbor_message(self, request: bool, random_link: bool) -> Neighbor:
        return Neighbor(self.topic, tuple(self.active), request, random_link)

    def _add_active(self, out: EpisubOut, peer: PeerId, random_link: bool) -> None:
        if peer == self.me or peer in self.active:
            return
        self.passive.pop(peer, None)
        self.pending.pop(peer, None)
        self.active[peer] = random_link
        self.joins_out = max(0, self.joins_out - random_link)
        out.extension(tree.NEIGHBOR_UP, self.topic, peer, link=tree.RANDOM if random_link else tree.NEAR)
        self.neighbor_up(out, peer)

    def _remove_active(self, out: EpisubOut, peer: PeerId, to_passive: bool) -> bool:
        random_link = self.active.pop(peer, None)
        if random_link is None:
            return False
        out.extension(tree.NEIGHBOR_DOWN, self.topic, peer, link=tree.RANDOM if random_link else tree.NEAR)
        self.lists.pop(peer, None)
        if to_passive:
            self._add_passive((peer,))
        self.neighbor_down(out, peer)
        return True

    def _drop_link(self, out: EpisubOut, peer: PeerId) -> None:
        """Close an active link ourselves: DISCONNECT, keep it as passive."""
        if self._remove_active(out, peer, to_passive=True):
            out.send(peer, Disconnect(self.topic))

    def _add_passive(self, peers: Iterable[PeerId], keep: Iterable[PeerId] = ()) -> None:
        """Add to the passive view; when full, evict at random, preferring
        the peers in `keep` (those we just sent away in a shuffle)."""
        prefer_evict = [p for p in keep if p in self.passive]
        for peer in peers:
            if peer == self.me or peer in self.active or peer in self.passive:
                continue
            if len(self.passive) >= self.params.P:  # P >= 1: there is a victim
                victims = prefer_evict or sorted(self.passive)
                del self.passive[victims.pop(self.rng.randrange(len(victims)))]
            self.passive[peer] = None

    def _random_active(self, exclude: Iterable[PeerId]) -> PeerId | None:
        excluded = set(exclude)
        pool = [p for p in self.active if p not in excluded]
        return sample_sorted(self.rng, pool, 1)[0] if pool else None

    # Joining the Overlay

    def join(self, out: EpisubOut) -> None:
        """Ask up to C_rand random contacts for an up-to-date view of the
        overlay (GETNODES); the contacts are candidates for the passive view
        until a check finds them outside the topic."""
        pool = [p for p in self.contacts if p not in self.active]
        self._add_passive(pool)
        for contact in sample_sorted(self.rng, pool, self.params.c_rand):
            self.ping(out, contact)
            out.send(contact, GetNodes(self.topic))
            self.nodes_asked = True

    def contact(self, out: EpisubOut, peer: PeerId) -> None:
        """A new contact is a passive candidate; a node still waiting to join
        (no links, nothing asked) joins through it."""
        self._add_passive((peer,))
        if not self.active and not self.nodes_asked and self.joins_out == 0:
            self.join(out)

    def nodes(self) -> Nodes:
        """Our answer to GETNODES: the passive view, the JOIN TTL, and the
        active view with its random links (the stabilization query)."""
        return Nodes(
            self.topic, tuple(self.passive), self.params.active_random_walk_length,
            tuple(self.active), tuple(p for p, r in self.active.items() if r),
        )

    def on_nodes(self, out: EpisubOut, sender: PeerId, m: Nodes) -> None:
        """Remember the sender's lists; take its views into our passive view
        and measure them (the near joins order them by RTT). Without random
        links yet, JOIN: C_rand random walks from nodes picked at random."""
        self.nodes_asked = False
        if sender in self.active:
            self.lists[sender] = NeighborList(frozenset(m.active), frozenset(m.random))
        known = [p for p in (sender, *m.active, *m.peers) if p != self.me]
        self._add_passive(known)
        for peer in sorted(set(known) - set(self.active)):
            if not self.rtt.known(peer):
                self.ping(out, peer)
        missing = self.params.c_rand - self.random_links() - self.joins_out
        if self.active or missing <= 0:
            return
        ttl = m.ttl if m.ttl > 0 else self.params.active_random_walk_length
        for peer in sample_sorted(self.rng, set(known) - set(self.active), missing):
            out.send(peer, Join(self.topic, self.me, ttl))
            self.joins_out += 1

    def on_join(self, out: EpisubOut, sender: PeerId, m: Join) -> None:
        """Accept if the TTL is 0 or the active view is below A (NEIGHBOR to
        P, FORWARDJOIN to a random neighbour); else the walk goes on."""
        if m.peer == self.me or m.peer in self.active:
            return
        onward = self._random_active((sender, m.peer))
        if m.ttl <= 0 or len(self.active) < self.params.A or onward is None:
            self._add_active(out, m.peer, random_link=True)
            out.send(m.peer, self._neighbor_message(request=False, random_link=True))
            target = self._random_active((m.peer,))
            if target is not None:
                out.send(target, ForwardJoin(self.topic, m.peer, self.params.passive_random_walk_length))
            return
        out.send(onward, Join(self.topic, m.peer, m.ttl - 1))

    def on_forward_join(self, out: EpisubOut, sender: PeerId, m: ForwardJoin) -> None:
        """Add P to the passive view; walk on while the TTL lasts."""
        if m.peer == self.me:
            return
        self._add_passive((m.peer,))
        if m.ttl > 0:
            onward = self._random_active((sender, m.peer))
            if onward is not None:
                out.send(onward, ForwardJoin(self.topic, m.peer, m.ttl - 1))

    def on_neighbor(self, out: EpisubOut, sender: PeerId, m: Neighbor) -> None:
        """A request is evaluated (`_neighbor_request`); an acceptance, or a
        NEIGHBOR from a node that took our JOIN, makes the link; from an
        active neighbour it refreshes that neighbour's list."""
        before = self.lists.get(sender)
        self.lists[sender] = NeighborList(frozenset(m.peers), before.random & set(m.peers) if before else frozenset())
        if m.request:
            self.deferred.pop(sender, None)
            self._neighbor_request(out, sender, m)
            return
        if sender in self.active:
            return
        pending = self.pending.get(sender)
        self._add_active(out, sender, m.random if pending is None else pending.random)
        if pending is not None and pending.replaces is not None and pending.replaces in self.active:
            self._drop_link(out, pending.replaces)

    def _neighbor_request(self, out: EpisubOut, peer: PeerId, m: Neighbor) -> None:
        """Accept below A; accept as a random link a peer with fewer than
        C_rand active links; accept as a near link a peer closer than our
        farthest near neighbour by alpha (measuring it first), evicting that
        neighbour if it keeps more than C_rand links; else DISCONNECT."""
        p = self.params
        if peer in self.active:
            out.send(peer, self._neighbor_message(request=False, random_link=self.active[peer]))
            return
        if len(self.active) < p.A:
            self._accept(out, peer, m.random)
        elif len(m.peers) < p.c_rand:
            self._accept(out, peer, True)
        elif not self.rtt.known(peer):
            self.deferred[peer] = m
            self.ping(out, peer)
        elif (farthest := self._evictable_near()) is not None and self.rtt.closer_by(peer, farthest, p.alpha):
            self._drop_link(out, farthest)
            self._accept(out, peer, False)
        else:
            self._add_passive((peer,))
            out.send(peer, Disconnect(self.topic))

    def _evictable_near(self) -> PeerId | None:
        """The farthest near neighbour that keeps more than C_rand links."""
        for peer in reversed(self.near()):
            known = self.lists.get(peer)
            if known is not None and len(known.active) > self.params.c_rand:
                return peer
        return None

    def _accept(self, out: EpisubOut, peer: PeerId, random_link: bool) -> None:
        self._add_active(out, peer, random_link)
        out.send(peer, self._neighbor_message(request=False, random_link=random_link))

    def measured(self, out: EpisubOut, peer: PeerId) -> None:
        """An RTT sample came in: a NEIGHBOR request waiting for it is decided."""
        request = self.deferred.pop(peer, None)
        if request is not None:
            self._neighbor_request(out, peer, request)

    def _request_neighbor(self, out: EpisubOut, peer: PeerId, random_link: bool, replaces: PeerId | None) -> None:
        self.pending[peer] = PendingNeighbor(random_link, replaces, out.now)
        out.send(peer, self._neighbor_message(request=True, random_link=random_link))

    # Leaving the Overlay

    def leave(self, out: EpisubOut) -> None:
        """LEAVE to every active neighbour, in place of DISCONNECT."""
        for peer in list(self.active):
            out.send(peer, Leave(self.topic, self.me, self.params.leave_ttl))
            self._remove_active(out, peer, to_passive=False)

    def on_leave(self, out: EpisubOut, sender: PeerId, m: Leave) -> None:
        """Remove the source from both views; pass the LEAVE on over the
        active links if that removed it or the TTL is above 0."""
        if m.source == self.me:
            return
        in_passive = m.source in self.passive
        self.passive.pop(m.source, None)
        removed = self._remove_active(out, m.source, to_passive=False) or in_passive
        self.pending.pop(m.source, None)
        if removed or m.ttl > 0:
            for peer in list(self.active):
                if peer != sender:
                    out.send(peer, Leave(self.topic, m.source, max(m.ttl - 1, 0)))

    # Active View Management

    def peer_failed(self, out: EpisubOut, peer: PeerId) -> None:
        """The connection failed: drop the peer from both views and, if it was
        active, repair from the passive view with a link of the same kind."""
        self.passive.pop(peer, None)
        self.pending.pop(peer, None)
        self.deferred.pop(peer, None)
        was_random = self.active.get(peer)
        if self._remove_active(out, peer, to_passive=False):
            self._repair(out, bool(was_random))

    def _repair(self, out: EpisubOut, random_link: bool) -> bool:
        """One NEIGHBOR request to a passive node: a random one for a random
        link, the nearest for a near link."""
        pool = [p for p in self.passive if p not in self.pending]
        if not pool:
            return False
        peer = sample_sorted(self.rng, pool, 1)[0] if random_link else self.rtt.nearest_first(pool)[0]
        self._request_neighbor(out, peer, random_link, None)
        return True

    def on_disconnect(self, out: EpisubOut, sender: PeerId) -> None:
        """The neighbour dropped our link (it stays a passive node), or
        rejected our request (the views stay as they are)."""
        self.pending.pop(sender, None)
        self._remove_active(out, sender, to_passive=True)

    def stabilize(self, out: EpisubOut) -> None:
        """Prune an active view larger than A, grow one smaller than A."""
        self._expire_pending(out.now)
        if len(self.active) > self.params.A:
            self._prune_active(out)
        if len(self.active) < self.params.A:
            self._grow_active(out)

    def _expire_pending(self, now: int) -> None:
        limit = round(2 * self.params.stabilization_interval * NS)
        for peer in [p for p, req in self.pending.items() if now - req.sent > limit]:
            del self.pending[peer]
        if not self.active and not self.pending:
            self.joins_out = 0

    def _prune_active(self, out: EpisubOut) -> None:
        """Drop links (farthest first) to neighbours with more than C_rand
        random links, never going below C_rand random links ourselves; then
        one of each pair of neighbours connected with each other; then ask
        the neighbours for their active lists for the next period."""
        p = self.params
        for peer in reversed(self.rtt.nearest_first(self.active)):
            if len(self.active) <= p.A:
                return
            known = self.lists.get(peer)
            if known is None or len(known.random) <= p.c_rand:
                continue
            if self.active[peer] and self.random_links() <= p.c_rand:
                continue
            self._drop_link(out, peer)
        for peer in reversed(self.rtt.nearest_first(self.active)):
            if len(self.active) <= p.A:
                return
            known = self.lists.get(peer)
            if known is None or not (known.active & (self.active.keys() - {peer})):
                continue
            if self.active[peer] and self.random_links() <= p.c_rand:
                continue
            self._drop_link(out, peer)
        for peer in self.active:
            out.send(peer, GetNodes(self.topic))

    def _grow_active(self, out: EpisubOut) -> None:
        """Request links from the passive view as the join does: random links
        until C_rand, then the nearest nodes. With no one left to ask, ask a
        random neighbour for its views (GETNODES), or join again."""
        if not self.active and self.joins_out == 0 and not self.pending:
            if not self.nodes_asked:
                self.join(out)
            return
        wanted = self.params.A - len(self.active) - len(self.pending)
        random_wanted = self.params.c_rand - self.random_links() - sum(r.random for r in self.pending.values())
        for _ in range(max(wanted, 0)):
            random_link = random_wanted > 0
            if not self._repair(out, random_link):
                neighbour = self._random_active(())
                if neighbour is not None:
                    out.send(neighbour, GetNodes(self.topic))
                return
            random_wanted -= random_link

    def optimize(self, out: EpisubOut) -> None:
        """Sample the RTT of every active neighbour; if the nearest passive
        node is closer than the farthest near neighbour by alpha and we keep
        C_rand random links, request it to replace that neighbour."""
        for peer in list(self.active):
            self.ping(out, peer)
        near = self.near()
        if not near or self.random_links() < self.params.c_rand:
            return
        if any(req.replaces is not None for req in self.pending.values()):
            return
        candidates = [p for p in self.rtt.nearest_first(self.passive) if p not in self.pending]
        if candidates and self.rtt.closer_by(candidates[0], near[-1], self.params.alpha):
            self._request_neighbor(out, candidates[0], False, near[-1])

    # Passive View Management

    def shuffle(self, out: EpisubOut) -> None:
        """SHUFFLE to a random neighbour: our id, k_a active and k_p passive peers."""
        target = self._random_active(())
        if target is None:
            return
        p = self.params
        exchange = (
            self.me,
            *sample_sorted(self.rng, [a for a in self.active if a != target], p.shuffle_active),
            *sample_sorted(self.rng, self.passive, p.shuffle_passive),
        )
        self._last_exchange = exchange
        out.send(target, Shuffle(self.topic, self.me, exchange, p.active_random_walk_length))

    def on_shuffle(self, out: EpisubOut, sender: PeerId, m: Shuffle) -> None:
        """Walk on while the TTL lasts and we have other neighbours; else
        answer the originator with as many passive peers (SHUFFLEREPLY) and
        take the exchange into the passive view, evicting those first."""
        if m.peer == self.me:
            return
        if m.ttl > 0 and len(self.active) > 1:
            onward = self._random_active((sender, m.peer))
            if onward is not None:
                out.send(onward, Shuffle(self.topic, m.peer, m.peers, m.ttl - 1))
                return
        reply = tuple(sample_sorted(self.rng, self.passive, len(m.peers)))
        out.send(m.peer, ShuffleReply(self.topic, reply))
        self._add_passive(m.peers, keep=reply)

    def on_shuffle_reply(self, out: EpisubOut, sender: PeerId, m: ShuffleReply) -> None:
        self._add_passive(m.peers, keep=self._last_exchange)

    def check_passive(self, out: EpisubOut) -> None:
        """Probe a few random passive nodes with GETTOPICS (a timed ping); drop
        those whose previous probe went unanswered."""
        for peer in sample_sorted(self.rng, self.passive, self.params.passive_check_count):
            if self.rtt.unanswered(out.now, peer):
                self.passive.pop(peer, None)
            else:
                self.ping(out, peer)

    def on_topics(self, out: EpisubOut, sender: PeerId, topics: tuple[str, ...]) -> None:
        """A node no longer subscribed leaves the passive view."""
        if self.topic not in topics:
            self.passive.pop(sender, None)
            self.deferred.pop(sender, None)
        else:
            self.measured(out, sender)
