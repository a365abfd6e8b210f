"""Router kinds by the names experiment files use, with their parameter classes,
so that one place maps `router: gossipsub` and its parameters to an engine,
and says what the orchestrator needs to know about each kind's mesh."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from node.engine.adversary import Behaviour, Sybil
from node.engine.api import NS, Router, protocol_order
from node.engine.authenticity import Authenticity
from node.engine.episub import EpisubParams, EpisubRouter
from node.engine.floodsub import FloodSubParams, FloodSubRouter
from node.engine.gossipsub import GossipSubParams, GossipSubRouter
from node.engine.gossipsub_config import GossipSubV11Params, GossipSubV12Params
from node.engine.gossipsub_v11 import GossipSubV11Router
from node.engine.gossipsub_v12 import GossipSubV12Router
from node.engine.randomsub import RandomSubParams, RandomSubRouter
from node.engine.simsub import SimSubParams, SimSubRouter
from node.wire.rpc import PeerId


@dataclass(frozen=True)
class EngineKind:
    """`mesh_low_key`: the parameter that is the mesh's low-water mark (None:
    the router keeps no mesh), and its default; `mesh_any_topic`: the router
    meshes with peers whatever their topics (simsub's single overlay);
    `scores_peers`: the router keeps peer scores (node/trace/scores.py);
    `traces_tree`: it emits the tree extension (node/trace/tree.py);
    `validation_delay`: it can take a per-topic validation delay."""

    name: str
    params: type
    build: Callable[..., Router]  # (peer_id, rng, params, auth=...)
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    mesh_low_key: str | None = None
    mesh_any_topic: bool = False
    scores_peers: bool = False  # records peer scores each heartbeat (gossipsub v1.1+)
    validation_delay: bool = True
    traces_tree: bool = False  # writes tree/<node>.csv (episub)

    @property
    def dials_on_send(self) -> bool:
        """The engine sends to peers it has no connection to (episub's views
        reach beyond its contacts): the runtime dials them, so its node is
        told every node's address and link."""
        return bool(getattr(self.build, "dials_on_send", False))

    @property
    def meshes(self) -> bool:
        return self.mesh_low_key is not None

    def mesh_low(self, values: Mapping[str, Any]) -> int:
        """How many mesh peers a node of this kind wants at least (0: no mesh)."""
        if self.mesh_low_key is None:
            return 0
        default = getattr(self.params(), self.mesh_low_key)
        return int(values.get(self.mesh_low_key, default))

    def make_params(self, values: Mapping[str, Any]) -> Any:
        """Parameters from a mapping; unknown names or bad values raise
        ValueError naming the parameter."""
        known = {f.name for f in dataclasses.fields(self.params)} - set(self.fixed)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown parameter {unknown[0]!r} for router {self.name} (known: {', '.join(sorted(known))})"
            )
        params = self.params(**{**values, **self.fixed})
        params.check()
        return params


ROUTERS: dict[str, EngineKind] = {
    "floodsub": EngineKind("floodsub", FloodSubParams, FloodSubRouter),
    "randomsub": EngineKind("randomsub", RandomSubParams, RandomSubRouter),
    "meshsub": EngineKind("meshsub", GossipSubParams, GossipSubRouter, {"gossip": False}, "D_low"),
    "gossipsub": EngineKind("gossipsub", GossipSubParams, GossipSubRouter, {"gossip": True}, "D_low"),
    "gossipsub-v1.1": EngineKind("gossipsub-v1.1", GossipSubV11Params, GossipSubV11Router, {"gossip": True}, "D_low",
                                 scores_peers=True),
    "gossipsub-v1.2": EngineKind("gossipsub-v1.2", GossipSubV12Params, GossipSubV12Router, {"gossip": True}, "D_low",
                                 scores_peers=True),
    "simsub": EngineKind("simsub", SimSubParams, SimSubRouter, mesh_low_key="N_low", mesh_any_topic=True,
                         validation_delay=False),
    "episub": EngineKind("episub", EpisubParams, EpisubRouter, validation_delay=False, traces_tree=True),
}


def engine_kind(name: str) -> EngineKind:
    """The registry's entry for `name`; ValueError naming the known ones."""
    try:
        return ROUTERS[name]
    except KeyError:
        raise ValueError(f"unknown router {name!r} (known: {', '.join(ROUTERS)})") from None


def make_router(
    name: str, peer_id: PeerId, seed: int, params: Mapping[str, Any] | object | None = None,
    auth: Authenticity = Authenticity(), behaviours: tuple[Behaviour, ...] = (),
    validation_delay: Mapping[str, float] | None = None,
) -> Router:
    """An engine of the named kind with its own RNG seeded by `seed` and the
    network's message authenticity `auth`; with `behaviours`, a sybil over
    that engine (which must keep a gossipsub mesh), drawing from its own RNG
    derived from `seed`. `params`: a mapping, or the kind's parameters as
    its `make_params` built them (frozen, so engines can share them: the
    simulator builds one for all nodes with the same). `validation_delay`:
    seconds per topic that validating a message takes (a kind that cannot
    delay refuses it)."""
    kind = engine_kind(name)
    delays = {t: round(s * NS) for t, s in (validation_delay or {}).items() if s > 0}
    if delays and not kind.validation_delay:
        raise ValueError(f"router {name} validates at once; it takes no validation delay")
    extra = {"validation_delay": delays} if delays else {}
    built = params if type(params) is kind.params else kind.make_params(params or {})  # type: ignore[arg-type]
    engine = kind.build(peer_id, random.Random(seed), built, auth=auth, **extra)
    if not behaviours:
        return engine
    if not isinstance(engine, GossipSubRouter):
        raise ValueError(f"a sybil runs a gossipsub engine, not {name}")
    return Sybil(engine, behaviours, random.Random(f"{seed}/sybil"))


def negotiate(ours: frozenset[str], theirs: frozenset[str], preferred: str) -> str | None:
    """The protocol two peers speak, as multistream-select settles it when we
    propose ours in `protocol_order`: the first they support."""
    for protocol in protocol_order(preferred, ours):
        if protocol in theirs:
            return protocol
    return None
