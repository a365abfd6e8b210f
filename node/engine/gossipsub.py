"""gossipsub v1.0 (../shared/seeds/gossipsub-v1.0-spec.md), and meshsub: the
same router with gossip emission switched off, so experiments can show what
gossip adds.

Each rule of the spec lives in one method named after its section: `_joined`
(JOIN), `_left` (LEAVE), `_forward` (message processing and publishing),
`_on_graft`, `_on_prune`, `_on_ihave`, `_on_iwant` (control messages),
`_maintain_mesh`, `_maintain_fanout` and `_emit_gossip` (heartbeat).
Choices the spec leaves open are listed in docs/protocol-choices.md.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from node.engine.api import FLOODSUB_ID, MESHSUB_ID, NS, OutputBuilder, TraceType
from node.engine.authenticity import Authenticity
from node.engine.caches import MessageCache
from node.engine.pubsub import PubSubRouter, Validator, sample_sorted
from node.wire.rpc import Control, Message, MessageId, PeerId

GOSSIPSUB_PROTOCOLS = frozenset({MESHSUB_ID})
FLOODSUB_PROTOCOLS = frozenset({FLOODSUB_ID})


@dataclass(frozen=True)
class GossipSubParams:
    """The spec's parameters with its 'reasonable defaults'. D_lazy None means
    D. heartbeat_initial_delay is go-libp2p-pubsub's 100 ms."""

    D: int = 6
    D_low: int = 4
    D_high: int = 12
    D_lazy: int | None = None
    heartbeat_interval: float = 1.0
    heartbeat_initial_delay: float = 0.1
    fanout_ttl: float = 60.0
    mcache_len: int = 5
    mcache_gossip: int = 3
    seen_ttl: float = 120.0
    gossip: bool = True

    @property
    def d_lazy(self) -> int:
        return self.D if self.D_lazy is None else self.D_lazy

    def check(self) -> None:
        if not 0 <= self.D_low <= self.D <= self.D_high:
            raise ValueError(
                f"need 0 <= D_low <= D <= D_high, got D_low={self.D_low}, D={self.D}, D_high={self.D_high}"
            )
        if self.D < 1:
            raise ValueError("D must be at least 1")
        if self.d_lazy < 0:
            raise ValueError("D_lazy must not be negative")
        for name in ("heartbeat_interval", "fanout_ttl", "seen_ttl"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.heartbeat_initial_delay < 0:
            raise ValueError("heartbeat_initial_delay must not be negative")
        if not 1 <= self.mcache_gossip <= self.mcache_len:
            raise ValueError(
                f"need 1 <= mcache_gossip <= mcache_len, got {self.mcache_gossip} and {self.mcache_len}"
            )


class GossipSubRouter(PubSubRouter[GossipSubParams]):
    protocol_id = MESHSUB_ID
    supported_protocols = frozenset({MESHSUB_ID, FLOODSUB_ID})
    mesh_protocols = GOSSIPSUB_PROTOCOLS  # the peers that take part in the mesh

    def __init__(
        self, peer_id: PeerId, rng: random.Random, params: GossipSubParams,
        validator: Validator | None = None, auth: Authenticity = Authenticity(),
        validation_delay: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(peer_id, rng, params, validator, auth, validation_delay)
        self.mesh: dict[str, set[PeerId]] = {}
        self.fanout: dict[str, set[PeerId]] = {}
        self.last_published: dict[str, int] = {}
        self.mcache = MessageCache(params.mcache_len, params.mcache_gossip)

    def gossipsub_peers(self, topic: str) -> set[PeerId]:
        """peers.gossipsub[topic]"""
        return self.topic_peers(topic, self.mesh_protocols)

    def floodsub_peers(self, topic: str) -> set[PeerId]:
        """peers.floodsub[topic]"""
        return self.topic_peers(topic, FLOODSUB_PROTOCOLS)

    def _graft(self, out: OutputBuilder, peer: PeerId, topic: str, notify: bool) -> None:
        self.mesh[topic].add(peer)
        out.event(TraceType.GRAFT, peer=peer, topic=topic)
        if notify:
            out.graft(peer, topic)

    def _prune(self, out: OutputBuilder, peer: PeerId, topic: str, notify: bool) -> None:
        self.mesh[topic].discard(peer)
        out.event(TraceType.PRUNE, peer=peer, topic=topic)
        if notify:
            out.prune(peer, topic)

    # Topic membership

    def _joined(self, out: OutputBuilder, topic: str) -> None:
        """JOIN: fanout peers first, then fill up to D from peers.gossipsub,
        GRAFT every new mesh member."""
        D = self.params.D
        chosen = sample_sorted(self.rng, self.fanout.pop(topic, set()), D)
        self.last_published.pop(topic, None)
        if len(chosen) < D:
            chosen += sample_sorted(self.rng, self.gossipsub_peers(topic) - set(chosen), D - len(chosen))
        self.mesh[topic] = set()
        for peer in sorted(chosen):
            self._graft(out, peer, topic, notify=True)

    def _left(self, out: OutputBuilder, topic: str) -> None:
        """LEAVE: PRUNE every mesh member, then forget the mesh."""
        for peer in sorted(self.mesh.get(topic, ())):
            self._prune(out, peer, topic, notify=True)
        self.mesh.pop(topic, None)

    def _peer_removed(self, out: OutputBuilder, peer: PeerId) -> None:
        for peers in self.mesh.values():
            peers.discard(peer)
        for peers in self.fanout.values():
            peers.discard(peer)

    def _peer_unsubscribed(self, out: OutputBuilder, peer: PeerId, topic: str) -> None:
        if peer in self.mesh.get(topic, ()):
            self._prune(out, peer, topic, notify=False)
        self.fanout.get(topic, set()).discard(peer)

    # Message processing

    def _accepted(self, out: OutputBuilder, msg: Message) -> None:
        self.mcache.put(msg)

    def _forward(self, out: OutputBuilder, msg: Message, received_from: PeerId | None) -> None:
        """floodsub peers first, then the mesh; a local publish to a topic we are
        not in goes through fanout. Never to the sender or the origin."""
        topic = msg.topic
        targets = sorted(self.floodsub_peers(topic))
        if topic in self.mesh:
            targets += sorted(self.mesh[topic])
        elif received_from is None:
            targets += sorted(self._fanout_for_publish(out.now, topic))
        excluded = self._excluded(msg, received_from)
        for peer in targets:
            if peer not in excluded:
                out.forward(peer, msg)

    def _fanout_for_publish(self, now: int, topic: str) -> set[PeerId]:
        fanout = self.fanout.get(topic)
        if not fanout:
            fanout = self.fanout[topic] = set(
                sample_sorted(self.rng, self.gossipsub_peers(topic), self.params.D)
            )
        self.last_published[topic] = now
        return fanout

    # Control messages, in go-libp2p-pubsub's order: IHAVE, IWANT, GRAFT, PRUNE

    def _control(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        self._on_ihave(out, peer, control)
        self._on_iwant(out, peer, control)
        for graft in control.graft:
            self._on_graft(out, peer, graft.topic)
        for prune in control.prune:
            self._on_prune(out, peer, prune.topic)

    def _on_ihave(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        """IHAVE: ask with IWANT for the ids not in `seen`, for topics we are in."""
        wanted: dict[MessageId, None] = {}
        for ihave in control.ihave:
            if ihave.topic not in self.mesh:
                continue
            for mid in ihave.message_ids:
                if not self.seen.has(out.now, mid):
                    wanted[mid] = None
        if wanted:
            out.iwant(peer, tuple(wanted))

    def _on_iwant(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        """IWANT: send every requested message the mcache still holds, each
        once per RPC however often it is asked for (go keys them by id)."""
        sent: set[MessageId] = set()
        for iwant in control.iwant:
            for mid in iwant.message_ids:
                msg = self.mcache.get(mid)
                if msg is not None and mid not in sent:
                    sent.add(mid)
                    out.forward(peer, msg)

    def _on_graft(self, out: OutputBuilder, peer: PeerId, topic: str) -> None:
        """GRAFT: add the sender to mesh[topic] if we are subscribed, else PRUNE."""
        if topic not in self.mesh:
            out.prune(peer, topic)
            return
        if peer not in self.mesh[topic] and self.peers.get(peer) in self.mesh_protocols:
            self._graft(out, peer, topic, notify=False)

    def _on_prune(self, out: OutputBuilder, peer: PeerId, topic: str) -> None:
        """PRUNE: remove the sender from mesh[topic]."""
        if peer in self.mesh.get(topic, ()):
            self._prune(out, peer, topic, notify=False)

    # Heartbeat

    def _heartbeat(self, out: OutputBuilder) -> None:
        self._maintain_mesh(out)
        self._maintain_fanout(out)
        if self.params.gossip:
            self._emit_gossip(out)
        self.mcache.shift()

    def _maintain_mesh(self, out: OutputBuilder) -> None:
        """Below D_low graft up to D; above D_high prune down to D; random choices."""
        p = self.params
        for topic in sorted(self.mesh):
            mesh = self.mesh[topic]
            if len(mesh) < p.D_low:
                for peer in sorted(sample_sorted(self.rng, self.gossipsub_peers(topic) - mesh, p.D - len(mesh))):
                    self._graft(out, peer, topic, notify=True)
            if len(mesh) > p.D_high:
                for peer in sorted(sample_sorted(self.rng, mesh, len(mesh) - p.D)):
                    self._prune(out, peer, topic, notify=True)

    def _maintain_fanout(self, out: OutputBuilder) -> None:
        """Drop a topic's fanout after fanout_ttl without publishing; else top up to D."""
        ttl = round(self.params.fanout_ttl * NS)
        for topic in sorted(self.fanout):
            fanout = self.fanout[topic]
            if self.last_published.get(topic, out.now) + ttl < out.now:
                del self.fanout[topic]
                self.last_published.pop(topic, None)
            elif len(fanout) < self.params.D:
                fanout.update(
                    sample_sorted(self.rng, self.gossipsub_peers(topic) - fanout, self.params.D - len(fanout))
                )

    def _emit_gossip(self, out: OutputBuilder) -> None:
        """IHAVE with the ids of the last mcache_gossip windows to D_lazy random
        topic peers outside mesh and fanout."""
        for topic in sorted(self.mesh.keys() | self.fanout.keys()):
            mids = self.mcache.get_gossip_ids(topic)
            if not mids:
                continue
            candidates = (
                self.gossipsub_peers(topic) - self.mesh.get(topic, set()) - self.fanout.get(topic, set())
            )
            for peer in sorted(sample_sorted(self.rng, candidates, self.params.d_lazy)):
                out.ihave(peer, topic, mids)
