"""The resolved experiment: every choice made and every seed drawn, so that
the simulator, the process backend and the Docker backend run exactly the same
thing. Times are seconds from the start of the workload clock (t=0 is when all
nodes are up), as floats; the runners convert to their own clocks.

Produced by `orchestrator.experiment.spec.load_experiment(path).resolve(seed)`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ChurnVerb = Literal[
    "kill", "stop", "start", "restart", "pause", "unpause",
    "disconnect", "reconnect", "leave", "join",
]


@dataclass(frozen=True)
class AdversarySpec:
    """A sybil's behaviours (docs/adversaries.md), by node name; `start`
    in workload seconds (0: from the beginning; later: covert until then)."""

    censor: bool = False
    censor_publishers: tuple[str, ...] = ()
    degrade: float | None = None  # the share of messages still forwarded
    eclipse: tuple[str, ...] = ()
    ihave_flood: int | None = None
    iwant_flood: int | None = None
    graft_during_backoff: bool = False
    bad_boy: bool = False
    invalid_messages: int | None = None  # forged messages per heartbeat
    start: float = 0.0


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
    placement: tuple[str, ...] = ()  # swarm placement constraints
    adversary: AdversarySpec | None = None  # None: an honest node
    app_specific_score: float = 0.0  # P5 every scoring router gives this node (the group's `app_specific_score`)
    connect_at: float | None = None  # workload time its edges to nodes that also wait open (the group's `connect_at`)
    host: str | None = None  # the first node of its pack of identities sharing one IP (`identities_per_host`); None: its own

    @property
    def host_name(self) -> str:
        """The host whose IP address this node's connections come from."""
        return self.host or self.name


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
    linger: float  # seconds after the last message; with linger_auto, the most to wait
    resources: Mapping[str, Any] = field(default_factory=dict)
    # `linger: auto`: stop as soon as the network is quiet after the last
    # message, but no later than `linger` seconds after it.
    linger_auto: bool = False
    strict_traces: bool = False  # a damaged trace file fails the run (analyze --strict)
    # Real backends run k times slower than written (node/dilation.py,
    # orchestrator/run/wallclock.py); the times here stay the experiment's.
    time_dilation: float = 1.0
    # the wire (docs/experiment-files.md, "Wire"): secure channel, message
    # signing policy and how message ids are computed
    security: str = "noise"  # noise | plaintext
    authenticity: str = "strict"  # strict | author | anonymous
    message_id: str = "from-seqno"  # from-seqno | first-8-bytes (big-endian u64)
    # seconds that validating a message of a topic takes, on every node
    # (test-plans' setTopicValidationDelay); topics not in it validate at once
    validation_delay: Mapping[str, float] = field(default_factory=dict)
    # (a, b) -> LinkParams for ANY pair, from the latency model; None: pairs
    # outside `links` get `default_link`. Not part of equality (it is a
    # function of the fields above and the seed).
    pair_link: Callable[[str, str], LinkParams] | None = field(default=None, compare=False, repr=False)

    def node(self, name: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def app_specific_scores(self, me: str) -> dict[str, float]:
        """P5 as node `me` rates the others: each node's group's
        `app_specific_score`, by node name (nodes without one: 0, left out)."""
        return {n.name: n.app_specific_score for n in self.nodes if n.app_specific_score and n.name != me}

    def neighbours(self) -> dict[str, list[str]]:
        """Each node's overlay neighbours, sorted."""
        out: dict[str, set[str]] = {n.name: set() for n in self.nodes}
        for a, b in self.edges:
            if a != b:
                out[a].add(b)
                out[b].add(a)
        return {name: sorted(peers) for name, peers in out.items()}

    def late_edges(self) -> dict[tuple[str, str], float]:
        """The overlay edges that open after the start, with the workload
        time they open at: those between two nodes that both wait
        (`connect_at`), at the earlier of their times, since either end
        dials. Every other edge opens at the start."""
        wait = {n.name: n.connect_at for n in self.nodes if n.connect_at is not None}
        if not wait:
            return {}
        return {(a, b): min(wait[a], wait[b]) for a, b in self.edges if a in wait and b in wait}

    def link(self, a: str, b: str) -> LinkParams:
        """The parameters of the a-b link (either order), for any pair: overlay
        edges from `links`, other pairs (nodes that connect later, e.g. fanout
        to a non-neighbour) from the latency model (`pair_link`: the same
        seeded per-pair draw, the same region matrix), else `default_link`."""
        key = (a, b) if a < b else (b, a)
        params = self.links.get(key)
        if params is not None:
            return params
        if self.pair_link is not None:
            return self.pair_link(*key)
        return self.default_link

    def end_time(self) -> float:
        """When the runners stop, in workload seconds: `duration`, or `linger`
        after the last publish if that is later."""
        last = max((p.at for p in self.publishes), default=0.0)
        return max(self.duration, last + self.linger)

    def digest(self) -> str:
        """A short hash of everything resolved (not the source path): equal
        digests mean the same nodes, seeds, overlay, links, workload, churn."""
        doc = {
            "name": self.name, "seed": self.seed,
            "nodes": [
                [n.name, n.group, n.router, sorted(n.params.items()), list(n.topics), n.seed,
                 n.region, n.uplink_bps, n.memory, n.cpus, list(n.placement),
                 *([repr(n.adversary)] if n.adversary is not None else []),
                 *([n.app_specific_score] if n.app_specific_score else []),
                 *([["connect_at", n.connect_at]] if n.connect_at is not None else []),
                 *([["host", n.host]] if n.host is not None else [])]
                for n in self.nodes
            ],
            "edges": [list(e) for e in self.edges],
            "links": [[a, b, p.latency_ms, p.jitter_ms, p.loss] for (a, b), p in sorted(self.links.items())],
            "default_link": [self.default_link.latency_ms, self.default_link.jitter_ms, self.default_link.loss],
            "publishes": [[p.seq, p.at, p.topic, p.size, p.publisher, list(p.via)] for p in self.publishes],
            "churn": [[c.at, c.action, list(c.nodes), c.topic, list(c.peers), c.source] for c in self.churn],
            "expectations": [e.text for e in self.expectations],
            "duration": self.duration, "linger": self.linger, "linger_auto": self.linger_auto,
            "strict_traces": self.strict_traces,
            "wire": [self.security, self.authenticity, self.message_id],
            "resources": sorted((str(k), repr(v)) for k, v in self.resources.items()),
        }
        if self.time_dilation != 1.0:
            doc["time_dilation"] = self.time_dilation
        if self.validation_delay:
            doc["validation_delay"] = sorted(self.validation_delay.items())
        text = json.dumps(doc, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
