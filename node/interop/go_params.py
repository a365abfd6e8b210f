"""Our gossipsub parameters in go-libp2p-pubsub's words: the ONE mapping from
an experiment's `router_params` (the specs' names) to what a foreign router
is told in test-plans' `initGossipSub` instruction: `gossipSubParams` (go's
GossipSubParams JSON: names as go spells them, durations as integer
nanoseconds, go's time.Duration) and, for adapters that score, our
extensions `peerScoreParams` and `peerScoreThresholds` (go's PeerScoreParams
and PeerScoreThresholds JSON, same conventions; one TopicScoreParams per
topic of the node under `Topics`).

It lives in node/ because both sides use it: the orchestrator compiles
scripts with it (orchestrator/routers/interop_script.py) and our router's contract
entry point (node/interop/contract.py) reads an initGossipSub back with it.

Foreign routers (adapters and bare contract images) are told their protocol
parameters only this way, so the same file means the same mesh whatever
implementation runs it. Which of these names each foreign kind can take is
the kind's (orchestrator/routers/kinds.py); a parameter a kind cannot take is
refused by validation, never dropped here: every key this mapping is given
has a go name or is a score parameter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from node.engine.gossipsub import GossipSubParams
from node.engine.score_params import PeerScoreWeights, ScoreThresholds, TopicScoreParams

# our name -> go's GossipSubParams field
GO_NAMES: dict[str, str] = {
    "D": "D",
    "D_low": "Dlo",
    "D_high": "Dhi",
    "D_lazy": "Dlazy",
    "mcache_len": "HistoryLength",
    "mcache_gossip": "HistoryGossip",
    "heartbeat_initial_delay": "HeartbeatInitialDelay",
    "heartbeat_interval": "HeartbeatInterval",
    "fanout_ttl": "FanoutTTL",
    # v1.1
    "D_score": "Dscore",
    "D_out": "Dout",
    "GossipFactor": "GossipFactor",
    "GossipRetransmission": "GossipRetransmission",
    "PrunePeers": "PrunePeers",
    "PruneBackoff": "PruneBackoff",
    "UnsubscribeBackoff": "UnsubscribeBackoff",
    "OpportunisticGraftTicks": "OpportunisticGraftTicks",
    "OpportunisticGraftPeers": "OpportunisticGraftPeers",
    "GraftFloodThreshold": "GraftFloodThreshold",
    "MaxIHaveLength": "MaxIHaveLength",
    "MaxIHaveMessages": "MaxIHaveMessages",
    "IWantFollowupTime": "IWantFollowupTime",
    # v1.2
    "IDontWantMessageThreshold": "IDontWantMessageThreshold",
    "MaxIDontWantLength": "MaxIDontWantLength",
    "max_idontwant_messages": "MaxIDontWantMessages",
    "IDontWantMessageTTL": "IDontWantMessageTTL",
}
# go sets these with options (WithFloodPublish, WithPeerExchange), not in
# GossipSubParams: only an adapter that reads them from gossipSubParams
# under these names takes them (the rust-libp2p adapter's params.rs).
OPTION_NAMES: dict[str, str] = {"FloodPublish": "FloodPublish", "DoPX": "DoPX"}
# our names that differ from go's in the score parameters
SCORE_GO_NAMES: dict[str, str] = {"MeshMessageDeliveryWindow": "MeshMessageDeliveriesWindow"}
# ours in seconds, go's in nanoseconds
DURATIONS = frozenset({
    "heartbeat_initial_delay", "heartbeat_interval", "fanout_ttl", "PruneBackoff", "UnsubscribeBackoff",
    "GraftFloodThreshold", "IWantFollowupTime", "DecayInterval", "RetainScore", "TimeInMeshQuantum",
    "MeshMessageDeliveryWindow", "MeshMessageDeliveriesActivation",
})
NS_PER_S = 1_000_000_000


def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


THRESHOLD_NAMES = _names(ScoreThresholds)
PEER_SCORE_NAMES = _names(PeerScoreWeights)
TOPIC_SCORE_NAMES = _names(TopicScoreParams)
# every score parameter an experiment file can set
SCORE_NAMES = THRESHOLD_NAMES | PEER_SCORE_NAMES | TOPIC_SCORE_NAMES


def _go_value(ours: str, value: Any) -> Any:
    if ours in DURATIONS:
        return round(value * NS_PER_S)
    return value if isinstance(value, (bool, float)) else int(value)


def go_gossipsub_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A foreign node's `router_params` (our names, what its kind takes, filled
    in) -> gossipSubParams, for the names in `params` that go has. D_lazy
    unset means D, as in our engine (go's own default would be 6); D_score
    or D_out unset is left to the router's own default."""
    v10 = GossipSubParams(**{k: v for k, v in params.items() if k in _names(GossipSubParams)})
    full = {**params, **({"D_lazy": v10.d_lazy} if "D_lazy" in params else {})}
    out: dict[str, Any] = {}
    for ours, go in {**GO_NAMES, **OPTION_NAMES}.items():
        if full.get(ours) is not None:
            out[go] = _go_value(ours, full[ours])
    return out


def go_peer_score(params: Mapping[str, Any], topics: Sequence[str]) -> dict[str, Any]:
    """The score parameters in `params` -> {"peerScoreParams": ...,
    "peerScoreThresholds": ...} in go's names, the node's topic parameters
    under each of its `topics` (our files give one set for every topic).
    Empty when `params` has no score parameter (its kind does not score)."""
    if not SCORE_NAMES & set(params):
        return {}

    def go(names: frozenset[str]) -> dict[str, Any]:
        return {SCORE_GO_NAMES.get(k, k): _go_value(k, params[k]) for k in sorted(names)}

    return {"peerScoreParams": {**go(PEER_SCORE_NAMES), "Topics": {t: go(TOPIC_SCORE_NAMES) for t in topics}},
            "peerScoreThresholds": go(THRESHOLD_NAMES)}


def from_go(go: Mapping[str, Any], params: type = GossipSubParams) -> dict[str, Any]:
    """An initGossipSub's gossipSubParams -> our names of `params`' fields
    (the inverse of go_gossipsub_params); go names `params` has no field for
    are ignored, as an implementation ignores parameters it does not have."""
    fields = _names(params)
    ours = {g: o for o, g in {**GO_NAMES, **OPTION_NAMES}.items() if o in fields}
    out: dict[str, Any] = {}
    for name, value in go.items():
        if name in ours and value is not None:
            out[ours[name]] = value / NS_PER_S if ours[name] in DURATIONS else value
    return out
