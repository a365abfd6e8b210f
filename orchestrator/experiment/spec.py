"""Experiment files: load a YAML file, check every field, and keep the result
as an `Experiment` that `resolve(seed)` turns into the fully concrete
`ResolvedExperiment` every backend runs (resolution lives in resolve.py).

The format is documented in docs/experiment-files.md; `experiment_json_schema()`
(schema.py) describes the same keys for editors. Every problem raises ONE
`InputError` reading `file:line: field.path: what was expected`; unknown keys are
errors, so a typo never silently falls back to a default.

Node names are fixed at load time (no randomness): a file with one group names
its nodes n0, n1, ... n<count-1>; with several groups, `<group>-0`,
`<group>-1`, ...; a group's `prefix` overrides either rule.

A file may declare `variants:` (name -> router/router_params/name/expectations
overrides): `Experiment.variants()` gives one complete `Experiment` per variant,
sharing everything else (overlay, links, workload, churn, node names and seeds),
so the routers are compared on an identical set-up.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.engine.registry import ROUTERS
from orchestrator.errors import InputError
from orchestrator.experiment.model import ChurnVerb, Expectation, ResolvedExperiment
from orchestrator.experiment.yamlsrc import Path_, Source, load_yaml, parse_yaml
from orchestrator.links import parse_rate

__all__ = [
    "Experiment", "Group", "Selector", "Overlay", "Latency", "Links", "Workload",
    "TimelineEntry", "Distribution", "Steady", "Churn",
    "load_experiment", "parse_experiment", "resolved_to_yaml", "experiment_json_schema",
]

DEFAULT_SEED = 1
DEFAULT_LINGER = 5.0
MAX_MESSAGE_SIZE = 1 << 20  # the wire's frame limit (node/codec.py)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
METRIC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
EXPECTATION_RE = re.compile(
    r"^\s*(?P<metric>\S+?)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$"
)
TIME_RE = re.compile(r"^\s*(?P<num>\d+(\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|min|h)?\s*$")
TIME_UNITS = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
SIZE_RE = re.compile(r"^\s*(?P<num>\d+)\s*(?P<unit>b|kb|kib|mb|mib)?\s*$", re.IGNORECASE)
SIZE_UNITS = {None: 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 10**6, "mib": 2**20}
MEMORY_RE = re.compile(r"^\d+(\.\d+)?[bkmg]?$", re.IGNORECASE)

VERBS: tuple[str, ...] = typing.get_args(ChurnVerb)
UNDO: dict[str, str] = {
    "kill": "start", "stop": "start", "pause": "unpause", "disconnect": "reconnect", "leave": "join",
}
STEADY_ACTIONS = ("kill", "stop", "pause", "disconnect")
OVERLAY_TYPES = ("random", "random_regular", "explicit", "full")
LATENCY_MODELS = ("constant", "uniform", "regions")
DISTRIBUTIONS = ("exponential", "weibull")

# The keys each mapping accepts (schema.py describes the same ones).
TOP_KEYS = (
    "name", "description", "seed", "nodes", "groups", "overlay", "links", "workload",
    "churn", "expectations", "duration", "linger", "resources", "variants",
)
GROUP_KEYS = ("name", "count", "router", "router_params", "topics", "prefix", "region", "uplink", "resources")
RESOURCE_KEYS = ("memory", "cpus")
OVERLAY_KEYS = ("type", "degree", "edges", "connected")
LINKS_KEYS = ("latency", "jitter_ms", "loss", "uplink")
LATENCY_KEYS = ("model", "ms", "min_ms", "max_ms", "matrix")
WORKLOAD_KEYS = ("topic", "messages", "interval", "size", "start", "publishers", "inject", "order")
SELECTOR_KEYS = ("nodes", "count", "percent", "group", "all")
CHURN_KEYS = ("timeline", "steady")
ENTRY_KEYS = ("at", "every", "from", "until", "action", "select", "topic", "peers", "for")
STEADY_KEYS = ("fraction", "action", "session", "downtime", "select", "from", "until")
DIST_KEYS = ("distribution", "mean", "shape", "scale", "min")
VARIANT_KEYS = ("name", "router", "router_params", "groups", "expectations")
VARIANT_GROUP_KEYS = ("router", "router_params")
VARIANT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


# --------------------------------------------------------------------------
# The parsed experiment


@dataclass(frozen=True)
class Selector:
    """Which nodes: exactly one of `nodes` (names), `count`, `percent`, `all`,
    optionally narrowed to a `group` (a group alone means all of it)."""

    nodes: tuple[str, ...] = ()
    count: int | None = None
    percent: float | None = None
    group: str | None = None
    all: bool = False
    path: Path_ = field(default=(), compare=False)

    @property
    def named(self) -> bool:
        return bool(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        if self.nodes:
            return {"nodes": list(self.nodes)}
        out: dict[str, Any] = {}
        if self.count is not None:
            out["count"] = self.count
        if self.percent is not None:
            out["percent"] = self.percent
        if self.all:
            out["all"] = True
        if self.group is not None:
            out["group"] = self.group
        return out

    def describe(self) -> str:
        if self.nodes:
            return ", ".join(self.nodes)
        scope = f"group {self.group}" if self.group else "all nodes"
        if self.count is not None:
            return f"{self.count} of {scope}"
        if self.percent is not None:
            return f"{self.percent:g}% of {scope}"
        return scope


@dataclass(frozen=True)
class Group:
    name: str
    count: int
    router: str
    router_params: dict[str, Any]  # every parameter, defaults filled in
    topics: tuple[str, ...]
    prefix: str
    regions: tuple[str, ...] = ()  # nodes assigned round-robin
    uplink_bps: int | None = None
    memory: str | None = None
    cpus: float | None = None
    path: Path_ = field(default=(), compare=False)

    def node_names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(self.count)]


@dataclass(frozen=True)
class Overlay:
    type: str
    degree: int | None = None
    edges: tuple[tuple[str, str], ...] = ()
    connected: bool = True
    path: Path_ = field(default=(), compare=False)


@dataclass(frozen=True)
class Latency:
    model: str
    ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    matrix: dict[tuple[str, str], float] = field(default_factory=dict)  # (r1, r2) with r1 <= r2
    path: Path_ = field(default=(), compare=False)


@dataclass(frozen=True)
class Links:
    latency: Latency
    jitter_ms: float = 0.0
    loss: float = 0.0
    uplink_bps: int | None = None


@dataclass(frozen=True)
class Workload:
    topic: str
    messages: int
    interval: float
    size: int
    start: float
    publishers: Selector | None  # None: one random subscriber of the topic
    inject: int | None  # k: injection mode, each message handed to k random nodes
    order: str  # round_robin | random
    path: Path_ = field(default=(), compare=False)

    def times(self) -> list[float]:
        return [round(self.start + i * self.interval, 9) for i in range(self.messages)]


@dataclass(frozen=True)
class TimelineEntry:
    action: str
    select: Selector
    at: float | None = None
    every: float | None = None
    start: float | None = None  # `from`
    until: float | None = None
    topic: str | None = None
    peers: Selector | None = None
    for_: float | None = None
    path: Path_ = field(default=(), compare=False)

    def times(self) -> list[float]:
        if self.at is not None:
            return [self.at]
        assert self.every is not None and self.start is not None and self.until is not None
        out = []
        i = 0
        while True:
            t = round(self.start + i * self.every, 9)
            if t >= self.until:
                return out
            out.append(t)
            i += 1


@dataclass(frozen=True)
class Distribution:
    """Session-time distribution in seconds. exponential: `mean`. weibull:
    `shape` k and `scale` lambda (mean = scale * Gamma(1 + 1/k)). Draws below
    `min` are raised to `min`."""

    distribution: str
    mean: float | None = None
    shape: float | None = None
    scale: float | None = None
    min: float = 0.0

    def draw(self, rng: Any) -> float:
        if self.distribution == "exponential":
            assert self.mean is not None
            value = rng.expovariate(1.0 / self.mean)
        else:
            assert self.shape is not None and self.scale is not None
            value = rng.weibullvariate(self.scale, self.shape)
        return max(value, self.min)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"distribution": self.distribution}
        if self.distribution == "exponential":
            out["mean"] = self.mean
        else:
            out["shape"] = self.shape
            out["scale"] = self.scale
        if self.min:
            out["min"] = self.min
        return out


@dataclass(frozen=True)
class Steady:
    fraction: float
    action: str
    session: Distribution
    downtime: Distribution
    select: Selector | None = None
    start: float = 0.0
    until: float | None = None
    path: Path_ = field(default=(), compare=False)


@dataclass(frozen=True)
class Churn:
    timeline: tuple[TimelineEntry, ...] = ()
    steady: Steady | None = None


@dataclass(frozen=True)
class Experiment:
    """A checked experiment file. `resolve(seed)` makes every random choice."""

    name: str
    description: str
    seed: int
    groups: tuple[Group, ...]
    overlay: Overlay
    links: Links
    workloads: tuple[Workload, ...]
    churn: Churn
    expectations: tuple[Expectation, ...]
    duration: float | None
    linger: float
    resources: dict[str, Any]
    source: Source = field(compare=False, repr=False)
    single_group_form: bool = False  # written as `nodes:` rather than `groups:`
    variant: str | None = None  # which of its file's variants this is (None: the file itself)
    variant_set: tuple[tuple[str, Experiment], ...] = field(default=(), compare=False, repr=False)

    @property
    def file(self) -> str:
        return self.source.file

    def node_names(self) -> list[str]:
        return [name for g in self.groups for name in g.node_names()]

    def variants(self) -> list[tuple[str, Experiment]]:
        """(variant name, experiment) for each entry of the file's `variants:`,
        in file order; empty when it has none. Each experiment is complete (its
        own name, routers and expectations; no variants of its own) and resolves
        to the same overlay, links, workload, churn and node seeds as the others
        for the same seed: only the routers (and expectations) differ."""
        return list(self.variant_set)

    def error(self, path: Path_, message: str) -> InputError:
        return self.source.error(path, message)

    def resolve(self, seed: int | None = None) -> ResolvedExperiment:
        """Every choice made: seed None means the file's seed."""
        from orchestrator.experiment.resolve import resolve

        return resolve(self, self.seed if seed is None else seed)

    def to_dict(self, seed: int | None = None, duration: float | None = None) -> dict[str, Any]:
        from orchestrator.experiment.dump import experiment_to_dict

        return experiment_to_dict(self, seed=seed, duration=duration)


