"""One simulated node as the simulator keeps it (its engine, process state,
connections, uplink queue) and one end of a connection, and how the nodes
are made from the resolved experiment: identities, neighbours, the wire's
authenticity, the host's IP address (identities packed on one host share
it, as P6 counts) and, for a sybil, its behaviours."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from node.engine.adversary import Behaviour
from node.engine.api import Router
from node.engine.registry import engine_kind
from node.engine.authenticity import Authenticity
from node.engine.registry import ROUTERS
from node.wire.rpc import PeerId
from orchestrator.experiment.model import NodeSpec, ResolvedExperiment
from orchestrator.experiment.lifecycle import NodeLife, Process
from orchestrator.routers.peers import authenticity_for, node_identities
from orchestrator.routers.sybils import sybil_behaviours


@dataclass(slots=True)
class Conn:
    """One end of a connection, as its node sees it: open until the node
    closes it or notices the other end closed. Both ends share an epoch, so an
    RPC that arrives after the connection was replaced is recognised."""

    epoch: int
    peer: SimNode
    latency: int
    jitter: int
    loss: float
    last_arrival: int = 0  # of what this end sent: links are FIFO


@dataclass
class SimNode:
    name: str
    peer_id: PeerId
    router: str
    params: object  # the router kind's parameters, one object for all nodes with the same
    seed: int
    life: NodeLife  # process state, topics, partitions: orchestrator/experiment/lifecycle.py
    neighbours: tuple[str, ...]
    uplink_bps: int | None
    auth: Authenticity
    behaviours: tuple[Behaviour, ...]  # a sybil's (orchestrator/routers/sybils.py); none: honest
    app_scores: dict[PeerId, float]  # P5 its engine gives its peers (a scoring honest engine only)
    address: str  # its host's IP, which its peers' engines see (P6)
    engine: Router | None = None
    incarnation: int = 0
    uplink_free_at: int = 0
    paused_inbox: list[Callable[[], None]] = field(default_factory=list)
    heartbeat_due: bool = False
    conns: dict[PeerId, Conn] = field(default_factory=dict)
    index: int = 0  # its place in the experiment's node order (EventCounts)
    traced: bool = True  # its trace is kept (orchestrator/sim/trace_level.py)

    @property
    def paused(self) -> bool:
        return self.life.process is Process.PAUSED


def _app_scores(resolved: ResolvedExperiment, n: NodeSpec, peer_ids: dict[str, PeerId]) -> dict[PeerId, float]:
    """P5 as node n's engine rates its peers: only an honest engine that scores takes them."""
    if n.adversary is not None or not ROUTERS[n.router].scores_peers:
        return {}
    return {peer_ids[name]: value for name, value in resolved.app_specific_scores(n.name).items()}


def host_addresses(resolved: ResolvedExperiment) -> dict[str, str]:
    """Every host's IP, by host name: 10.0.0.1 on, in node order."""
    hosts = dict.fromkeys(n.host_name for n in resolved.nodes)
    return {host: str(ipaddress.IPv4Address(0x0A000001 + i)) for i, host in enumerate(hosts)}


def sim_nodes(resolved: ResolvedExperiment, origin: int) -> dict[str, SimNode]:
    """Every node, stopped, by name; `origin`: the engine time (ns) of
    workload t=0."""
    neighbours = resolved.neighbours()
    identities = node_identities(resolved)
    peer_ids = {name: identity.peer_id for name, identity in identities.items()}
    addresses = host_addresses(resolved)
    shared: dict[tuple, Any] = {}  # one object for all nodes with the same parameters, and topics

    def one(key: tuple, make: Callable[[], Any]) -> Any:
        if key not in shared:
            shared[key] = make()
        return shared[key]

    def params(n: NodeSpec) -> object:
        return one(("params", n.router, repr(sorted(n.params.items()))),
                   lambda: engine_kind(n.router).make_params(n.params))

    return {
        n.name: SimNode(
            n.name, identities[n.name].peer_id, n.router, params(n),
            n.seed, NodeLife(Process.STOPPED, one(("topics", *sorted(n.topics)), lambda n=n: frozenset(n.topics))),
            tuple(neighbours[n.name]), n.uplink_bps,
            authenticity_for(resolved, identities[n.name], modelled=True),
            sybil_behaviours(n.adversary, peer_ids, origin),
            _app_scores(resolved, n, peer_ids), addresses[n.host_name],
        )
        for n in resolved.nodes
    }
