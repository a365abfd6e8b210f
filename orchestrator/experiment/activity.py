"""What happens during an experiment, as pydantic models: selectors (which
nodes), the publish workload and the churn timeline and steady churn. Like
parts.py, each model holds its keys, defaults, bounds and the rules between
its own keys; check.py checks what needs the whole file (names exist, pools
are large enough) and resolve.py what needs time (a node is running).
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from orchestrator.experiment import lifecycle
from orchestrator.experiment import values as v
from orchestrator.experiment.model import ChurnVerb
from orchestrator.experiment.parts import Part, Topic

VERBS: tuple[str, ...] = typing.get_args(ChurnVerb)
UNDO: dict[str, str] = {verb.value: undo.value for verb, undo in lifecycle.UNDO.items()}  # the lifecycle table's
SteadyVerb = Literal["kill", "stop", "pause", "disconnect"]
NodeCount = v.integer("a node count", ge=1, le=v.MAX_NODES)


def _selector_shorthand(schema: dict[str, Any]) -> None:
    inner = dict(schema)
    schema.clear()
    schema["description"] = (
        "which nodes: a name, a list of names, 'all', or a mapping with one of nodes/count/percent/all, "
        "optionally narrowed by group"
    )
    schema["anyOf"] = [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}, inner]


class Selector(Part):
    """Which nodes: exactly one of `nodes` (names), `count`, `percent`, `all`,
    optionally narrowed to a `group` (a group alone means all of it). A name,
    a list of names or 'all' are shorthands."""

    model_config = {"json_schema_extra": _selector_shorthand}

    nodes: tuple[str, ...] = Field((), min_length=1)
    count: NodeCount | None = None  # type: ignore[valid-type]
    percent: v.number("a percentage in (0, 100]", le=100.0) | None = None  # type: ignore[valid-type]
    group: str | None = None
    all: v.Flag = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if value == "all":
            return {"all": True}
        if isinstance(value, str):
            return {"nodes": [value]}
        if isinstance(value, list):
            return {"nodes": value}
        return value

    @model_validator(mode="after")
    def _rules(self) -> Selector:
        written = self.given()
        chosen = [k for k in ("nodes", "count", "percent", "all") if k in written]
        if len(chosen) > 1 or (not chosen and "group" not in written):
            raise v.problem(
                "expected exactly one of 'nodes' (names), 'count', 'percent', 'all' "
                "(optionally with 'group'), or 'group' alone"
            )
        if "all" in written and not self.all:
            raise v.problem("expected true ('all: false' selects nothing)", "all")
        if self.nodes and self.group is not None:
            raise v.problem("'group' narrows count/percent/all; with 'nodes' leave it out", "group")
        if len(set(self.nodes)) != len(self.nodes):
            raise v.problem("a node is listed twice", "nodes")
        return self

    @model_serializer(mode="wrap")
    def _written_form(self, handler: Any) -> dict[str, Any]:
        return {k: x for k, x in handler(self).items() if x not in (None, (), [], False)}

    @property
    def named(self) -> bool:
        return bool(self.nodes)

    def describe(self) -> str:
        if self.nodes:
            return ", ".join(self.nodes)
        scope = f"group {self.group}" if self.group else "all nodes"
        if self.count is not None:
            return f"{self.count} of {scope}"
        if self.percent is not None:
            return f"{self.percent:g}% of {scope}"
        return scope


class Workload(Part):
    """`messages` messages, one every `interval` from `start`, by the
    `publishers` in turn (default: one random subscriber), or with `inject: k`
    each handed to k random nodes (the reference simulator's injection)."""

    topic: Topic | None = None  # type: ignore[valid-type]
    messages: v.integer("a message count", ge=0, le=v.MAX_MESSAGES)  # type: ignore[valid-type]
    interval: v.Time = 1.0
    size: v.Size = 256
    start: v.Time = 0.0
    publishers: Selector | None = None
    inject: v.integer("a number of injection nodes", ge=1, le=v.MAX_NODES) | None = Field(  # type: ignore[valid-type]
        None, description="injection mode: each message handed to this many random nodes")
    order: Literal["round_robin", "random"] = "round_robin"

    @model_validator(mode="after")
    def _rules(self) -> Workload:
        if self.messages > 1 and self.interval <= 0:
            raise v.problem(f"expected a time > 0, got {self.interval!r}", "interval")
        if self.inject is not None and "order" in self.given():
            raise v.problem("'order' picks among publishers; injection draws its nodes at random", "order")
        if self.start + self.interval * max(self.messages - 1, 0) > v.MAX_SECONDS:
            raise v.problem(f"the last message would be after {v.MAX_SECONDS:g}s (one week)", "messages")
        return self

    def times(self) -> list[float]:
        return [round(self.start + i * self.interval, 9) for i in range(self.messages)]

    def dump(self) -> dict[str, Any]:
        d = super().dump()
        if self.inject is not None:
            del d["order"]  # injection draws its nodes at random
        return d


class TimelineEntry(Part):
    """One churn action `at` a time, or `every` period `from`..`until`, on the
    `select`ed nodes; `for` undoes it after a while."""

    at: v.Time | None = None
    every: v.PositiveTime | None = None
    start: v.Time | None = Field(None, alias="from")
    until: v.Time | None = None
    action: Literal[VERBS]  # type: ignore[valid-type]
    select: Selector
    topic: Topic | None = None  # type: ignore[valid-type]
    peers: Selector | None = None
    for_: v.PositiveTime | None = Field(
        None, alias="for",
        description="undo after this long (kill/stop->start, pause->unpause, disconnect->reconnect, leave->join)")

    @model_validator(mode="after")
    def _rules(self) -> TimelineEntry:
        written = self.given()
        if "at" in written:
            for key in ("every", "from", "until"):
                if key in written:
                    raise v.problem("use either 'at' (once) or 'every' with 'from'/'until' (repeated)", key)
        elif "every" in written:
            if "until" not in written:
                raise v.problem("missing required key 'until' (a repeated entry needs an end)")
            start = self.start or 0.0
            if self.until <= start:  # type: ignore[operator]
                raise v.problem(f"expected a time after 'from' ({start:g}s), got {self.until:g}s", "until")
            if (self.until - start) / self.every > v.MAX_CHURN_ACTIONS:  # type: ignore[operator]
                raise v.problem(f"repeats more than {v.MAX_CHURN_ACTIONS} times; raise 'every'", "every")
        else:
            raise v.problem("missing 'at' (a time) or 'every' with 'from'/'until'")
        if "topic" in written and self.action not in ("leave", "join"):
            raise v.problem(f"'topic' is only for leave and join, not {self.action}", "topic")
        if "peers" in written and self.action not in ("disconnect", "reconnect"):
            raise v.problem(f"'peers' is only for disconnect and reconnect, not {self.action}", "peers")
        if "for" in written and self.action not in UNDO:
            raise v.problem(
                f"'for' undoes an action after a while; it works with {', '.join(UNDO)}, not {self.action}", "for"
            )
        return self

    def times(self) -> list[float]:
        if self.at is not None:
            return [self.at]
        start = self.start or 0.0
        out = []
        i = 0
        while True:
            t = round(start + i * self.every, 9)  # type: ignore[operator]
            if t >= self.until:  # type: ignore[operator]
                return out
            out.append(t)
            i += 1


class Distribution(Part):
    """Session-time distribution in seconds. exponential: `mean`. weibull:
    `shape` k and `scale` lambda (mean = scale * Gamma(1 + 1/k)). Draws below
    `min` are raised to `min`."""

    distribution: Literal["exponential", "weibull"]
    mean: v.PositiveTime | None = None
    shape: v.number("a Weibull shape", ge=0.01, le=100.0) | None = None  # type: ignore[valid-type]
    scale: v.PositiveTime | None = None
    min: v.Time = 0.0

    @model_validator(mode="after")
    def _rules(self) -> Distribution:
        takes = {"exponential": ("distribution", "mean", "min"), "weibull": ("distribution", "shape", "scale", "min")}
        self.only(takes[self.distribution], f"the {self.distribution} distribution")
        need = ("mean",) if self.distribution == "exponential" else ("shape", "scale")
        for key in need:
            if getattr(self, key) is None:
                raise v.problem(f"missing required key {key!r} for the {self.distribution} distribution")
        return self

    def draw(self, rng: Any) -> float:
        if self.distribution == "exponential":
            value = rng.expovariate(1.0 / self.mean)  # type: ignore[operator]
        else:
            value = rng.weibullvariate(self.scale, self.shape)
        return max(value, self.min)


class Steady(Part):
    """Steady churn: `fraction` of the pool keeps going down (`action`) for a
    `downtime` draw and coming back for a `session` draw."""

    fraction: v.number("a fraction of nodes in (0, 1]", le=1.0)  # type: ignore[valid-type]
    action: SteadyVerb = "kill"
    session: Distribution
    downtime: Distribution | None = Field(None, description="default: the session distribution")
    select: Selector | None = None
    start: v.Time = Field(0.0, alias="from")
    until: v.Time | None = None

    @model_validator(mode="after")
    def _rules(self) -> Steady:
        if self.select is not None and (self.select.count is not None or self.select.percent is not None):
            raise v.problem(
                "steady churn picks 'fraction' of its pool; choose the pool with 'nodes', 'group' or 'all', "
                "not count/percent", "select",
            )
        if self.until is not None and self.until <= self.start:
            raise v.problem(f"expected a time after 'from' ({self.start:g}s), got {self.until:g}s", "until")
        return self


class Churn(Part):
    timeline: list[TimelineEntry] = []
    steady: Steady | None = None
