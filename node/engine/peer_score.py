"""gossipsub v1.1 peer scoring ("Peer Scoring" in libp2p/specs
pubsub/gossipsub/gossipsub-v1.1.md), sans-I/O: every input carries `now`
(nanoseconds), nothing reads a clock.

The router tells the score what happens (a peer connects or goes, is
grafted or pruned, delivers a message first, late, twice or invalid,
misbehaves); `score(peer)` is the spec's score function and `refresh(now)`
its periodic decay. Where the spec leaves a detail open this follows
go-libp2p-pubsub (score.go), whose tests provide the expected values in
tests/test_peer_score.py:

- P1 counts whole quanta (go divides durations), and the time in mesh is
  brought up to date in `refresh` only ("calculated lazily during the decay
  update").
- The score of a disconnected peer is kept for `RetainScore` only if it is
  not positive; retained scores do not decay; on disconnect P2 is reset and
  a mesh delivery deficit becomes a mesh failure penalty (P3b).
- Signature and self-origin failures count as invalid deliveries (P4)
  without a delivery record; "validation ignored" and "throttled" never do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from node.engine.api import NS
from node.engine.authenticity import (
    REJECT_INVALID_SIGNATURE,
    REJECT_MISSING_SIGNATURE,
    REJECT_SELF_ORIGIN,
    REJECT_UNEXPECTED_AUTH_INFO,
    REJECT_UNEXPECTED_SIGNATURE,
)
from node.engine.score_params import PeerScoreParams, TopicScoreParams
from node.wire.rpc import MessageId, PeerId

# go-libp2p-pubsub's other rejection reasons (tracer.go), which our
# validator pipeline does not produce but a score must tell apart.
REJECT_VALIDATION_IGNORED = "validation ignored"
REJECT_VALIDATION_THROTTLED = "validation throttled"
REJECT_VALIDATION_QUEUE_FULL = "validation queue full"
REJECT_BLACKLISTED_PEER = "blacklisted peer"
REJECT_BLACKLISTED_SOURCE = "blacklisted source"

_UNTRACKED_INVALID = frozenset({
    REJECT_MISSING_SIGNATURE, REJECT_INVALID_SIGNATURE, REJECT_UNEXPECTED_SIGNATURE,
    REJECT_UNEXPECTED_AUTH_INFO, REJECT_SELF_ORIGIN,
})
_UNTRACKED_IGNORED = frozenset({REJECT_BLACKLISTED_PEER, REJECT_BLACKLISTED_SOURCE, REJECT_VALIDATION_QUEUE_FULL})

# How long a delivery record is kept (go's TimeCacheDuration, 2 minutes).
DELIVERY_RECORD_TTL = 120 * NS

UNKNOWN, VALID, INVALID, IGNORED, THROTTLED = range(5)


@dataclass
class TopicStats:
    in_mesh: bool = False
    graft_time: int = 0
    mesh_time: int = 0
    first_message_deliveries: float = 0.0
    mesh_message_deliveries: float = 0.0
    mesh_message_deliveries_active: bool = False
    mesh_failure_penalty: float = 0.0
    invalid_message_deliveries: float = 0.0


@dataclass
class PeerStats:
    connected: bool = True
    expire: int = 0
    topics: dict[str, TopicStats] = field(default_factory=dict)
    ips: tuple[str, ...] = ()
    behaviour_penalty: float = 0.0


@dataclass
class DeliveryRecord:
    expire: int
    status: int = UNKNOWN
    validated: int | None = None
    peers: set[PeerId] = field(default_factory=set)


class ScoreComponents(NamedTuple):
    """One peer's score and its parts (the per-heartbeat score file):
    P1..P4 summed over topics with their topic weights, the rest as the
    spec's weighted terms."""

    score: float
    p1: float
    p2: float
    p3: float
    p3b: float
    p4: float
    p5: float
    p6: float
    p7: float


