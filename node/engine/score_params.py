"""gossipsub v1.1's peer-score parameters ("Overview of New Parameters" in
libp2p/specs pubsub/gossipsub/gossipsub-v1.1.md), with the spec's names and
its constraints. Durations are in seconds.

Three groups, as in the spec's tables: the thresholds, the parameters that
apply to a peer as a whole (P5, P6, P7, decay, retention), and the
per-topic parameters (P1 to P4). A topic without parameters does not count
towards the score.

The spec gives no defaults for scoring; ours weigh nothing (every score
stays 0) so that scoring changes nothing until an experiment sets weights.
`DecayInterval` and `DecayToZero` take go-libp2p-pubsub's customary values
(1 s and 0.01).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def signed(default: float) -> Any:
    """A parameter that may be negative (thresholds and penalty weights);
    experiment files accept negative values only for these."""
    return field(default=default, metadata={"signed": True})


@dataclass(frozen=True)
class ScoreThresholds:
    """"Score Thresholds"; the spec's constraints are `check`'s."""

    GossipThreshold: float = signed(-10.0)
    PublishThreshold: float = signed(-50.0)
    GraylistThreshold: float = signed(-80.0)
    AcceptPXThreshold: float = 10.0
    OpportunisticGraftThreshold: float = 20.0

    def check(self) -> None:
        if self.GossipThreshold >= 0:
            raise ValueError(f"GossipThreshold must be < 0, got {self.GossipThreshold}")
        if self.PublishThreshold > self.GossipThreshold:
            raise ValueError(
                f"PublishThreshold must be <= GossipThreshold, got {self.PublishThreshold} > {self.GossipThreshold}"
            )
        if self.GraylistThreshold >= self.PublishThreshold:
            raise ValueError(
                f"GraylistThreshold must be < PublishThreshold, got {self.GraylistThreshold} >= {self.PublishThreshold}"
            )
        if self.AcceptPXThreshold < 0:
            raise ValueError(f"AcceptPXThreshold must be >= 0, got {self.AcceptPXThreshold}")
        if self.OpportunisticGraftThreshold < 0:
            raise ValueError(f"OpportunisticGraftThreshold must be >= 0, got {self.OpportunisticGraftThreshold}")


def _decay(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


@dataclass(frozen=True)
class TopicScoreParams:
    """Per-topic parameters, P1 to P4."""

    TopicWeight: float = 0.0
    TimeInMeshWeight: float = 0.0
    TimeInMeshQuantum: float = 1.0
    TimeInMeshCap: float = 0.0
    FirstMessageDeliveriesWeight: float = 0.0
    FirstMessageDeliveriesDecay: float = 1.0
    FirstMessageDeliveriesCap: float = 0.0
    MeshMessageDeliveriesWeight: float = signed(0.0)
    MeshMessageDeliveriesDecay: float = 1.0
    MeshMessageDeliveriesThreshold: float = 0.0
    MeshMessageDeliveriesCap: float = 0.0
    MeshMessageDeliveriesActivation: float = 0.0
    MeshMessageDeliveryWindow: float = 0.0
    MeshFailurePenaltyWeight: float = signed(0.0)
    MeshFailurePenaltyDecay: float = 1.0
    InvalidMessageDeliveriesWeight: float = signed(0.0)
    InvalidMessageDeliveriesDecay: float = 1.0

    def check(self) -> None:
        if self.TopicWeight < 0:
            raise ValueError(f"TopicWeight must not be negative, got {self.TopicWeight}")
        if self.TimeInMeshQuantum <= 0:
            raise ValueError(f"TimeInMeshQuantum must be positive, got {self.TimeInMeshQuantum}")
        if self.TimeInMeshWeight < 0 or self.TimeInMeshCap < 0:
            raise ValueError("TimeInMeshWeight and TimeInMeshCap must not be negative")
        if self.FirstMessageDeliveriesWeight < 0 or self.FirstMessageDeliveriesCap < 0:
            raise ValueError("FirstMessageDeliveriesWeight and FirstMessageDeliveriesCap must not be negative")
        if self.MeshMessageDeliveriesWeight > 0:
            raise ValueError(f"MeshMessageDeliveriesWeight must not be positive, got {self.MeshMessageDeliveriesWeight}")
        if self.MeshMessageDeliveriesThreshold < 0:
            raise ValueError("MeshMessageDeliveriesThreshold must not be negative")
        if self.MeshMessageDeliveriesCap < self.MeshMessageDeliveriesThreshold:
            raise ValueError(
                f"MeshMessageDeliveriesCap must be at least the delivery threshold, got "
                f"{self.MeshMessageDeliveriesCap} < {self.MeshMessageDeliveriesThreshold}"
            )
        if self.MeshMessageDeliveriesActivation < 0 or self.MeshMessageDeliveryWindow < 0:
            raise ValueError("MeshMessageDeliveriesActivation and MeshMessageDeliveryWindow must not be negative")
        if self.MeshFailurePenaltyWeight > 0:
            raise ValueError(f"MeshFailurePenaltyWeight must not be positive, got {self.MeshFailurePenaltyWeight}")
        if self.InvalidMessageDeliveriesWeight > 0:
            raise ValueError(
                f"InvalidMessageDeliveriesWeight must not be positive, got {self.InvalidMessageDeliveriesWeight}"
            )
        for name in ("FirstMessageDeliveriesDecay", "MeshMessageDeliveriesDecay", "MeshFailurePenaltyDecay",
                     "InvalidMessageDeliveriesDecay"):
            _decay(name, getattr(self, name))


@dataclass(frozen=True)
class PeerScoreWeights:
    """The parameters that apply to a peer as a whole: P5, P6, P7, the
    topic cap, decay and retention."""

    TopicScoreCap: float = 0.0
    AppSpecificWeight: float = 0.0
    IPColocationFactorWeight: float = signed(0.0)
    IPColocationFactorThreshold: int = 1
    BehaviourPenaltyWeight: float = signed(0.0)
    BehaviourPenaltyThreshold: float = 0.0
    BehaviourPenaltyDecay: float = 1.0
    DecayInterval: float = 1.0
    DecayToZero: float = 0.01
    RetainScore: float = 0.0

    def check(self) -> None:
        if self.TopicScoreCap < 0:
            raise ValueError(f"TopicScoreCap must not be negative, got {self.TopicScoreCap}")
        if self.AppSpecificWeight < 0:
            raise ValueError(f"AppSpecificWeight must not be negative, got {self.AppSpecificWeight}")
        if self.IPColocationFactorWeight > 0:
            raise ValueError(f"IPColocationFactorWeight must not be positive, got {self.IPColocationFactorWeight}")
        if self.IPColocationFactorThreshold < 1:
            raise ValueError(f"IPColocationFactorThreshold must be at least 1, got {self.IPColocationFactorThreshold}")
        if self.BehaviourPenaltyWeight > 0:
            raise ValueError(f"BehaviourPenaltyWeight must not be positive, got {self.BehaviourPenaltyWeight}")
        if self.BehaviourPenaltyThreshold < 0:
            raise ValueError("BehaviourPenaltyThreshold must not be negative")
        _decay("BehaviourPenaltyDecay", self.BehaviourPenaltyDecay)
        if self.DecayInterval <= 0:
            raise ValueError(f"DecayInterval must be positive, got {self.DecayInterval}")
        if not 0 < self.DecayToZero < 1:
            raise ValueError(f"DecayToZero must be in (0, 1), got {self.DecayToZero}")
        if self.RetainScore < 0:
            raise ValueError(f"RetainScore must not be negative, got {self.RetainScore}")


@dataclass(frozen=True)
class PeerScoreParams(PeerScoreWeights):
    """The peer-wide weights and the topics' parameters: `Topics` by topic
    name, `DefaultTopic` for any topic not named (None: unnamed topics do
    not count). `AppSpecificScore` is P5 by peer id (peers not listed: 0);
    `IPColocationFactorWhitelist` lists networks (CIDR) exempt from P6."""

    Topics: Mapping[str, TopicScoreParams] = field(default_factory=dict)
    DefaultTopic: TopicScoreParams | None = None
    AppSpecificScore: Mapping[bytes, float] = field(default_factory=dict)
    IPColocationFactorWhitelist: tuple[str, ...] = ()

    def topic(self, topic: str) -> TopicScoreParams | None:
        return self.Topics.get(topic, self.DefaultTopic)

    def whitelisted(self, ip: str) -> bool:
        address = ipaddress.ip_address(ip)
        return any(address in ipaddress.ip_network(net) for net in self.IPColocationFactorWhitelist)

    def check(self) -> None:
        super().check()
        for net in self.IPColocationFactorWhitelist:
            try:
                ipaddress.ip_network(net)
            except ValueError:
                raise ValueError(f"IPColocationFactorWhitelist: {net!r} is not a network like 10.0.0.0/8") from None
        for params in (*self.Topics.values(), *([self.DefaultTopic] if self.DefaultTopic else [])):
            params.check()