# --------------------------------------------------------------------------
# Entry points


def load_experiment(path: Path) -> Experiment:
    """Load and check an experiment file; InputError on any problem."""
    path = Path(path)
    raw, source = load_yaml(path)
    return _Parser(source).experiment(raw, default_name=path.stem)


def parse_experiment(text: str, name: str = "<string>") -> Experiment:
    """Like load_experiment, from text (for tests and tools)."""
    raw, source = parse_yaml(text, name)
    return _Parser(source).experiment(raw, default_name=Path(name).stem or "experiment")


def resolved_to_yaml(resolved: ResolvedExperiment, experiment: Experiment | None = None) -> str:
    """experiment.resolved.yaml for a resolution (see dump.py)."""
    from orchestrator.experiment.dump import resolved_to_yaml as _dump

    return _dump(resolved, experiment)


def experiment_json_schema() -> dict[str, Any]:
    from orchestrator.experiment.schema import experiment_json_schema as _schema

    return _schema()


# --------------------------------------------------------------------------
# Checking


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


class _Parser:
    def __init__(self, source: Source) -> None:
        self.src = source
        self.groups: tuple[Group, ...] = ()
        self.names: list[str] = []
        self.name_set: set[str] = set()

    # -- primitives

    def err(self, path: Path_, message: str, *, key: bool = False) -> InputError:
        return self.src.error(path, message)

    def mapping(self, value: Any, path: Path_, keys: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.err(path, f"expected a mapping with keys from: {', '.join(keys)}; got {_describe(value)}")
        for k in value:
            if k not in keys:
                raise self.err((*path, k), f"unknown key; expected one of: {', '.join(keys)}", key=True)
        for k in required:
            if k not in value:
                raise self.err(path, f"missing required key {k!r}")
        return value

    def integer(self, value: Any, path: Path_, minimum: int | None = None, what: str = "an integer") -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise self.err(path, f"expected {what}, got {_describe(value)}")
        if minimum is not None and value < minimum:
            raise self.err(path, f"expected {what} >= {minimum}, got {value}")
        return value

    def number(
        self, value: Any, path: Path_, minimum: float | None = None, maximum: float | None = None,
        positive: bool = False, what: str = "a number",
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.err(path, f"expected {what}, got {_describe(value)}")
        value = float(value)
        if positive and value <= 0:
            raise self.err(path, f"expected {what} > 0, got {value:g}")
        if minimum is not None and value < minimum:
            raise self.err(path, f"expected {what} >= {minimum:g}, got {value:g}")
        if maximum is not None and value > maximum:
            raise self.err(path, f"expected {what} <= {maximum:g}, got {value:g}")
        return value

    def string(self, value: Any, path: Path_, what: str = "a string") -> str:
        if not isinstance(value, str) or not value:
            raise self.err(path, f"expected {what}, got {_describe(value)}")
        return value

    def name(self, value: Any, path: Path_, what: str = "a name") -> str:
        if not isinstance(value, str) or not NAME_RE.match(value):
            raise self.err(
                path, f"expected {what} (letters, digits, '_', '.', '-'; starting with a letter or digit), "
                f"got {_describe(value)}",
            )
        return value

    def boolean(self, value: Any, path: Path_) -> bool:
        if not isinstance(value, bool):
            raise self.err(path, f"expected true or false, got {_describe(value)}")
        return value

    def time(self, value: Any, path: Path_, positive: bool = False) -> float:
        """Seconds from a number or a string with a unit: '250ms', '2s', '5m', '1h'."""
        what = "a time (seconds, or a string like '250ms', '2s', '1m')"
        if isinstance(value, str):
            m = TIME_RE.match(value)
            if not m:
                if value.strip().startswith("-"):
                    raise self.err(path, f"expected a time >= 0, got {value!r}")
                raise self.err(path, f"expected {what}, got {_describe(value)}")
            seconds = float(m["num"]) * TIME_UNITS[m["unit"]]
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.err(path, f"expected {what}, got {_describe(value)}")
        else:
            seconds = float(value)
            if seconds < 0:
                raise self.err(path, f"expected a time >= 0, got {value!r}")
        if positive and seconds <= 0:
            raise self.err(path, f"expected a time > 0, got {value!r}")
        return round(seconds, 9)

    def list_of(self, value: Any, path: Path_, what: str) -> list:
        if not isinstance(value, list):
            raise self.err(path, f"expected a list of {what}, got {_describe(value)}")
        return value

    def node_ref(self, value: Any, path: Path_) -> str:
        if not isinstance(value, str):
            raise self.err(path, f"expected a node name, got {_describe(value)}")
        if value not in self.name_set:
            raise self.err(path, f"no node named {value!r} (nodes: {_sample_names(self.names)})")
        return value

    def group_ref(self, value: Any, path: Path_) -> str:
        names = [g.name for g in self.groups]
        if not isinstance(value, str) or value not in names:
            raise self.err(path, f"expected a group name ({', '.join(names)}), got {_describe(value)}")
        return value

    # -- the document

    def experiment(self, raw: Any, default_name: str) -> Experiment:
        top = self.mapping(raw, (), TOP_KEYS)
        name = self.name(top["name"], ("name",), "an experiment name") if "name" in top else _safe_name(default_name)
        description = self.string(top["description"], ("description",)) if "description" in top else ""
        seed = self.integer(top.get("seed", DEFAULT_SEED), ("seed",), minimum=0, what="a seed (integer)")
        resources = self.resources(top["resources"], ("resources",)) if "resources" in top else {}

        if ("nodes" in top) == ("groups" in top):
            raise self.err((), "expected exactly one of 'nodes' (one group) or 'groups' (a list of groups)")
        if "nodes" in top:
            groups = (self.group(top["nodes"], ("nodes",), single=True, index=0, defaults=resources),)
            raw_groups = [top["nodes"]]
        else:
            items = self.list_of(top["groups"], ("groups",), "groups")
            if not items:
                raise self.err(("groups",), "expected at least one group")
            groups = tuple(
                self.group(g, ("groups", i), single=len(items) == 1, index=i, defaults=resources)
                for i, g in enumerate(items)
            )
            raw_groups = items
        seen_groups: dict[str, int] = {}
        for i, g in enumerate(groups):
            if g.name in seen_groups:
                raise self.err((*g.path, "name"), f"group name {g.name!r} is already used by group {seen_groups[g.name]}")
            seen_groups[g.name] = i
        self.groups = groups
        owner: dict[str, str] = {}
        for g in groups:
            for n in g.node_names():
                if n in owner:
                    raise self.err(
                        (*g.path, "prefix"), f"node name {n!r} is produced by groups {owner[n]!r} and {g.name!r}; "
                        "give one of them another prefix",
                    )
                owner[n] = g.name
                self.names.append(n)
        self.name_set = set(self.names)

        if "overlay" not in top:
            raise self.err((), "missing required key 'overlay' (e.g. overlay: {type: random, degree: 6})")
        overlay = self.overlay(top["overlay"], ("overlay",))
        links = self.links(top.get("links", {}), ("links",))
        topics = sorted({t for g in groups for t in g.topics})
        workloads: tuple[Workload, ...] = ()
        if "workload" in top:
            w = top["workload"]
            if isinstance(w, list):
                workloads = tuple(self.workload(x, ("workload", i), topics) for i, x in enumerate(w))
            else:
                workloads = (self.workload(w, ("workload",), topics),)
        churn = self.churn(top["churn"], ("churn",), topics) if "churn" in top else Churn()
        expectations = self.expectations(top.get("expectations", []), ("expectations",))
        duration = self.time(top["duration"], ("duration",), positive=True) if "duration" in top else None
        linger = self.time(top.get("linger", DEFAULT_LINGER), ("linger",))
        if duration is not None:
            self.check_within(duration, workloads, churn)
        if churn.steady is not None and churn.steady.until is None and duration is None:
            last = max((t for w in workloads for t in w.times()), default=0.0)
            if last <= churn.steady.start:
                raise self.err(
                    churn.steady.path,
                    "steady churn needs an end: set 'until' here or the experiment's 'duration' "
                    "(it defaults to the last message's time, and there is no message after 'from')",
                )
        base = Experiment(
            name=name, description=description, seed=seed, groups=groups, overlay=overlay,
            links=links, workloads=workloads, churn=churn, expectations=expectations,
            duration=duration, linger=linger, resources=resources, source=self.src,
            single_group_form="nodes" in top,
        )
        if "variants" in top:
            base = dataclasses.replace(base, variant_set=self.variants(top["variants"], base, raw_groups))
        return base

    # -- variants

    def variants(self, value: Any, base: Experiment, raw_groups: list[Any]) -> tuple[tuple[str, Experiment], ...]:
        """Each variant: the base experiment with its groups' routers, router
        parameters, name and expectations overridden; nothing else can differ."""
        path: Path_ = ("variants",)
        example = "e.g. {floodsub: {router: floodsub}, gossipsub: {router: gossipsub}}"
        if not isinstance(value, dict):
            raise self.err(path, f"expected a mapping from variant names to overrides ({example}), got {_describe(value)}")
        if not value:
            raise self.err(path, f"expected at least one variant ({example})")
        out: list[tuple[str, Experiment]] = []
        names: dict[str, str] = {}
        for vname, raw in value.items():
            vpath = (*path, vname)
            if not VARIANT_NAME_RE.match(vname):
                raise self.err(vpath, f"expected a variant name (letters, digits, '_', '-'), got {vname!r}", key=True)
            m = self.mapping({} if raw is None else raw, vpath, VARIANT_KEYS)
            if "name" in m:
                name = self.name(m["name"], (*vpath, "name"), "an experiment name")
            else:
                name = f"{base.name}-{vname}"
            if name in names:
                raise self.err(
                    (*vpath, "name") if "name" in m else vpath,
                    f"variant {vname!r} would be named {name!r} like variant {names[name]!r}; give it another 'name'",
                    key="name" not in m,
                )
            names[name] = vname
            wide = self.variant_layer(m, vpath)
            per_group: dict[str, tuple[str | None, dict[str, Any] | None, Path_]] = {}
            if "groups" in m:
                gpath = (*vpath, "groups")
                if base.single_group_form:
                    raise self.err(
                        gpath, "the file declares its one group with 'nodes:'; set 'router' and "
                        "'router_params' directly in the variant", key=True,
                    )
                gm = m["groups"]
                if not isinstance(gm, dict):
                    raise self.err(gpath, f"expected a mapping from group names to {{router, router_params}}, got {_describe(gm)}")
                known = [g.name for g in base.groups]
                for gname, graw in gm.items():
                    if gname not in known:
                        raise self.err((*gpath, gname), f"no group named {gname!r} (groups: {', '.join(known)})", key=True)
                    gm_ = self.mapping({} if graw is None else graw, (*gpath, gname), VARIANT_GROUP_KEYS)
                    per_group[gname] = self.variant_layer(gm_, (*gpath, gname))
            groups = tuple(
                self.variant_group(g, raw_g, (wide, per_group.get(g.name)))
                for g, raw_g in zip(base.groups, raw_groups)
            )
            expectations = (
                self.expectations(m["expectations"], (*vpath, "expectations")) if "expectations" in m else base.expectations
            )
            out.append((vname, dataclasses.replace(
                base, name=name, groups=groups, expectations=expectations, variant=vname, variant_set=(),
            )))
        return tuple(out)

    def variant_layer(self, m: dict, path: Path_) -> tuple[str | None, dict[str, Any] | None, Path_]:
        """A variant's (or one of its groups') router and router_params, checked
        as far as they can be without knowing the group."""
        router = None
        if "router" in m:
            router = m["router"]
            if not isinstance(router, str) or router not in ROUTERS:
                raise self.err((*path, "router"), f"expected a router, one of: {', '.join(ROUTERS)}; got {_describe(router)}")
        params = None
        if "router_params" in m:
            params = {} if m["router_params"] is None else m["router_params"]
            if not isinstance(params, dict):
                raise self.err((*path, "router_params"), f"expected a mapping of router parameters, got {_describe(params)}")
        return router, params, path

    def variant_group(
        self, g: Group, raw: Any, layers: tuple[tuple[str | None, dict[str, Any] | None, Path_] | None, ...],
    ) -> Group:
        """The group with the variant's overrides: the variant-wide layer, then
        the group's own. A layer that changes the router discards the parameters
        written for the previous one; otherwise its parameters are merged over them."""
        router = g.router
        raw_params = raw.get("router_params") if isinstance(raw, dict) else None
        params: dict[str, Any] = dict(raw_params or {})
        origins: dict[str, Path_] = {k: (*g.path, "router_params", k) for k in params}
        params_path: Path_ = (*g.path, "router_params")
        router_path: Path_ = (*g.path, "router")
        touched = False
        for layer in layers:
            if layer is None:
                continue
            lrouter, lparams, lpath = layer
            if lrouter is not None:
                touched = True
                router_path = (*lpath, "router")
                if lrouter != router:
                    router, params, origins = lrouter, {}, {}
                    params_path = (*lpath, "router_params")
            if lparams is not None:
                touched = True
                params_path = (*lpath, "router_params")
                params.update(lparams)
                origins.update({k: (*params_path, k) for k in lparams})
        if not touched:
            return g
        full = self.router_params(router, params, params_path, origins)
        if router == "simsub" and len(g.topics) != 1:
            raise self.err(
                router_path, f"simsub routers have exactly one topic (as the reference actor); group {g.name!r} "
                f"subscribes to {len(g.topics)}",
            )
        return dataclasses.replace(g, router=router, router_params=full)

    def check_within(self, duration: float, workloads: tuple[Workload, ...], churn: Churn) -> None:
        for w in workloads:
            times = w.times()
            if times and times[-1] > duration:
                raise self.err(
                    w.path, f"the last message is at t={times[-1]:g}s, after the experiment's duration "
                    f"({duration:g}s); lower messages/interval/start or raise duration",
                )
        for e in churn.timeline:
            times = e.times()
            if times:
                last = times[-1] + (e.for_ or 0.0)
                if last > duration:
                    raise self.err(
                        e.path, f"acts at t={last:g}s, after the experiment's duration ({duration:g}s)",
                    )
        s = churn.steady
        if s is not None and s.until is not None and s.until > duration:
            raise self.err((*s.path, "until"), f"expected a time <= duration ({duration:g}s), got {s.until:g}")

    def resources(self, value: Any, path: Path_) -> dict[str, Any]:
        m = self.mapping(value, path, RESOURCE_KEYS)
        out: dict[str, Any] = {}
        if "memory" in m:
            mem = m["memory"]
            if isinstance(mem, int) and not isinstance(mem, bool) and mem > 0:
                mem = str(mem)
            if not isinstance(mem, str) or not MEMORY_RE.match(mem):
                raise self.err((*path, "memory"), f"expected a memory size like '256m' or '1g', got {_describe(mem)}")
            out["memory"] = mem.lower()
        if "cpus" in m:
            out["cpus"] = self.number(m["cpus"], (*path, "cpus"), positive=True, what="a number of CPUs")
        return out

    def group(self, value: Any, path: Path_, single: bool, index: int, defaults: dict[str, Any]) -> Group:
        m = self.mapping(value, path, GROUP_KEYS, required=("count", "router"))
        if "name" in m:
            name = self.name(m["name"], (*path, "name"), "a group name")
        elif single:
            name = "default"
        else:
            raise self.err(path, "missing required key 'name' (every group needs a name when there are several)")
        count = self.integer(m["count"], (*path, "count"), minimum=1, what="a node count")
        router = m["router"]
        if not isinstance(router, str) or router not in ROUTERS:
            raise self.err((*path, "router"), f"expected a router, one of: {', '.join(ROUTERS)}; got {_describe(router)}")
        params = self.router_params(router, m.get("router_params", {}), (*path, "router_params"))
        if "topics" in m:
            items = self.list_of(m["topics"], (*path, "topics"), "topic names")
            topics = tuple(self.string(t, (*path, "topics", i), "a topic name") for i, t in enumerate(items))
            if len(set(topics)) != len(topics):
                raise self.err((*path, "topics"), "a topic is listed twice")
        else:
            topics = ("t",)
        if router == "simsub" and len(topics) != 1:
            raise self.err((*path, "topics"), "simsub routers have exactly one topic (as the reference actor)")
        if "prefix" in m:
            prefix = m["prefix"]
            if not isinstance(prefix, str) or not NAME_RE.match(prefix + "0"):
                raise self.err((*path, "prefix"), f"expected a node-name prefix like 'n' or 'edge-', got {_describe(prefix)}")
        else:
            prefix = "n" if single else f"{name}-"
        regions: tuple[str, ...] = ()
        if "region" in m:
            r = m["region"]
            if isinstance(r, list):
                if not r:
                    raise self.err((*path, "region"), "expected a region name or a non-empty list of them")
                regions = tuple(self.name(x, (*path, "region", i), "a region name") for i, x in enumerate(r))
            else:
                regions = (self.name(r, (*path, "region"), "a region name"),)
        uplink = None
        if "uplink" in m:
            uplink = self.rate(m["uplink"], (*path, "uplink"))
        res = dict(defaults)
        if "resources" in m:
            res.update(self.resources(m["resources"], (*path, "resources")))
        return Group(
            name=name, count=count, router=router, router_params=params, topics=topics, prefix=prefix,
            regions=regions, uplink_bps=uplink, memory=res.get("memory"), cpus=res.get("cpus"), path=path,
        )

    def rate(self, value: Any, path: Path_) -> int:
        try:
            return parse_rate(value)
        except ValueError as exc:
            raise self.err(path, str(exc)) from None

    def router_params(
        self, router: str, value: Any, path: Path_, origins: dict[str, Path_] | None = None,
    ) -> dict[str, Any]:
        """`origins`: where each key was written, when not at path.key (a
        variant's parameters merged over its group's)."""
        kind = ROUTERS[router]
        if value is None:
            value = {}
        fields = {f.name: f for f in dataclasses.fields(kind.params)} if dataclasses.is_dataclass(kind.params) else {}
        known = sorted(set(fields) - set(kind.fixed))
        where_of = dict(origins or {})
        if isinstance(value, dict):
            for k in value:
                if k not in known:
                    raise self.err(
                        where_of.get(k, (*path, k)), f"unknown key; expected one of: {', '.join(known)} "
                        f"(the parameters of {router})", key=True,
                    )
        m = self.mapping(value, path, tuple(known))
        values: dict[str, Any] = {}
        for key, v in m.items():
            values[key] = self.param_value(v, str(fields[key].type), where_of.get(key, (*path, key)))
        try:
            params = kind.make_params(values)
        except (ValueError, TypeError) as exc:
            message = str(exc)
            where = path
            # prefer the keys written here (a variant's) over those merged in
            here = len(path)
            for key in sorted(values, key=lambda k: (where_of.get(k, (*path, k))[:here] != path, -len(k))):
                if re.search(rf"\b{re.escape(key)}\b", message):
                    where = where_of.get(key, (*path, key))
                    break
            raise self.err(where, f"bad {router} parameters: {message}") from None
        full = dataclasses.asdict(params)
        return {f.name: full[f.name] for f in dataclasses.fields(params) if f.name not in kind.fixed}

    def param_value(self, value: Any, annotation: str, path: Path_) -> Any:
        kinds = {a.strip() for a in annotation.split("|")}
        if value is None:
            if "None" in kinds:
                return None
            raise self.err(path, f"expected {annotation}, got nothing (null)")
        if "bool" in kinds:
            return self.boolean(value, path)
        if "int" in kinds:
            return self.integer(value, path)
        if "float" in kinds:
            return self.number(value, path)
        if "str" in kinds:
            return self.string(value, path)
        return value

    def overlay(self, value: Any, path: Path_) -> Overlay:
        m = self.mapping(value, path, OVERLAY_KEYS, required=("type",))
        kind = m["type"]
        if kind not in OVERLAY_TYPES:
            raise self.err((*path, "type"), f"expected one of: {', '.join(OVERLAY_TYPES)}; got {_describe(kind)}")
        n = len(self.names)
        allowed = {
            "random": ("type", "degree", "connected"), "random_regular": ("type", "degree", "connected"),
            "explicit": ("type", "edges"), "full": ("type",),
        }[kind]
        for k in m:
            if k not in allowed:
                raise self.err((*path, k), f"not used by overlay type {kind} (it takes: {', '.join(allowed)})", key=True)
        degree = None
        if kind in ("random", "random_regular"):
            if "degree" not in m:
                raise self.err(path, f"missing required key 'degree' for overlay type {kind}")
            degree = self.integer(m["degree"], (*path, "degree"), minimum=1, what="a degree")
            if degree >= n:
                raise self.err(
                    (*path, "degree"), f"degree {degree} is too large for {n} nodes (each node can have at most {n - 1} peers)"
                )
            if kind == "random_regular" and (n * degree) % 2:
                raise self.err(
                    (*path, "degree"), f"no graph with every node at degree {degree} on {n} nodes exists "
                    f"(n*degree = {n * degree} is odd); change the degree or the node count",
                )
        edges: list[tuple[str, str]] = []
        if kind == "explicit":
            if "edges" not in m:
                raise self.err(path, "missing required key 'edges' (a list of [a, b] node pairs)")
            items = self.list_of(m["edges"], (*path, "edges"), "[a, b] node pairs")
            seen: set[tuple[str, str]] = set()
            for i, e in enumerate(items):
                p = (*path, "edges", i)
                if not isinstance(e, list) or len(e) != 2:
                    raise self.err(p, f"expected a pair of node names [a, b], got {_describe(e)}")
                a = self.node_ref(e[0], (*p, 0))
                b = self.node_ref(e[1], (*p, 1))
                if a == b:
                    raise self.err(p, f"a node cannot connect to itself ({a})")
                pair = (a, b) if a < b else (b, a)
                if pair not in seen:
                    seen.add(pair)
                    edges.append(pair)
        connected = self.boolean(m["connected"], (*path, "connected")) if "connected" in m else True
        return Overlay(kind, degree, tuple(sorted(edges)), connected if kind != "explicit" else False, path)

    def links(self, value: Any, path: Path_) -> Links:
        m = self.mapping(value, path, LINKS_KEYS)
        latency = self.latency(m.get("latency", 0), (*path, "latency"))
        jitter = self.number(m.get("jitter_ms", 0), (*path, "jitter_ms"), minimum=0, what="a jitter in ms")
        loss = self.number(m.get("loss", 0), (*path, "loss"), minimum=0, maximum=1, what="a loss probability in [0, 1]")
        uplink = self.rate(m["uplink"], (*path, "uplink")) if "uplink" in m else None
        if latency.model == "regions":
            used = set()
            for g in self.groups:
                if not g.regions:
                    raise self.err(
                        (*g.path, "region"), "the regions latency model needs every group to have a region "
                        f"(group {g.name!r} has none)",
                    )
                used.update(g.regions)
            regions = sorted({r for pair in latency.matrix for r in pair})
            for g in self.groups:
                for r in g.regions:
                    if r not in regions:
                        raise self.err(
                            (*g.path, "region"), f"region {r!r} is not in links.latency.matrix "
                            f"(regions there: {', '.join(regions)})",
                        )
            for i, a in enumerate(regions):
                for b in regions[i:]:
                    if (a, b) not in latency.matrix:
                        raise self.err(
                            (*path, "latency", "matrix"), f"the matrix has no latency between regions {a!r} and {b!r}; "
                            f"add matrix.{a}.{b}",
                        )
        return Links(latency, jitter, loss, uplink)

    def latency(self, value: Any, path: Path_) -> Latency:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            ms = self.number(value, path, minimum=0, what="a latency in ms")
            return Latency("constant", ms=ms, path=path)
        m = self.mapping(value, path, LATENCY_KEYS, required=("model",))
        model = m["model"]
        if model not in LATENCY_MODELS:
            raise self.err((*path, "model"), f"expected one of: {', '.join(LATENCY_MODELS)}; got {_describe(model)}")
        allowed = {"constant": ("model", "ms"), "uniform": ("model", "min_ms", "max_ms"), "regions": ("model", "matrix")}[model]
        for k in m:
            if k not in allowed:
                raise self.err((*path, k), f"not used by latency model {model} (it takes: {', '.join(allowed)})", key=True)
        for k in allowed:
            if k not in m:
                raise self.err(path, f"missing required key {k!r} for latency model {model}")
        if model == "constant":
            return Latency(model, ms=self.number(m["ms"], (*path, "ms"), minimum=0, what="a latency in ms"), path=path)
        if model == "uniform":
            lo = self.number(m["min_ms"], (*path, "min_ms"), minimum=0, what="a latency in ms")
            hi = self.number(m["max_ms"], (*path, "max_ms"), minimum=0, what="a latency in ms")
            if lo > hi:
                raise self.err((*path, "min_ms"), f"min_ms ({lo:g}) is larger than max_ms ({hi:g})")
            return Latency(model, min_ms=lo, max_ms=hi, path=path)
        rows = self.mapping(m["matrix"], (*path, "matrix"), tuple(m["matrix"]) if isinstance(m["matrix"], dict) else ())
        matrix: dict[tuple[str, str], float] = {}
        for r1, row in rows.items():
            self.name(r1, (*path, "matrix", r1), "a region name")
            cols = self.mapping(row, (*path, "matrix", r1), tuple(row) if isinstance(row, dict) else ())
            for r2, ms in cols.items():
                p = (*path, "matrix", r1, r2)
                self.name(r2, p, "a region name")
                v = self.number(ms, p, minimum=0, what="a latency in ms")
                key = (r1, r2) if r1 <= r2 else (r2, r1)
                if key in matrix and matrix[key] != v:
                    raise self.err(p, f"the matrix gives {r1}-{r2} two different latencies ({matrix[key]:g} and {v:g})")
                matrix[key] = v
        if not matrix:
            raise self.err((*path, "matrix"), "expected at least one region")
        return Latency(model, matrix=matrix, path=path)

    def selector(self, value: Any, path: Path_, pool_size_check: bool = True) -> Selector:
        """A mapping, or shorthand: a node name, a list of names, or 'all'."""
        if isinstance(value, str):
            if value == "all":
                return Selector(all=True, path=path)
            return Selector(nodes=(self.node_ref(value, path),), path=path)
        if isinstance(value, list):
            value = {"nodes": value}
            self.src.lines.setdefault((*path, "nodes"), self.src.line(path))
        m = self.mapping(value, path, SELECTOR_KEYS)
        chosen = [k for k in ("nodes", "count", "percent", "all") if k in m]
        if len(chosen) > 1 or (not chosen and "group" not in m):
            raise self.err(
                path, "expected exactly one of 'nodes' (names), 'count', 'percent', 'all' "
                "(optionally with 'group'), or 'group' alone",
            )
        group = self.group_ref(m["group"], (*path, "group")) if "group" in m else None
        pool = sum(g.count for g in self.groups if group is None or g.name == group)
        scope = f"group {group!r}" if group else "the experiment"
        if "nodes" in m:
            if group is not None:
                raise self.err((*path, "group"), "'group' narrows count/percent/all; with 'nodes' leave it out")
            items = self.list_of(m["nodes"], (*path, "nodes"), "node names")
            if not items:
                raise self.err((*path, "nodes"), "the selector matches no node (empty list)")
            names = tuple(self.node_ref(x, (*path, "nodes", i)) for i, x in enumerate(items))
            if len(set(names)) != len(names):
                raise self.err((*path, "nodes"), "a node is listed twice")
            return Selector(nodes=names, path=path)
        if "count" in m:
            count = self.integer(m["count"], (*path, "count"), minimum=1, what="a node count")
            if pool_size_check and count > pool:
                raise self.err((*path, "count"), f"selects {count} nodes but {scope} has only {pool}")
            return Selector(count=count, group=group, path=path)
        if "percent" in m:
            pct = self.number(m["percent"], (*path, "percent"), minimum=0, maximum=100, what="a percentage in (0, 100]")
            if half_up(pct * pool / 100) < 1:
                raise self.err(
                    (*path, "percent"), f"{pct:g}% of {pool} nodes in {scope} rounds to 0: the selector matches nothing"
                )
            return Selector(percent=pct, group=group, path=path)
        if "all" in m and not self.boolean(m["all"], (*path, "all")):
            raise self.err((*path, "all"), "expected true ('all: false' selects nothing)")
        return Selector(all="all" in m, group=group, path=path)

    def workload(self, value: Any, path: Path_, topics: list[str]) -> Workload:
        m = self.mapping(value, path, WORKLOAD_KEYS, required=("messages",))
        if "topic" in m:
            topic = self.string(m["topic"], (*path, "topic"), "a topic name")
            if topic not in topics:
                raise self.err((*path, "topic"), f"no group subscribes to topic {topic!r} (topics: {', '.join(topics)})")
        elif len(topics) == 1:
            topic = topics[0]
        else:
            raise self.err(path, f"missing required key 'topic' (the groups subscribe to {', '.join(topics) or 'no topic'})")
        messages = self.integer(m["messages"], (*path, "messages"), minimum=0, what="a message count")
        interval = self.time(m.get("interval", 1.0), (*path, "interval"), positive=messages > 1)
        size = self.size(m.get("size", 256), (*path, "size"))
        start = self.time(m.get("start", 0), (*path, "start"))
        publishers = self.selector(m["publishers"], (*path, "publishers")) if "publishers" in m else None
        inject = None
        if "inject" in m:
            inject = self.integer(m["inject"], (*path, "inject"), minimum=1, what="a number of injection nodes")
            n = len(self.names)
            if inject > n:
                raise self.err((*path, "inject"), f"cannot hand a message to {inject} distinct nodes out of {n}")
        order = m.get("order", "round_robin")
        if order not in ("round_robin", "random"):
            raise self.err((*path, "order"), f"expected round_robin or random, got {_describe(order)}")
        if inject is not None and "order" in m:
            raise self.err((*path, "order"), "'order' picks among publishers; injection draws its nodes at random", key=True)
        return Workload(topic, messages, interval, size, start, publishers, inject, order, path)

    def size(self, value: Any, path: Path_) -> int:
        if isinstance(value, str):
            mm = SIZE_RE.match(value)
            if not mm:
                raise self.err(path, f"expected a size in bytes (e.g. 256 or '1KiB'), got {_describe(value)}")
            size = int(mm["num"]) * SIZE_UNITS[(mm["unit"] or "b").lower()]
        else:
            size = self.integer(value, path, minimum=1, what="a message size in bytes")
        if size < 1 or size > MAX_MESSAGE_SIZE - 1024:
            raise self.err(path, f"expected a size between 1 and {MAX_MESSAGE_SIZE - 1024} bytes (the wire's 1 MiB frame), got {size}")
        return size

    def churn(self, value: Any, path: Path_, topics: list[str]) -> Churn:
        m = self.mapping(value, path, CHURN_KEYS)
        timeline: list[TimelineEntry] = []
        if "timeline" in m:
            items = self.list_of(m["timeline"], (*path, "timeline"), "churn entries")
            timeline = [self.entry(x, (*path, "timeline", i), topics) for i, x in enumerate(items)]
        steady = self.steady(m["steady"], (*path, "steady")) if "steady" in m else None
        return Churn(tuple(timeline), steady)

    def entry(self, value: Any, path: Path_, topics: list[str]) -> TimelineEntry:
        m = self.mapping(value, path, ENTRY_KEYS, required=("action",))
        action = m["action"]
        if action not in VERBS:
            raise self.err((*path, "action"), f"expected one of: {', '.join(VERBS)}; got {_describe(action)}")
        if "select" not in m:
            raise self.err(path, "missing required key 'select' (which nodes: e.g. {nodes: [n3]}, {count: 2}, {percent: 10})")
        select = self.selector(m["select"], (*path, "select"))
        at = every = start = until = None
        if "at" in m:
            for k in ("every", "from", "until"):
                if k in m:
                    raise self.err((*path, k), "use either 'at' (once) or 'every' with 'from'/'until' (repeated)", key=True)
            at = self.time(m["at"], (*path, "at"))
        elif "every" in m:
            every = self.time(m["every"], (*path, "every"), positive=True)
            start = self.time(m.get("from", 0), (*path, "from"))
            if "until" not in m:
                raise self.err(path, "missing required key 'until' (a repeated entry needs an end)")
            until = self.time(m["until"], (*path, "until"))
            if until <= start:
                raise self.err((*path, "until"), f"expected a time after 'from' ({start:g}s), got {until:g}s")
        else:
            raise self.err(path, "missing 'at' (a time) or 'every' with 'from'/'until'")
        topic = None
        if action in ("leave", "join"):
            if "topic" in m:
                topic = self.string(m["topic"], (*path, "topic"), "a topic name")
            elif len(topics) == 1:
                topic = topics[0]
            else:
                raise self.err(path, f"missing required key 'topic' for {action} (topics: {', '.join(topics)})")
        elif "topic" in m:
            raise self.err((*path, "topic"), f"'topic' is only for leave and join, not {action}", key=True)
        peers = None
        if "peers" in m:
            if action not in ("disconnect", "reconnect"):
                raise self.err((*path, "peers"), f"'peers' is only for disconnect and reconnect, not {action}", key=True)
            peers = self.selector(m["peers"], (*path, "peers"))
        for_ = None
        if "for" in m:
            if action not in UNDO:
                raise self.err(
                    (*path, "for"), f"'for' undoes an action after a while; it works with "
                    f"{', '.join(UNDO)}, not {action}", key=True,
                )
            for_ = self.time(m["for"], (*path, "for"), positive=True)
        return TimelineEntry(action, select, at, every, start, until, topic, peers, for_, path)

    def steady(self, value: Any, path: Path_) -> Steady:
        m = self.mapping(value, path, STEADY_KEYS, required=("fraction", "session"))
        fraction = self.number(m["fraction"], (*path, "fraction"), minimum=0, maximum=1, what="a fraction of nodes in (0, 1]")
        action = m.get("action", "kill")
        if action not in STEADY_ACTIONS:
            raise self.err((*path, "action"), f"expected one of: {', '.join(STEADY_ACTIONS)}; got {_describe(action)}")
        select = self.selector(m["select"], (*path, "select")) if "select" in m else None
        if select is not None and (select.count is not None or select.percent is not None):
            raise self.err(
                (*path, "select"), "steady churn picks 'fraction' of its pool; choose the pool with "
                "'nodes', 'group' or 'all', not count/percent",
            )
        pool = len(self.names) if select is None else _static_pool_size(select, self.groups)
        if half_up(fraction * pool) < 1:
            raise self.err((*path, "fraction"), f"{fraction:g} of {pool} nodes rounds to 0: no node would churn")
        session = self.distribution(m["session"], (*path, "session"))
        downtime = self.distribution(m["downtime"], (*path, "downtime")) if "downtime" in m else session
        start = self.time(m.get("from", 0), (*path, "from"))
        until = self.time(m["until"], (*path, "until")) if "until" in m else None
        if until is not None and until <= start:
            raise self.err((*path, "until"), f"expected a time after 'from' ({start:g}s), got {until:g}s")
        return Steady(fraction, action, session, downtime, select, start, until, path)

    def distribution(self, value: Any, path: Path_) -> Distribution:
        m = self.mapping(value, path, DIST_KEYS, required=("distribution",))
        kind = m["distribution"]
        if kind not in DISTRIBUTIONS:
            raise self.err((*path, "distribution"), f"expected one of: {', '.join(DISTRIBUTIONS)}; got {_describe(kind)}")
        allowed = {"exponential": ("distribution", "mean", "min"), "weibull": ("distribution", "shape", "scale", "min")}[kind]
        for k in m:
            if k not in allowed:
                raise self.err((*path, k), f"not used by the {kind} distribution (it takes: {', '.join(allowed)})", key=True)
        low = self.time(m.get("min", 0), (*path, "min"))
        if kind == "exponential":
            if "mean" not in m:
                raise self.err(path, "missing required key 'mean' (seconds)")
            return Distribution(kind, mean=self.time(m["mean"], (*path, "mean"), positive=True), min=low)
        for k in ("shape", "scale"):
            if k not in m:
                raise self.err(path, f"missing required key {k!r} for the weibull distribution")
        shape = self.number(m["shape"], (*path, "shape"), positive=True, what="a Weibull shape")
        scale = self.time(m["scale"], (*path, "scale"), positive=True)
        return Distribution(kind, shape=shape, scale=scale, min=low)

    def expectations(self, value: Any, path: Path_) -> tuple[Expectation, ...]:
        items = self.list_of(value, path, "assertions like 'delivery_ratio >= 0.99'")
        out = []
        for i, text in enumerate(items):
            p = (*path, i)
            if not isinstance(text, str):
                raise self.err(p, f"expected an assertion string like 'delivery_ratio >= 0.99', got {_describe(text)}")
            m = EXPECTATION_RE.match(text)
            if not m:
                raise self.err(p, f"expected '<metric> <op> <number>' with op one of < <= > >= == !=, got {text!r}")
            if not METRIC_RE.match(m["metric"]):
                raise self.err(p, f"expected a metric name (letters, digits, '_' and '.'), got {m['metric']!r}")
            out.append(Expectation(m["metric"], m["op"], float(m["value"]), text.strip()))  # type: ignore[arg-type]
        return tuple(out)


def half_up(x: float) -> int:
    """Round half up (4.5 -> 5), as people count, not Python's half-to-even."""
    return math.floor(x + 0.5)


def _static_pool_size(sel: Selector, groups: tuple[Group, ...]) -> int:
    if sel.nodes:
        return len(sel.nodes)
    return sum(g.count for g in groups if sel.group is None or g.name == sel.group)


def _sample_names(names: list[str]) -> str:
    if len(names) <= 6:
        return ", ".join(names)
    return f"{', '.join(names[:3])}, ..., {names[-1]}"


def _safe_name(stem: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).strip("-.") or "experiment"
    return cleaned if NAME_RE.match(cleaned) else f"x{cleaned}"
