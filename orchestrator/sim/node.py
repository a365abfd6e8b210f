"""One simulated node as the simulator keeps it (its engine, process state,
connections, uplink queue) and one end of a connection, and how the nodes
are made from the resolved experiment: identities, neighbours, the wire's
authenticity and, for a sybil, its behaviours."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from node.engine.adversary import Behaviour
from node.engine.api import Router
from node.engine.authenticity import Authenticity
from node.wire.rpc import PeerId
from orchestrator.experiment.model import ResolvedExperiment
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
    params: dict
    seed: int
    life: NodeLife  # process state, topics, partitions: orchestrator/experiment/lifecycle.py
    neighbours: tuple[str, ...]
    uplink_bps: int | None
    auth: Authenticity
    behaviours: tuple[Behaviour, ...]  # a sybil's (orchestrator/routers/sybils.py); none: honest
    engine: Router | None = None
    incarnation: int = 0
    uplink_free_at: int = 0
    paused_inbox: list[Callable[[], None]] = field(default_factory=list)
    heartbeat_due: bool = False
    conns: dict[PeerId, Conn] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        return self.life.process is Process.PAUSED


def sim_nodes(resolved: ResolvedExperiment, origin: int) -> dict[str, SimNode]:
    """Every node, stopped, by name; `origin`: the engine time (ns) of
    workload t=0."""
    neighbours = resolved.neighbours()
    identities = node_identities(resolved)
    peer_ids = {name: identity.peer_id for name, identity in identities.items()}
    return {
        n.name: SimNode(
            n.name, identities[n.name].peer_id, n.router, dict(n.params), n.seed,
            NodeLife(Process.STOPPED, frozenset(n.topics)),
            tuple(neighbours[n.name]), n.uplink_bps,
            authenticity_for(resolved, identities[n.name], modelled=True),
            sybil_behaviours(n.adversary, peer_ids, origin),
        )
        for n in resolved.nodes
    }
