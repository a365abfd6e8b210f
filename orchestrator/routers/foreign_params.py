"""What each foreign router kind can be told: the parameters (the specs'
names, those of our gossipsub v1.2) that reach it through node/interop/go_params.py,
and the constraints of its implementation on top of the spec's.

A kind takes a parameter only where its contract or adapter carries it to
the router: a bare contract image what test-plans' initGossipSub carries
(go's GossipSubParams: no score parameters, no FloodPublish or DoPX, which go
sets by options); the rust-libp2p adapter what its params.rs and score.rs map
(rust-libp2p 0.57's gossipsub has no MaxIHaveLength, MaxIDontWantLength,
MaxIDontWantMessages or IDontWantMessageTTL setting); the py-libp2p adapter
what its script.py maps (py-libp2p 0.8.1 fixes D_lazy at 6 and GossipFactor
at 0.25; its scoring is not go's; it speaks /meshsub/1.1.0 here, so no
IDONTWANT reaches it and the v1.2 settings mean nothing to it). Everything else a kind is run with at a
fixed value, and a file that sets it is refused (orchestrator/experiment/check.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from node.engine.gossipsub_config import GossipSubV12Params
from node.interop.go_params import GO_NAMES, OPTION_NAMES, SCORE_NAMES

# go's GossipSubParams, as far as we have parameters for it
CONTRACT_TAKES = frozenset(GO_NAMES)
RUST_TAKES = (CONTRACT_TAKES - {"MaxIHaveLength", "MaxIDontWantLength", "max_idontwant_messages",
                                "IDontWantMessageTTL"}) | frozenset(OPTION_NAMES) | SCORE_NAMES
PY_TAKES = frozenset({"D", "D_low", "D_high", "mcache_len", "mcache_gossip", "heartbeat_initial_delay",
                      "heartbeat_interval", "fanout_ttl", "PruneBackoff", "UnsubscribeBackoff", "PrunePeers",
                      "GraftFloodThreshold", "DoPX"})
# what py-libp2p 0.8.1 runs with and cannot be told otherwise (adapters/py-libp2p/script.py FIXED)
PY_FIXED = {"D_lazy": 6, "GossipFactor": 0.25}


@dataclass(frozen=True)
class ForeignParams(GossipSubV12Params):
    """gossipsub v1.2's parameters as a foreign router is given them. D_score
    and D_out unset (None): the router's own default, which its own
    validation fits to D and D_low (go's is 2 and 4 whatever D is)."""

    D_score: int | None = None  # type: ignore[assignment]
    D_out: int | None = None  # type: ignore[assignment]

    def check_mesh_quotas(self) -> None:
        if self.D_out is not None and (not 0 <= self.D_out < self.D_low or self.D_out > self.D // 2):
            raise ValueError(
                f"D_out must be below D_low and at most D/2, got D_out={self.D_out}, D_low={self.D_low}, D={self.D}"
            )
        if self.D_score is not None and not 0 <= self.D_score <= self.D:
            raise ValueError(f"D_score must be between 0 and D, got D_score={self.D_score}, D={self.D}")


def _open_unit(name: str, value: float, weight: str) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1) for rust-libp2p when {weight} is not 0, got {value}")


@dataclass(frozen=True)
class RustLibp2pParams(ForeignParams):
    """rust-libp2p's PeerScoreParams/TopicScoreParams validation, beyond the
    spec's: a weighted term needs a decay in (0, 1) and a positive cap, mesh
    deliveries a positive threshold and an activation of at least 1 s, and
    the decay interval is at least 1 s. (rust-libp2p also wants the P4 decay
    in (0, 1) when P4 weighs 0; its adapter's score.rs gives it one then.)"""

    def check(self) -> None:
        super().check()
        if self.DecayInterval < 1:
            raise ValueError(f"DecayInterval must be at least 1 s for rust-libp2p, got {self.DecayInterval}")
        weighted = {
            "TimeInMeshWeight": ((), ("TimeInMeshCap",)),
            "FirstMessageDeliveriesWeight": (("FirstMessageDeliveriesDecay",), ("FirstMessageDeliveriesCap",)),
            "MeshMessageDeliveriesWeight": (("MeshMessageDeliveriesDecay",),
                                            ("MeshMessageDeliveriesCap", "MeshMessageDeliveriesThreshold")),
            "MeshFailurePenaltyWeight": (("MeshFailurePenaltyDecay",), ()),
            "InvalidMessageDeliveriesWeight": (("InvalidMessageDeliveriesDecay",), ()),
            "BehaviourPenaltyWeight": (("BehaviourPenaltyDecay",), ()),
        }
        for weight, (decays, positives) in weighted.items():
            if getattr(self, weight) == 0:
                continue
            for name in decays:
                _open_unit(name, getattr(self, name), weight)
            for name in positives:
                if getattr(self, name) <= 0:
                    raise ValueError(f"{name} must be positive for rust-libp2p when {weight} is not 0")
        if self.MeshMessageDeliveriesWeight != 0 and self.MeshMessageDeliveriesActivation < 1:
            raise ValueError("MeshMessageDeliveriesActivation must be at least 1 s for rust-libp2p when "
                             "MeshMessageDeliveriesWeight is not 0")