class PeerScore:
    def __init__(self, params: PeerScoreParams) -> None:
        params.check()
        self.params = params
        self.peer_stats: dict[PeerId, PeerStats] = {}
        self.peer_ips: dict[str, set[PeerId]] = {}
        self.deliveries: dict[MessageId, DeliveryRecord] = {}
        self.app_specific_score: dict[PeerId, float] = dict(params.AppSpecificScore)
        # components() by peer, dropped whenever something it depends on changes
        self._cached: dict[PeerId, ScoreComponents] = {}

    def set_app_specific_score(self, peer: PeerId, value: float) -> None:
        """P5 as the application now rates `peer`."""
        self.app_specific_score[peer] = value
        self._cached.pop(peer, None)

    # Peers

    def add_peer(self, peer: PeerId) -> None:
        self._cached.pop(peer, None)
        stats = self.peer_stats.get(peer)
        if stats is None:
            stats = self.peer_stats[peer] = PeerStats()
        stats.connected = True

    def remove_peer(self, now: int, peer: PeerId) -> None:
        """Retention of the score after disconnect: keep a non-positive
        score for RetainScore, with P2 reset and any mesh delivery deficit
        turned into a mesh failure penalty."""
        stats = self.peer_stats.get(peer)
        if stats is None:
            return
        if self.score(peer) > 0:
            self._forget(peer)
            return
        self._cached.pop(peer, None)
        for topic, tstats in stats.topics.items():
            tstats.first_message_deliveries = 0.0
            tparams = self.params.topic(topic)
            if tparams is not None and tstats.in_mesh:
                self._apply_mesh_failure_penalty(tstats, tparams)
            tstats.in_mesh = False
        stats.connected = False
        stats.expire = now + round(self.params.RetainScore * NS)

    def set_ips(self, peer: PeerId, ips: tuple[str, ...]) -> None:
        """The addresses a peer is connected from (P6)."""
        stats = self.peer_stats.get(peer)
        if stats is None:
            return
        self._cached.clear()  # P6 of every peer sharing an address changes
        for ip in stats.ips:
            self.peer_ips.get(ip, set()).discard(peer)
        stats.ips = tuple(ips)
        for ip in stats.ips:
            self.peer_ips.setdefault(ip, set()).add(peer)

    def _forget(self, peer: PeerId) -> None:
        self.set_ips(peer, ())
        del self.peer_stats[peer]
        self._cached.pop(peer, None)

    def _topic_stats(self, peer: PeerId, topic: str) -> TopicStats | None:
        stats = self.peer_stats.get(peer)
        if stats is None or self.params.topic(topic) is None:
            return None
        tstats = stats.topics.get(topic)
        if tstats is None:
            tstats = stats.topics[topic] = TopicStats()
        return tstats

    # Mesh membership (P1, P3, P3b)

    def graft(self, now: int, peer: PeerId, topic: str) -> None:
        tstats = self._topic_stats(peer, topic)
        if tstats is None:
            return
        self._cached.pop(peer, None)
        tstats.in_mesh = True
        tstats.graft_time = now
        tstats.mesh_time = 0
        tstats.mesh_message_deliveries_active = False

    def prune(self, peer: PeerId, topic: str) -> None:
        """P3b: the sticky mesh failure penalty is taken at prune time."""
        tstats = self._topic_stats(peer, topic)
        tparams = self.params.topic(topic)
        if tstats is None or tparams is None:
            return
        self._cached.pop(peer, None)
        self._apply_mesh_failure_penalty(tstats, tparams)
        tstats.in_mesh = False

    @staticmethod
    def _apply_mesh_failure_penalty(tstats: TopicStats, tparams: TopicScoreParams) -> None:
        threshold = tparams.MeshMessageDeliveriesThreshold
        if tstats.mesh_message_deliveries_active and tstats.mesh_message_deliveries < threshold:
            deficit = threshold - tstats.mesh_message_deliveries
            tstats.mesh_failure_penalty += deficit * deficit

    # Message deliveries (P2, P3, P4)

    def _record(self, now: int, mid: MessageId) -> DeliveryRecord:
        self._expire_records(now)
        record = self.deliveries.get(mid)
        if record is None:
            record = self.deliveries[mid] = DeliveryRecord(now + DELIVERY_RECORD_TTL)
        return record

    def _expire_records(self, now: int) -> None:
        records = self.deliveries
        while records:
            oldest = next(iter(records))
            if records[oldest].expire > now:
                return
            del records[oldest]

    def validate_message(self, now: int, mid: MessageId) -> None:
        """A message enters validation: its delivery record starts."""
        self._record(now, mid)

    def deliver_message(self, now: int, peer: PeerId, topic: str, mid: MessageId) -> None:
        """The first copy, from `peer`, passed validation."""
        self._mark_first_message_delivery(peer, topic)
        record = self._record(now, mid)
        if record.status != UNKNOWN:
            return
        record.status = VALID
        record.validated = now
        for other in sorted(record.peers):
            if other != peer:
                self._mark_duplicate_message_delivery(now, other, topic, None)

    def reject_message(self, now: int, peer: PeerId, topic: str, mid: MessageId, reason: str) -> None:
        if reason in _UNTRACKED_INVALID:
            self._mark_invalid_message_delivery(peer, topic)
            return
        if reason in _UNTRACKED_IGNORED:
            return
        record = self._record(now, mid)
        if record.status != UNKNOWN:
            return
        if reason in (REJECT_VALIDATION_THROTTLED, REJECT_VALIDATION_IGNORED):
            record.status = THROTTLED if reason == REJECT_VALIDATION_THROTTLED else IGNORED
            record.peers = set()
            return
        record.status = INVALID
        self._mark_invalid_message_delivery(peer, topic)
        for other in sorted(record.peers):
            self._mark_invalid_message_delivery(other, topic)
        record.peers = set()

    def duplicate_message(self, now: int, peer: PeerId, topic: str, mid: MessageId) -> None:
        record = self._record(now, mid)
        if peer in record.peers:
            return
        if record.status == UNKNOWN:
            record.peers.add(peer)
        elif record.status == VALID:
            record.peers.add(peer)
            self._mark_duplicate_message_delivery(now, peer, topic, record.validated)
        elif record.status == INVALID:
            self._mark_invalid_message_delivery(peer, topic)

    def _mark_first_message_delivery(self, peer: PeerId, topic: str) -> None:
        tstats = self._topic_stats(peer, topic)
        tparams = self.params.topic(topic)
        if tstats is None or tparams is None:
            return
        self._cached.pop(peer, None)
        tstats.first_message_deliveries = min(
            tstats.first_message_deliveries + 1, tparams.FirstMessageDeliveriesCap
        )
        if tstats.in_mesh:
            tstats.mesh_message_deliveries = min(tstats.mesh_message_deliveries + 1, tparams.MeshMessageDeliveriesCap)

    def _mark_duplicate_message_delivery(self, now: int, peer: PeerId, topic: str, validated: int | None) -> None:
        """A near-first delivery by a mesh peer counts towards P3: while the
        message was being validated, or within MeshMessageDeliveryWindow
        of its validation."""
        tstats = self._topic_stats(peer, topic)
        tparams = self.params.topic(topic)
        if tstats is None or tparams is None or not tstats.in_mesh:
            return
        if validated is not None and now - validated > round(tparams.MeshMessageDeliveryWindow * NS):
            return
        self._cached.pop(peer, None)
        tstats.mesh_message_deliveries = min(tstats.mesh_message_deliveries + 1, tparams.MeshMessageDeliveriesCap)

    def _mark_invalid_message_delivery(self, peer: PeerId, topic: str) -> None:
        tstats = self._topic_stats(peer, topic)
        if tstats is not None:
            self._cached.pop(peer, None)
            tstats.invalid_message_deliveries += 1

    # P7

    def add_penalty(self, peer: PeerId, count: int) -> None:
        stats = self.peer_stats.get(peer)
        if stats is not None:
            stats.behaviour_penalty += count
            self._cached.pop(peer, None)

    # Decay

    def refresh(self, now: int) -> None:
        """Parameter decay, once per DecayInterval: counters are multiplied
        by their decay factor and fall to 0 below DecayToZero; the time in
        mesh is brought up to date; retained scores past RetainScore are
        forgotten, the others do not decay."""
        to_zero = self.params.DecayToZero
        self._cached.clear()
        for peer in list(self.peer_stats):
            stats = self.peer_stats[peer]
            if not stats.connected:
                if now > stats.expire:
                    self._forget(peer)
                continue
            for topic, tstats in stats.topics.items():
                tparams = self.params.topic(topic)
                if tparams is None:
                    continue
                tstats.first_message_deliveries = _decayed(
                    tstats.first_message_deliveries, tparams.FirstMessageDeliveriesDecay, to_zero)
                tstats.mesh_message_deliveries = _decayed(
                    tstats.mesh_message_deliveries, tparams.MeshMessageDeliveriesDecay, to_zero)
                tstats.mesh_failure_penalty = _decayed(
                    tstats.mesh_failure_penalty, tparams.MeshFailurePenaltyDecay, to_zero)
                tstats.invalid_message_deliveries = _decayed(
                    tstats.invalid_message_deliveries, tparams.InvalidMessageDeliveriesDecay, to_zero)
                if tstats.in_mesh:
                    tstats.mesh_time = now - tstats.graft_time
                    if tstats.mesh_time > round(tparams.MeshMessageDeliveriesActivation * NS):
                        tstats.mesh_message_deliveries_active = True
            stats.behaviour_penalty = _decayed(stats.behaviour_penalty, self.params.BehaviourPenaltyDecay, to_zero)

    # The score function

    def score(self, peer: PeerId) -> float:
        return self.components(peer).score

    def components(self, peer: PeerId) -> ScoreComponents:
        cached = self._cached.get(peer)
        if cached is None:
            cached = self._cached[peer] = self._components(peer)
        return cached

    def _components(self, peer: PeerId) -> ScoreComponents:
        """Score(p) = TopicCap(sum of t_i * (w1 P1 + w2 P2 + w3 P3 + w3b P3b
        + w4 P4)) + w5 P5 + w6 P6 + w7 P7."""
        stats = self.peer_stats.get(peer)
        if stats is None:
            return ScoreComponents(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p = self.params
        score = p1 = p2 = p3 = p3b = p4 = 0.0
        for topic, tstats in stats.topics.items():
            tp = p.topic(topic)
            if tp is None:
                continue
            t1 = t2 = t3 = t3b = t4 = 0.0
            if tstats.in_mesh:
                quanta = float(tstats.mesh_time // round(tp.TimeInMeshQuantum * NS))
                t1 = min(quanta, tp.TimeInMeshCap) * tp.TimeInMeshWeight
            t2 = tstats.first_message_deliveries * tp.FirstMessageDeliveriesWeight
            if tstats.mesh_message_deliveries_active and tstats.mesh_message_deliveries < tp.MeshMessageDeliveriesThreshold:
                deficit = tp.MeshMessageDeliveriesThreshold - tstats.mesh_message_deliveries
                t3 = deficit * deficit * tp.MeshMessageDeliveriesWeight
            t3b = tstats.mesh_failure_penalty * tp.MeshFailurePenaltyWeight
            t4 = tstats.invalid_message_deliveries * tstats.invalid_message_deliveries * tp.InvalidMessageDeliveriesWeight
            topic_score = 0.0
            for term in (t1, t2, t3, t3b, t4):
                topic_score += term
            score += topic_score * tp.TopicWeight
            p1 += t1 * tp.TopicWeight
            p2 += t2 * tp.TopicWeight
            p3 += t3 * tp.TopicWeight
            p3b += t3b * tp.TopicWeight
            p4 += t4 * tp.TopicWeight
        if p.TopicScoreCap > 0 and score > p.TopicScoreCap:
            score = p.TopicScoreCap
        w5 = self.app_specific_score.get(peer, 0.0) * p.AppSpecificWeight
        w6 = self._ip_colocation_factor(stats) * p.IPColocationFactorWeight
        w7 = 0.0
        if stats.behaviour_penalty > p.BehaviourPenaltyThreshold:
            excess = stats.behaviour_penalty - p.BehaviourPenaltyThreshold
            w7 = excess * excess * p.BehaviourPenaltyWeight
        score += w5
        score += w6
        score += w7
        return ScoreComponents(score, p1, p2, p3, p3b, p4, w5, w6, w7)

    def _ip_colocation_factor(self, stats: PeerStats) -> float:
        """P6: the square of how many more peers than the threshold share an
        address with this peer, summed over its addresses."""
        factor = 0.0
        threshold = self.params.IPColocationFactorThreshold
        for ip in stats.ips:
            if self.params.whitelisted(ip):
                continue
            surplus = len(self.peer_ips.get(ip, ())) - threshold
            if surplus > 0:
                factor += surplus * surplus
        return factor


def _decayed(value: float, decay: float, to_zero: float) -> float:
    value *= decay
    return 0.0 if value < to_zero else value
