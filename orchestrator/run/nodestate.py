"""What the controller believes about each node of a real testbed: its
lifecycle state (orchestrator/experiment/lifecycle.py) plus what it was started with.
Saved in the state store, so a later `testbed churn` or `down` in another
process picks up where `up` left off."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.experiment.lifecycle import NodeLife, Process


@dataclass
class NodeState:
    name: str
    router: str
    seed: int
    neighbours: list[str]
    mesh_low: int  # the mesh size readiness waits for (0: the router keeps no mesh)
    life: NodeLife
    incarnation: int = 0
    late: dict[str, float] = field(default_factory=dict)  # peers it dials after the start -> workload time
    waiting: list[str] = field(default_factory=list)  # neighbours whose late edge has not opened yet

    @property
    def reachable(self) -> bool:
        return self.life.reachable

    @property
    def topics(self) -> frozenset[str]:
        return self.life.topics

    def to_record(self) -> dict[str, Any]:
        return {"router": self.router, "seed": self.seed, "neighbours": self.neighbours,
                "mesh_low": self.mesh_low, "incarnation": self.incarnation, "late": self.late,
                "waiting": self.waiting, **self.life.to_record()}

    @classmethod
    def from_record(cls, name: str, rec: dict[str, Any]) -> NodeState:
        return cls(
            name, rec.get("router", ""), int(rec.get("seed", 0)), list(rec.get("neighbours", [])),
            int(rec.get("mesh_low", 0)), NodeLife.from_record(rec), int(rec.get("incarnation", 0)),
            {str(p): float(t) for p, t in (rec.get("late") or {}).items()}, list(rec.get("waiting") or []),
        )

    def shown_state(self) -> str:
        """The state `testbed status` shows."""
        if self.life.process is Process.RUNNING and self.life.cut_all:
            return "isolated"
        if self.life.process is Process.RUNNING and self.life.cut:
            return "partitioned"
        return self.life.process.value
