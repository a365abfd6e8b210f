"""The lifecycle table's calls on simulated nodes: the simulator's Runner
(orchestrator/experiment/lifecycle.py). What each call does to an engine
and its connections is the simulator's; this is only the mapping, so a
verb goes through the same steps as on a real backend."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.sim.simulator import Simulator


@dataclass(frozen=True)
class SimRunner:
    sim: Simulator

    def kill(self, node: str) -> None:
        self.sim._stop(self.sim.nodes[node], graceful=False)

    def stop(self, node: str) -> None:
        self.sim._stop(self.sim.nodes[node], graceful=True)

    def start(self, node: str) -> None:
        self.sim._start(self.sim.nodes[node], self.sim.now)

    def pause(self, node: str) -> None:
        """Nothing to do now: a paused node is one whose life says so, and
        its inputs wait for the resume."""

    def resume(self, node: str) -> None:
        self.sim._unpause(self.sim.nodes[node])

    def disconnect(self, node: str, peers: Collection[str] | None) -> None:
        self.sim._partition(self.sim.nodes[node], set(peers) if peers else None)

    def reconnect(self, node: str, peers: Collection[str] | None) -> None:
        self.sim._dial_neighbours(self.sim.nodes[node], set(peers) if peers else None)

    def subscribe(self, node: str, topic: str) -> None:
        sim_node = self.sim.nodes[node]
        assert sim_node.engine is not None
        self.sim._emit(sim_node, sim_node.engine.join(self.sim.now, topic))

    def unsubscribe(self, node: str, topic: str) -> None:
        sim_node = self.sim.nodes[node]
        assert sim_node.engine is not None
        self.sim._emit(sim_node, sim_node.engine.leave(self.sim.now, topic))
