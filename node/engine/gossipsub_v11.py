"""gossipsub v1.1 (libp2p/specs pubsub/gossipsub/gossipsub-v1.1.md) on top of
the v1.0 engine: every rule v1.1 adds or changes is one method here, named
after its section of the spec:

- Explicit Peering Agreements: `set_direct_peers`, `_explicit_peering`
- PRUNE Backoff and Peer Exchange: `_prune_backoff` (making a PRUNE),
  `_on_prune` (obeying one), `_peer_exchange` (acting on its peers),
  `_left` (backoff on unsubscribe)
- Flood Publishing: `_flood_publish`
- Adaptive Gossip Dissemination: `_emit_gossip`
- Outbound Mesh Quotas: `_on_graft` (at D_high), `_retain_by_score`
  (pruning), `_outbound_mesh_quota` (heartbeat)
- Peer Scoring: `score` (node/engine/peer_score.py), P5 given by
  `set_app_specific_scores`; Score Thresholds:
  `_graylisted`, `_on_ihave`/`_on_iwant` (gossip), `_flood_publish` and
  `_maintain_fanout` (publish), `_peer_exchange` (accept PX)
- Heartbeat Maintenance: `_maintain_mesh`, `_retain_by_score` (D_score)
- Opportunistic Grafting: `_opportunistic_grafting`
- Spam Protection Measures: `_on_graft` (unknown topics), `_on_iwant`
  (retransmissions), `_on_ihave` (IHAVE flood limits, IWANT promises),
  `_apply_iwant_penalties`

Where the spec leaves a choice open the engine does what go-libp2p-pubsub
does (gossipsub.go); docs/gossipsub-v1.1.md lists those choices and maps
every rule to its test.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

from node.engine.api import FLOODSUB_ID, MESHSUB_ID, MESHSUB_V11_ID, NS, OutputBuilder, TraceType
from node.engine.authenticity import REJECT_INVALID_SIGNATURE, REJECT_MISSING_SIGNATURE, Authenticity
from node.engine.backoff import Backoff
from node.engine.gossip_promises import GossipPromises
from node.engine.gossipsub import GossipSubRouter
from node.engine.gossipsub_config import GossipSubV11Params
from node.engine.peer_score import PeerScore
from node.engine.pubsub import Validator, sample_sorted
from node.wire.rpc import Control, Message, MessageId, PeerId, Prune

# go-libp2p-pubsub's GossipSubDirectConnectTicks: how often (in heartbeats)
# a lost explicit peer is dialled again.
DIRECT_CONNECT_TICKS = 300


class GossipSubV11Router(GossipSubRouter):
    protocol_id = MESHSUB_V11_ID
    supported_protocols = frozenset({MESHSUB_V11_ID, MESHSUB_ID, FLOODSUB_ID})
    mesh_protocols = frozenset({MESHSUB_V11_ID, MESHSUB_ID})
    # peers that understand v1.1's PRUNE (peer exchange and backoff)
    px_protocols = frozenset({MESHSUB_V11_ID})
    params: GossipSubV11Params

    def __init__(
        self, peer_id: PeerId, rng: random.Random, params: GossipSubV11Params,
        validator: Validator | None = None, auth: Authenticity = Authenticity(),
        validation_delay: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(peer_id, rng, params, validator, auth, validation_delay)
        self.thresholds = params.thresholds()
        self.score = PeerScore(params.peer_score_params())
        self.backoff = Backoff()
        self.promises = GossipPromises(round(params.IWantFollowupTime * NS))
        self.outbound: set[PeerId] = set()
        self.direct: frozenset[PeerId] = frozenset()
        self.peerhave: Counter[PeerId] = Counter()
        self.iasked: Counter[PeerId] = Counter()
        self.heartbeat_ticks = 0
        self.next_decay: int | None = None

    # Score Function: P5

    def set_app_specific_scores(self, scores: Mapping[PeerId, float]) -> None:
        """P5, the application's rating of each peer (peers not named: 0)."""
        for peer, value in scores.items():
            self.score.set_app_specific_score(peer, value)

    # Explicit Peering Agreements

    def set_direct_peers(self, peers: frozenset[PeerId]) -> None:
        """The peers this node has an explicit peering agreement with."""
        self.direct = frozenset(peers) - {self.peer_id}

    def _explicit_peering(self, out: OutputBuilder) -> None:
        """Reconnect lost explicit peers every DIRECT_CONNECT_TICKS heartbeats
        (the first heartbeat connects them)."""
        if self.heartbeat_ticks % DIRECT_CONNECT_TICKS == 1:
            for peer in sorted(self.direct - self.peers.keys()):
                out.dial(peer)

    def _graftable(self, now: int, topic: str, peer: PeerId) -> bool:
        """A candidate for our mesh: not direct, not backed off (with a
        heartbeat of slack), a mesh protocol and a score of at least 0."""
        return (
            peer not in self.direct
            and not self.backoff.active(now, topic, peer, self.heartbeat_interval)
            and self.peers.get(peer) in self.mesh_protocols
            and self.score.score(peer) >= 0
        )

    # Peers

    def _peer_added(self, out: OutputBuilder, peer: PeerId, outbound: bool, address: str) -> None:
        """The spec's P6 counts the peers behind each IP, so the score
        learns the connection's address with the peer."""
        self.score.add_peer(peer)
        if address:
            self.score.set_ips(peer, (address,))
        if outbound:
            self.outbound.add(peer)

    def _peer_removed(self, out: OutputBuilder, peer: PeerId) -> None:
        super()._peer_removed(out, peer)
        self.score.remove_peer(out.now, peer)
        self.outbound.discard(peer)

    def _graft(self, out: OutputBuilder, peer: PeerId, topic: str, notify: bool) -> None:
        super()._graft(out, peer, topic, notify)
        self.score.graft(out.now, peer, topic)

    def _prune(self, out: OutputBuilder, peer: PeerId, topic: str, notify: bool) -> None:
        self._prune_with(out, peer, topic, notify, px=False, unsubscribe=False)

    def _prune_with(self, out: OutputBuilder, peer: PeerId, topic: str, notify: bool, px: bool,
                    unsubscribe: bool) -> None:
        self.mesh[topic].discard(peer)
        self.score.prune(peer, topic)
        out.event(TraceType.PRUNE, peer=peer, topic=topic)
        if notify:
            self._prune_backoff(out, peer, topic, px, unsubscribe)

    # Topic membership

    def _joined(self, out: OutputBuilder, topic: str) -> None:
        """JOIN: fanout peers first, then up to D graftable topic peers."""
        now, D = out.now, self.params.D
        fanout = {p for p in self.fanout.pop(topic, set()) if self._graftable(now, topic, p)}
        chosen = sample_sorted(self.rng, fanout, D)
        self.last_published.pop(topic, None)
        if len(chosen) < D:
            candidates = {p for p in self.gossipsub_peers(topic) - set(chosen) if self._graftable(now, topic, p)}
            chosen += sample_sorted(self.rng, candidates, D - len(chosen))
        self.mesh[topic] = set()
        for peer in sorted(chosen):
            self._graft(out, peer, topic, notify=True)

    def _left(self, out: OutputBuilder, topic: str) -> None:
        """LEAVE: PRUNE every mesh member with UnsubscribeBackoff."""
        for peer in sorted(self.mesh.get(topic, ())):
            self._prune_with(out, peer, topic, notify=True, px=self.params.DoPX, unsubscribe=True)
        self.mesh.pop(topic, None)

    # PRUNE Backoff and Peer Exchange

    def _prune_backoff(self, out: OutputBuilder, peer: PeerId, topic: str, px: bool, unsubscribe: bool) -> None:
        """Send a PRUNE and back off from the peer: PruneBackoff, or
        UnsubscribeBackoff when we leave the topic. A v1.1 peer is told the
        backoff and, with PX, up to PrunePeers other topic peers with a
        score of at least 0; a v1.0 peer gets a v1.0 PRUNE."""
        p = self.params
        seconds = p.UnsubscribeBackoff if unsubscribe else p.PruneBackoff
        self.backoff.add(topic, peer, out.now + round(seconds * NS))
        if self.peers.get(peer) not in self.px_protocols:
            out.prune(peer, topic)
            return
        exchanged: tuple[PeerId, ...] = ()
        if px:
            candidates = {q for q in self.gossipsub_peers(topic) - {peer} if self.score.score(q) >= 0}
            exchanged = tuple(sorted(sample_sorted(self.rng, candidates, p.PrunePeers)))
        out.prune(peer, topic, exchanged, int(seconds))

    def _on_prune(self, out: OutputBuilder, peer: PeerId, prune: Prune, score: float) -> None:  # type: ignore[override]
        """PRUNE: leave the mesh, back off for the backoff the peer asked
        for (else PruneBackoff), and take its peer exchange."""
        topic = prune.topic
        if topic not in self.mesh:
            return
        if peer in self.mesh[topic]:
            self.mesh[topic].discard(peer)
            self.score.prune(peer, topic)
            out.event(TraceType.PRUNE, peer=peer, topic=topic)
        backoff = prune.backoff if prune.backoff else self.params.PruneBackoff
        self.backoff.add(topic, peer, out.now + round(backoff * NS))
        if prune.peers:
            self._peer_exchange(out, prune.peers, score)

    def _peer_exchange(self, out: OutputBuilder, peers: tuple[PeerId, ...], score: float) -> None:
        """PX is taken only from a peer whose score reaches AcceptPXThreshold:
        dial up to PrunePeers of the peers we are not connected to."""
        if score < self.thresholds.AcceptPXThreshold:
            return
        unknown = [p for p in peers if p not in self.peers and p != self.peer_id]
        for peer in sorted(sample_sorted(self.rng, unknown, self.params.PrunePeers)):
            out.dial(peer)

    # Message processing

    def _accept_from(self, out: OutputBuilder, peer: PeerId) -> bool:
        return not self._graylisted(peer)

    def _graylisted(self, peer: PeerId) -> bool:
        """GraylistThreshold: a peer below it has its RPCs ignored (after
        its subscriptions, as go does); explicit peers never are."""
        return peer not in self.direct and self.score.score(peer) < self.thresholds.GraylistThreshold

    def _validated(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        self.score.validate_message(out.now, msg.id)
        self.score.deliver_message(out.now, sender, msg.topic, msg.id)
        self.promises.fulfil(msg.id)

    def _duplicate(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        self.score.duplicate_message(out.now, sender, msg.topic, msg.id)

    def _rejected(self, out: OutputBuilder, sender: PeerId, msg: Message, reason: str) -> None:
        """A rejected copy fulfils the IWANT promise (P4 punishes it instead),
        except an obviously forged one (go's gossip tracer)."""
        self.score.reject_message(out.now, sender, msg.topic, msg.id, reason)
        if reason not in (REJECT_MISSING_SIGNATURE, REJECT_INVALID_SIGNATURE):
            self.promises.fulfil(msg.id)

    def _forward(self, out: OutputBuilder, msg: Message, received_from: PeerId | None) -> None:
        """Explicit peers and floodsub peers (above PublishThreshold) in the
        topic, then the mesh; our own messages are flood-published."""
        topic = msg.topic
        if received_from is None and self.params.FloodPublish:
            targets = self._flood_publish(topic)
        else:
            targets = self.direct & self.topic_peers(topic)
            targets |= {p for p in self.floodsub_peers(topic) if self._above(p, self.thresholds.PublishThreshold)}
            if topic in self.mesh:
                targets |= self.mesh[topic]
            elif received_from is None:
                targets |= self._fanout_for_publish(out.now, topic)
        excluded = self._excluded(msg, received_from)
        for peer in sorted(targets):
            if peer not in excluded and self._wants_message(peer, msg.id):
                out.forward(peer, msg)

    def _flood_publish(self, topic: str) -> set[PeerId]:
        """Flood Publishing: our own message goes to every topic peer with a
        score of at least PublishThreshold, and to explicit peers."""
        return {p for p in self.topic_peers(topic) if p in self.direct or self._above(p, self.thresholds.PublishThreshold)}

    def _wants_message(self, peer: PeerId, mid: MessageId) -> bool:
        """Whether a peer may be sent a message (v1.2: not after IDONTWANT)."""
        return True

    def _fanout_for_publish(self, now: int, topic: str) -> set[PeerId]:
        fanout = self.fanout.get(topic)
        if not fanout:
            candidates = {p for p in self.gossipsub_peers(topic) - self.direct
                          if self._above(p, self.thresholds.PublishThreshold)}
            fanout = self.fanout[topic] = set(sample_sorted(self.rng, candidates, self.params.D))
        self.last_published[topic] = now
        return fanout

    def _above(self, peer: PeerId, threshold: float) -> bool:
        return self.score.score(peer) >= threshold

    # Control messages

    def _control(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        score = self.score.score(peer) if control.graft or control.prune else 0.0
        self._on_ihave(out, peer, control)
        self._on_iwant(out, peer, control)
        self._on_grafts(out, peer, control, score)
        for prune in control.prune:
            self._on_prune(out, peer, prune, score)

    def _on_ihave(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        """IHAVE: ignored below GossipThreshold, beyond MaxIHaveMessages
        IHAVEs per heartbeat or MaxIHaveLength ids asked for per heartbeat;
        ask for at most that many unseen ids of mesh topics and promise-track
        one of them."""
        if not control.ihave or not self._above(peer, self.thresholds.GossipThreshold):
            return
        p = self.params
        self.peerhave[peer] += 1
        if self.peerhave[peer] > p.MaxIHaveMessages or self.iasked[peer] >= p.MaxIHaveLength:
            return
        wanted: dict[MessageId, None] = {}
        for ihave in control.ihave:
            if ihave.topic not in self.mesh:
                continue
            for mid in ihave.message_ids[: p.MaxIHaveLength]:
                if not self.seen.has(out.now, mid):
                    wanted[mid] = None
        if not wanted:
            return
        ask = tuple(wanted)[: p.MaxIHaveLength - self.iasked[peer]]
        self.iasked[peer] += len(ask)
        self.promises.add(out.now, self.rng, peer, ask)
        out.iwant(peer, ask)

    def _on_iwant(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        """IWANT: ignored below GossipThreshold; each message is sent to a peer
        at most GossipRetransmission times."""
        if not control.iwant or not self._above(peer, self.thresholds.GossipThreshold):
            return
        sent: set[MessageId] = set()
        for iwant in control.iwant:
            for mid in iwant.message_ids:
                if mid in sent or not self._wants_message(peer, mid):
                    continue
                msg, count = self.mcache.get_for_peer(mid, peer)
                if msg is not None and count <= self.params.GossipRetransmission:
                    sent.add(mid)
                    out.forward(peer, msg)

    def _on_grafts(self, out: OutputBuilder, peer: PeerId, control: Control, score: float) -> None:
        """GRAFTs of one RPC; the PRUNEs they earn carry PX unless one of them
        was refused for a reason that makes PX a gift to a bad peer."""
        refused: list[str] = []
        px = self.params.DoPX
        for graft in control.graft:
            verdict = self._on_graft(out, peer, graft.topic, score)
            if verdict is not None:
                refused.append(graft.topic)
                px = px and verdict
        for topic in refused:
            self._prune_backoff(out, peer, topic, px, unsubscribe=False)

    def _on_graft(self, out: OutputBuilder, peer: PeerId, topic: str, score: float) -> bool | None:  # type: ignore[override]
        """GRAFT. None: accepted or ignored; else refused with a PRUNE, and
        whether that PRUNE may carry PX. Unknown topics are ignored (spam
        protection); explicit peers, peers we back off from (a penalty, two
        within GraftFloodThreshold of the PRUNE), peers with a negative score
        and, at D_high, inbound peers are refused."""
        mesh = self.mesh.get(topic)
        if mesh is None or peer in mesh or self.peers.get(peer) not in self.mesh_protocols:
            return None
        now = out.now
        if peer in self.direct:
            return False
        until = self.backoff.until(topic, peer)
        if until is not None and now < until:
            self.score.add_penalty(peer, 1)
            flood_cutoff = until + round((self.params.GraftFloodThreshold - self.params.PruneBackoff) * NS)
            if now < flood_cutoff:
                self.score.add_penalty(peer, 1)
            return False
        if score < 0:
            return False
        if len(mesh) >= self.params.D_high and peer not in self.outbound:
            return True
        self._graft(out, peer, topic, notify=False)
        return None

    # Heartbeat

    def _heartbeat(self, out: OutputBuilder) -> None:
        self.heartbeat_ticks += 1
        self._score_decay(out.now)
        self.backoff.clear_expired(out.now, self.heartbeat_interval)
        self.peerhave.clear()
        self.iasked.clear()
        self._apply_iwant_penalties(out.now)
        self._explicit_peering(out)
        super()._heartbeat(out)
        out.scores.extend((peer, self.score.components(peer)) for peer in sorted(self.peers))

    def _score_decay(self, now: int) -> None:
        """Parameter Decay, every DecayInterval (checked at each heartbeat)."""
        interval = round(self.params.DecayInterval * NS)
        if self.next_decay is None:
            self.next_decay = now + interval
        while now >= self.next_decay:
            self.score.refresh(now)
            self.next_decay += interval

    def _apply_iwant_penalties(self, now: int) -> None:
        """A P7 penalty per broken IWANT promise."""
        for peer, count in sorted(self.promises.broken(now).items()):
            self.score.add_penalty(peer, count)

    def _maintain_mesh(self, out: OutputBuilder) -> None:
        """Heartbeat Maintenance: prune peers with a negative score; below
        D_low graft graftable peers up to D; above D_high keep D (the best
        D_score by score, the rest at random, D_out of them outbound); then
        the outbound quota and opportunistic grafting."""
        p = self.params
        now = out.now
        for topic in sorted(self.mesh):
            mesh = self.mesh[topic]
            for peer in sorted(mesh):
                if self.score.score(peer) < 0:
                    self._prune_with(out, peer, topic, notify=True, px=False, unsubscribe=False)
            if len(mesh) < p.D_low:
                candidates = {q for q in self.gossipsub_peers(topic) - mesh if self._graftable(now, topic, q)}
                for peer in sorted(sample_sorted(self.rng, candidates, p.D - len(mesh))):
                    self._graft(out, peer, topic, notify=True)
            if len(mesh) > p.D_high:
                for peer in self._retain_by_score(mesh)[p.D:]:
                    self._prune_with(out, peer, topic, notify=True, px=p.DoPX, unsubscribe=False)
            if len(mesh) >= p.D_low:
                self._outbound_mesh_quota(out, topic, mesh)
            if self.heartbeat_ticks % p.OpportunisticGraftTicks == 0 and len(mesh) > 1:
                self._opportunistic_grafting(out, topic, mesh)

    def _retain_by_score(self, mesh: set[PeerId]) -> list[PeerId]:
        """The mesh ordered so that its first D are the peers to keep: the
        best D_score by score, then random ones, with outbound peers bubbled
        to the front until D_out of the first D are outbound."""
        p = self.params
        peers = sample_sorted(self.rng, mesh, len(mesh))
        peers.sort(key=lambda q: -self.score.score(q))
        rest = peers[p.D_score:]
        self.rng.shuffle(rest)
        peers[p.D_score:] = rest
        outbound = sum(1 for q in peers[: p.D] if q in self.outbound)
        if outbound < p.D_out:
            kept_outbound = [q for q in peers[: p.D] if q in self.outbound]
            needed = [q for q in peers[p.D:] if q in self.outbound][: p.D_out - outbound]
            front = kept_outbound + needed
            peers = front + [q for q in peers if q not in front]
        return peers

    def _outbound_mesh_quota(self, out: OutputBuilder, topic: str, mesh: set[PeerId]) -> None:
        """With at least D_low mesh peers but fewer than D_out outbound ones,
        graft outbound peers to fill the quota."""
        missing = self.params.D_out - sum(1 for q in mesh if q in self.outbound)
        if missing <= 0:
            return
        candidates = {q for q in self.gossipsub_peers(topic) - mesh
                      if q in self.outbound and self._graftable(out.now, topic, q)}
        for peer in sorted(sample_sorted(self.rng, candidates, missing)):
            self._graft(out, peer, topic, notify=True)

    def _opportunistic_grafting(self, out: OutputBuilder, topic: str, mesh: set[PeerId]) -> None:
        """Every OpportunisticGraftTicks: if the median mesh score is below
        OpportunisticGraftThreshold, graft OpportunisticGraftPeers peers that
        score above the median."""
        scores = sorted(self.score.score(q) for q in mesh)
        median = scores[len(scores) // 2]
        if median >= self.thresholds.OpportunisticGraftThreshold:
            return
        candidates = {q for q in self.gossipsub_peers(topic) - mesh
                      if self._graftable(out.now, topic, q) and self.score.score(q) > median}
        for peer in sorted(sample_sorted(self.rng, candidates, self.params.OpportunisticGraftPeers)):
            self._graft(out, peer, topic, notify=True)

    def _maintain_fanout(self, out: OutputBuilder) -> None:
        """Fanout peers that left the topic or fell below PublishThreshold
        are dropped, then the v1.0 rule (expiry, top up to D) applies with
        the same threshold."""
        for topic in sorted(self.fanout):
            members = self.gossipsub_peers(topic)
            self.fanout[topic] = {
                q for q in self.fanout[topic] if q in members and self._above(q, self.thresholds.PublishThreshold)
            }
        ttl = round(self.params.fanout_ttl * NS)
        for topic in sorted(self.fanout):
            fanout = self.fanout[topic]
            if self.last_published.get(topic, out.now) + ttl < out.now:
                del self.fanout[topic]
                self.last_published.pop(topic, None)
            elif len(fanout) < self.params.D:
                candidates = {q for q in self.gossipsub_peers(topic) - fanout - self.direct
                              if self._above(q, self.thresholds.PublishThreshold)}
                fanout.update(sample_sorted(self.rng, candidates, self.params.D - len(fanout)))

    def _emit_gossip(self, out: OutputBuilder) -> None:
        """Adaptive Gossip Dissemination: IHAVE to GossipFactor of the topic
        peers outside mesh and fanout at or above GossipThreshold (explicit
        peers excepted), at least D_lazy; more than MaxIHaveLength ids are cut
        to a random MaxIHaveLength for each peer."""
        p = self.params
        for topic in sorted(self.mesh.keys() | self.fanout.keys()):
            mids = self.mcache.get_gossip_ids(topic)
            if not mids:
                continue
            candidates = {
                q for q in self.gossipsub_peers(topic) - self.mesh.get(topic, set()) - self.fanout.get(topic, set())
                if q not in self.direct and self._above(q, self.thresholds.GossipThreshold)
            }
            target = max(p.d_lazy, int(p.GossipFactor * len(candidates)))
            for peer in sorted(sample_sorted(self.rng, candidates, target)):
                ids = mids
                if len(mids) > p.MaxIHaveLength:
                    ids = tuple(self.rng.sample(mids, p.MaxIHaveLength))
                out.ihave(peer, topic, ids)
