"""The parameters of gossipsub v1.1 and v1.2, flat, with the specs' names, so
that an experiment file sets any of them under `router_params`.

v1.1 adds to v1.0's parameters the router parameters of the spec's
"Overview of New Parameters" (PruneBackoff, UnsubscribeBackoff,
FloodPublish, GossipFactor, D_score, D_out), the score thresholds, the
peer-wide score weights and one set of topic score parameters that applies
to every topic the node scores. Parameters the spec uses without naming
take go-libp2p-pubsub's names and defaults (PrunePeers, DoPX,
GossipRetransmission, MaxIHaveLength, MaxIHaveMessages, IWantFollowupTime,
OpportunisticGraftTicks, OpportunisticGraftPeers, GraftFloodThreshold).
v1.2 adds `max_idontwant_messages` (the spec's name) and go's
IDontWantMessageThreshold, MaxIDontWantLength and IDontWantMessageTTL.
Durations are in seconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from node.engine.gossipsub import GossipSubParams
from node.engine.score_params import PeerScoreParams, PeerScoreWeights, ScoreThresholds, TopicScoreParams


@dataclass(frozen=True)
class GossipSubV11Params(GossipSubParams, ScoreThresholds, PeerScoreWeights, TopicScoreParams):
    PruneBackoff: float = 60.0
    UnsubscribeBackoff: float = 10.0
    FloodPublish: bool = True
    GossipFactor: float = 0.25
    D_score: int = 4
    D_out: int = 2
    PrunePeers: int = 16
    DoPX: bool = False
    GossipRetransmission: int = 3
    MaxIHaveLength: int = 5000
    MaxIHaveMessages: int = 10
    IWantFollowupTime: float = 3.0
    OpportunisticGraftTicks: int = 60
    OpportunisticGraftPeers: int = 2
    GraftFloodThreshold: float = 10.0

    def check(self) -> None:
        GossipSubParams.check(self)
        ScoreThresholds.check(self)
        PeerScoreWeights.check(self)
        TopicScoreParams.check(self)
        self.check_mesh_quotas()
        if not 0.0 <= self.GossipFactor <= 1.0:
            raise ValueError(f"GossipFactor must be in [0.0, 1.0], got {self.GossipFactor}")
        for name in ("PruneBackoff", "UnsubscribeBackoff", "IWantFollowupTime", "GraftFloodThreshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        for name in ("PrunePeers", "GossipRetransmission", "MaxIHaveLength", "MaxIHaveMessages",
                     "OpportunisticGraftPeers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.OpportunisticGraftTicks < 1:
            raise ValueError(f"OpportunisticGraftTicks must be at least 1, got {self.OpportunisticGraftTicks}")

    def check_mesh_quotas(self) -> None:
        """D_out and D_score against D_low and D ("Outbound Mesh Quotas")."""
        if not 0 <= self.D_out < self.D_low or self.D_out > self.D // 2:
            raise ValueError(
                f"D_out must be below D_low and at most D/2, got D_out={self.D_out}, D_low={self.D_low}, D={self.D}"
            )
        if not 0 <= self.D_score <= self.D:
            raise ValueError(f"D_score must be between 0 and D, got D_score={self.D_score}, D={self.D}")

    def thresholds(self) -> ScoreThresholds:
        return ScoreThresholds(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ScoreThresholds)})

    def peer_score_params(self) -> PeerScoreParams:
        """Every topic is scored with this node's topic parameters."""
        weights = {f.name: getattr(self, f.name) for f in dataclasses.fields(PeerScoreWeights)}
        topic = TopicScoreParams(**{f.name: getattr(self, f.name) for f in dataclasses.fields(TopicScoreParams)})
        return PeerScoreParams(**weights, DefaultTopic=topic)


@dataclass(frozen=True)
class GossipSubV12Params(GossipSubV11Params):
    max_idontwant_messages: int = 1000
    IDontWantMessageThreshold: int = 1024
    MaxIDontWantLength: int = 10
    IDontWantMessageTTL: int = 3

    def check(self) -> None:
        super().check()
        for name in ("max_idontwant_messages", "IDontWantMessageThreshold", "MaxIDontWantLength"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.IDontWantMessageTTL < 1:
            raise ValueError(f"IDontWantMessageTTL must be at least 1 heartbeat, got {self.IDontWantMessageTTL}")
