"""The resolved experiment: every choice made and every seed drawn, so that
the simulator, the process backend and the Docker backend run exactly the same
thing. Times are seconds from the start of the workload clock (t=0 is when all
nodes are up), as floats; the runners convert to their own clocks.

Produced by `orchestrator.experiment.spec.load_experiment(path).resolve(seed)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ChurnVerb = Literal[
    "kill", "stop", "start", "restart", "pause", "unpause",
    "disconnect", "reconnect", "leave", "join",
]


@dataclass(frozen=True)
class NodeSpec:
    name: str
    group: str
    router: str
    params: Mapping[str, Any]
    topics: tuple[str, ...]
    seed: int
    region: str | None = None
    uplink_bps: int | None = None
    memory: str | None = None
    cpus: float | None = None


@dataclass(frozen=True)
class LinkParams:
    """One-way parameters of the link between two nodes (symmetric)."""

    latency_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0


@dataclass(frozen=True)
class Publish:
    """One workload message. `publisher` set: that node publishes it as its own
    (via == (publisher,)). `publisher` None: the reference simulator's
    injection, one message handed to every node in `via`."""

    seq: int
    at: float
    topic: str
    size: int
    publisher: str | None
    via: tuple[str, ...]


@dataclass(frozen=True)
class ChurnAction:
    """One concrete action at one time on concrete nodes. `peers` narrows
    disconnect/reconnect to a set (empty: everyone); `topic` is for leave/join.
    A timeline entry with `for` resolves to the action and its undo."""

    at: float
    action: ChurnVerb
    nodes: tuple[str, ...]
    topic: str | None = None
    peers: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Expectation:
    metric: str
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float
    text: str


@dataclass(frozen=True)
class ResolvedExperiment:
    name: str
    source: str
    seed: int
    nodes: tuple[NodeSpec, ...]
    edges: tuple[tuple[str, str], ...]
    links: Mapping[tuple[str, str], LinkParams]
    default_link: LinkParams
    publishes: tuple[Publish, ...]
    churn: tuple[ChurnAction, ...]
    expectations: tuple[Expectation, ...]
    duration: float
    linger: float
    resources: Mapping[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def link(self, a: str, b: str) -> LinkParams:
        """The parameters of the a-b link (either order); pairs not listed
        (nodes that connect later, e.g. fanout to a non-neighbour) get
        `default_link` unless the latency model defines every pair."""
        key = (a, b) if a < b else (b, a)
        return self.links.get(key, self.default_link)
