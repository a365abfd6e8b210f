"""Our gossipsub parameters in go-libp2p-pubsub's words: the ONE mapping from
an experiment's `router_params` to the `gossipSubParams` of test-plans'
`initGossipSub` instruction (go's GossipSubParams JSON: names as go spells
them, durations as integer nanoseconds, go's time.Duration).

It lives in node/ because both sides use it: the orchestrator compiles
scripts with it (orchestrator/routers/interop_script.py) and our router's contract
entry point (node/interop/contract.py) reads an initGossipSub back with it.

Foreign routers (adapters and bare contract images) are told their protocol
parameters only this way, so the same file means the same mesh whatever
implementation runs it. A parameter with no counterpart in go's
GossipSubParams cannot be given to a foreign router (check.py refuses it); it
stays at the engine's default, which is go's own where go has one elsewhere
(seen_ttl: go's WithSeenMessagesTTL default, 2 minutes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from node.engine.gossipsub import GossipSubParams

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
}
# ours in seconds, go's in nanoseconds
DURATIONS = frozenset({"heartbeat_initial_delay", "heartbeat_interval", "fanout_ttl"})
NS_PER_S = 1_000_000_000


def unmapped_defaults() -> dict[str, Any]:
    """The GossipSubParams fields go has no name for, at their defaults: what a
    foreign router is run with and cannot be told otherwise."""
    defaults = GossipSubParams()
    return {f.name: getattr(defaults, f.name) for f in dataclasses.fields(GossipSubParams) if f.name not in GO_NAMES}


def go_gossipsub_params(params: Mapping[str, Any]) -> dict[str, int]:
    """`router_params` (our names, every one filled in) -> go's names. D_lazy
    unset means D, as in our engine; go's own default would be 6."""
    full = GossipSubParams(**{k: v for k, v in params.items() if k in {f.name for f in dataclasses.fields(GossipSubParams)}})
    out: dict[str, int] = {}
    for ours, go in GO_NAMES.items():
        value = full.d_lazy if ours == "D_lazy" else getattr(full, ours)
        out[go] = round(value * NS_PER_S) if ours in DURATIONS else int(value)
    return out


def from_go(go: Mapping[str, Any]) -> dict[str, Any]:
    """An initGossipSub's gossipSubParams -> our names (the inverse of
    go_gossipsub_params); go names we have no parameter for are ignored, as
    an implementation ignores parameters it does not have."""
    ours = {g: o for o, g in GO_NAMES.items()}
    out: dict[str, Any] = {}
    for name, value in go.items():
        if name in ours and value is not None:
            out[ours[name]] = value / NS_PER_S if ours[name] in DURATIONS else int(value)
    return out
