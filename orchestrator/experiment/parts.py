"""The set-up sections of an experiment file as pydantic models: groups of
nodes, the overlay, the links and the wire. Each model says which keys it
takes, their types, defaults and bounds (values.py) and the rules between its
own keys; rules that need the whole file (node names exist, the region matrix
covers every group) are in check.py.

`Part` is the base of every section: a frozen mapping that refuses unknown
keys with the list of the ones it takes, and knows its field path in the file
once `assign_paths` has run, so later checks can point at it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, PrivateAttr, WithJsonSchema, model_validator

from node.engine.authenticity import check_combination
from orchestrator.experiment.network_presets import PRESETS, NetworkPreset
from node.engine.registry import ROUTERS
from orchestrator.experiment import values as v
from orchestrator.routers.kinds import ADAPTERS, CONTRACT, CONTRACT_PARAMS, IMAGE_PREFIX, image_router
from orchestrator.experiment.yamlsrc import Path_



IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
IMAGE_KEYS = ("image", "contract")


def _router(value: Any) -> str:
    """A router kind: one of our engines, an adapter, or a bare
    `{image: NAME, contract: gossipsub-interop}` (kept as "image:NAME")."""
    names = [*ROUTERS, *ADAPTERS]
    if isinstance(value, dict):
        for key in value:
            if key not in IMAGE_KEYS:
                raise v.problem(f"unknown key; expected one of: {', '.join(IMAGE_KEYS)}", key)
        if value.get("contract") != CONTRACT:
            raise v.problem(f"expected contract: {CONTRACT} (the only contract a bare image can follow), "
                            f"got {v.describe(value.get('contract'))}", "contract")
        image = value.get("image")
        if not isinstance(image, str) or not IMAGE_RE.match(image) or len(image) > 255:
            raise v.problem(f"expected a Docker image reference like my-go-node:latest, got {v.describe(image)}", "image")
        return image_router(image)
    if not isinstance(value, str) or value not in names:
        raise v.problem(f"expected a router, one of: {', '.join(names)}, or {{image: NAME, contract: {CONTRACT}}}; "
                        f"got {v.describe(value)}")
    return value


def _router_out(router: str) -> Any:
    return {"image": router[len(IMAGE_PREFIX):], "contract": CONTRACT} if router.startswith(IMAGE_PREFIX) else router


RouterName = Annotated[str, PlainValidator(_router), PlainSerializer(_router_out), WithJsonSchema({"anyOf": [
    {"enum": [*ROUTERS, *ADAPTERS]},
    {"type": "object", "additionalProperties": False, "required": list(IMAGE_KEYS),
     "properties": {"image": {"type": "string", "pattern": IMAGE_RE.pattern}, "contract": {"const": CONTRACT}}},
]})]
OverlayType = Literal["random", "random_regular", "explicit", "full"]
LatencyModel = Literal["constant", "uniform", "regions"]


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    _path: Path_ = PrivateAttr(default=())

    @property
    def path(self) -> Path_:
        return self._path

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.alias or name for name, f in cls.model_fields.items())

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        keys = ", ".join(cls.keys())
        if not isinstance(value, dict):
            raise v.problem(f"expected a mapping with keys from: {keys}; got {v.describe(value)}")
        for key in value:
            if key not in cls.keys():
                raise v.problem(f"unknown key; expected one of: {keys}", key)
        return value

    def given(self) -> set[str]:
        """The keys the file gave a value (by their names in the file); `key:
        null` is the same as leaving the key out."""
        fields = type(self).model_fields
        return {fields[name].alias or name for name in self.model_fields_set if getattr(self, name) is not None}

    def only(self, allowed: tuple[str, ...], what: str) -> None:
        for key in sorted(self.given()):
            if key not in allowed:
                raise v.problem(f"not used by {what} (it takes: {', '.join(allowed)})", key)

    def dump(self) -> dict[str, Any]:
        """Plain data in the file's own format (for experiment.resolved.yaml)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def assign_paths(part: Part, path: Path_) -> None:
    """Tell `part` and every section inside it where it is in the file."""
    part._path = path
    for name, field in type(part).model_fields.items():
        value, key = getattr(part, name), field.alias or name
        if isinstance(value, Part):
            assign_paths(value, (*path, key))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, Part):
                    assign_paths(item, (*path, key, i))
        elif isinstance(value, dict):
            for k, item in value.items():
                if isinstance(item, Part):
                    assign_paths(item, (*path, key, k))


def _regions(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return (v.check_name(value, "a region name"),)
    if not value:
        raise v.problem("expected a region name or a non-empty list of them")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not v.NAME_RE.match(item):
            raise v.problem(f"expected a region name, got {v.describe(item)}", i)
    return tuple(value)


Regions = Annotated[
    tuple[str, ...], PlainValidator(_regions), PlainSerializer(list),
    WithJsonSchema({"description": "a region, or a list assigned round-robin to the group's nodes",
                    "anyOf": [{"type": "string", "pattern": v.NAME_RE.pattern},
                              {"type": "array", "items": {"type": "string", "pattern": v.NAME_RE.pattern}, "minItems": 1}]}),
]
Topic = v.text_type("a topic name")


class Resources(Part):
    """Limits per node container (Docker and swarm backends) and where a
    node may run (swarm backend; other backends ignore it)."""

    memory: v.Memory | None = None
    cpus: v.number("a number of CPUs", ge=None, gt=0, le=v.MAX_CPUS) | None = None  # type: ignore[valid-type]
    placement: list[v.Constraint] | None = Field(
        None, description="swarm placement constraints, all of which a node's swarm node must meet "
                          "(docs/swarm.md), e.g. ['node.labels.zone==a']")


def router_params_schema(schema: dict[str, Any]) -> None:
    """Each router's parameters, from the router registry's dataclasses."""
    variants = []
    kinds = [({"const": name}, kind) for name, kind in ROUTERS.items()]
    kinds += [({"const": name}, kind.engine) for name, kind in ADAPTERS.items()] + [({"type": "object"}, CONTRACT_PARAMS)]
    for router, kind in kinds:
        props = {}
        for f in dataclasses.fields(kind.params):
            if f.name in kind.fixed:
                continue
            kinds = [t.strip() for t in str(f.type).split("|")]
            types = [{"int": "integer", "float": "number", "bool": "boolean", "None": "null", "str": "string"}[t] for t in kinds]
            props[f.name] = {"type": types[0] if len(types) == 1 else types, "default": f.default}
        variants.append({
            "if": {"properties": {"router": router}, "required": ["router"]},
            "then": {"properties": {"router_params": {"type": "object", "additionalProperties": False, "properties": props}}},
        })
    schema["allOf"] = variants


class Adversary(Part):
    """What a group's nodes do as sybils (docs/adversaries.md). Each key is
    one behaviour of node/engine/adversary/; they combine. `start` makes the
    sybils covert: honest until then (workload seconds); `attack_degree`
    aims each sybil's connections at that many honest nodes (the report's
    attack degree), on top of the overlay. Node names are
    checked against the file in orchestrator/experiment/adversary.py."""

    censor: v.Flag = False
    censor_publishers: list[v.name_type("a node name")] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, description="censor only these publishers' messages (implies censor)")
    degrade: v.number("the share of messages still forwarded, in [0, 1]", le=1.0) | None = None  # type: ignore[valid-type]
    eclipse: list[v.name_type("a node name")] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, description="victims: every sybil connects to and GRAFTs each of them")
    ihave_flood: v.integer("made-up ids per IHAVE", ge=1, le=100_000) | None = None  # type: ignore[valid-type]
    iwant_flood: v.integer("repeats of each IWANT", ge=1, le=1_000) | None = None  # type: ignore[valid-type]
    graft_during_backoff: v.Flag = False
    bad_boy: v.Flag = Field(False, description="GRAFT every topic peer, never PRUNE, never gossip, regraft a minute after a PRUNE (the hardening report's sybil)")
    invalid_messages: v.integer("forged messages per heartbeat", ge=1, le=1_000) | None = None  # type: ignore[valid-type]
    attack_degree: v.integer("honest nodes each sybil connects to", ge=1, le=v.MAX_DEGREE) | None = None  # type: ignore[valid-type]
    start: v.Time = 0.0

    @model_validator(mode="after")
    def _rules(self) -> Adversary:
        behaviours = (self.censor, self.censor_publishers, self.degrade is not None, self.eclipse,
                      self.ihave_flood, self.iwant_flood, self.graft_during_backoff, self.bad_boy,
                      self.invalid_messages)
        if not any(behaviours):
            raise v.problem("an adversary needs at least one behaviour: censor, censor_publishers, degrade, eclipse, "
                            "ihave_flood, iwant_flood, graft_during_backoff, bad_boy or invalid_messages")
        if self.censor and self.censor_publishers:
            raise v.problem("censor censors everyone; censor_publishers only those: give one of them", "censor_publishers")
        return self


class Group(Part):
    """A group of identical nodes. `name`, `prefix` and every router
    parameter are filled in by check.py (defaults depend on the whole file)."""

    model_config = ConfigDict(json_schema_extra=router_params_schema)

    name: v.name_type("a group name") | None = None  # type: ignore[valid-type]
    count: v.integer("a node count", ge=1, le=v.MAX_NODES)  # type: ignore[valid-type]
    router: RouterName
    router_params: dict[str, Any] | None = Field(None, description="the router's parameters (docs/experiment-files.md)")
    topics: list[Topic] = Field(default_factory=lambda: ["t"], max_length=v.MAX_TOPICS)  # type: ignore[valid-type]
    prefix: str | None = Field(None, description="node names are <prefix><i>; default 'n' (one group), '<group>-' (several)")
    region: Regions | None = None
    uplink: v.Rate | None = None
    resources: Resources | None = None
    adversary: Adversary | None = None
    app_specific_score: v.number(  # type: ignore[valid-type]
        "an application-specific score (P5)", ge=None,
        description="P5: the application-specific score every scoring router (gossipsub v1.1+) gives this group's nodes",
    ) | None = None
    connect_at: v.Time | None = Field(None, description=(
        "workload time at which this group's overlay edges to nodes that also wait are dialled (the attack at dawn: "
        "honest nodes that connect to each other after the sybils connected to them); edges to other nodes open at the start"))
    identities_per_host: v.integer("a number of identities per host", ge=1, le=v.MAX_NODES, description=(  # type: ignore[valid-type]
        "identity density: the group's nodes packed this many to a host, sharing its IP address, which gossipsub "
        "v1.1's P6 (IP colocation) counts (docs/adversaries.md); default 1")) | None = None

    @model_validator(mode="after")
    def _rules(self) -> Group:
        if len(set(self.topics)) != len(self.topics):
            raise v.problem("a topic is listed twice", "topics")
        if self.router == "simsub" and len(self.topics) != 1:
            raise v.problem("simsub routers have exactly one topic (as the reference actor)", "topics")
        if self.prefix is not None and not v.NAME_RE.match(self.prefix + "0"):
            raise v.problem(f"expected a node-name prefix like 'n' or 'edge-', got {v.describe(self.prefix)}", "prefix")
        return self

    @property
    def regions(self) -> tuple[str, ...]:
        return self.region or ()

    @property
    def uplink_bps(self) -> int | None:
        return self.uplink

    @property
    def memory(self) -> str | None:
        return self.resources.memory if self.resources else None

    @property
    def cpus(self) -> float | None:
        return self.resources.cpus if self.resources else None

    @property
    def placement(self) -> tuple[str, ...]:
        return tuple(self.resources.placement or ()) if self.resources else ()

    def node_names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(self.count)]


def _edge(value: Any) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(x, str) for x in value):
        raise v.problem(f"expected a pair of node names [a, b], got {v.describe(value)}")
    return value[0], value[1]


Edge = Annotated[tuple[str, str], PlainValidator(_edge), WithJsonSchema(
    {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2})]


class Overlay(Part):
    """The initial connections: `random` (each node dials `degree` random
    peers, N-connect), `random_regular` (every node exactly `degree`),
    `explicit` (the `edges` listed) or `full`."""

    type: OverlayType
    degree: v.integer("a degree", ge=1, le=v.MAX_DEGREE) | None = None  # type: ignore[valid-type]
    edges: tuple[Edge, ...] = ()
    connected: v.Flag = Field(True, description="redraw a random overlay (seeded) until it is connected")

    @model_validator(mode="after")
    def _rules(self) -> Overlay:
        takes = {"random": ("type", "degree", "connected"), "random_regular": ("type", "degree", "connected"),
                 "explicit": ("type", "edges"), "full": ("type",)}[self.type]
        self.only(takes, f"overlay type {self.type}")
        if self.type in ("random", "random_regular") and self.degree is None:
            raise v.problem(f"missing required key 'degree' for overlay type {self.type}")
        if self.type == "explicit" and "edges" not in self.given():
            raise v.problem("missing required key 'edges' (a list of [a, b] node pairs)")
        return self

    def dump(self) -> dict[str, Any]:
        d = {"type": self.type}
        if self.type in ("random", "random_regular"):
            d.update(degree=self.degree, connected=self.connected)
        elif self.type == "explicit":
            d["edges"] = [list(e) for e in self.edges]
        return d


def _latency_shorthand(schema: dict[str, Any]) -> None:
    inner = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"type": "number", "minimum": 0, "maximum": v.MAX_LATENCY_MS,
                        "description": "constant one-way latency in ms"}, inner]


Ms = v.number("a latency in ms", le=v.MAX_LATENCY_MS)
RegionName = v.name_type("a region name")


class Latency(Part):
    """One-way latency of every pair: `constant` (`ms`), `uniform` (each pair
    draws once from [min_ms, max_ms]) or `regions` (a symmetric matrix of
    one-way ms between the groups' regions). A bare number is `constant`."""

    model_config = ConfigDict(json_schema_extra=_latency_shorthand)

    model: LatencyModel
    ms: Ms | None = None  # type: ignore[valid-type]
    min_ms: Ms | None = None  # type: ignore[valid-type]
    max_ms: Ms | None = None  # type: ignore[valid-type]
    matrix: dict[RegionName, dict[RegionName, Ms]] | None = Field(  # type: ignore[valid-type]
        None, description="one-way ms between regions: matrix.<r1>.<r2>, symmetric")

    @model_validator(mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"model": "constant", "ms": value}
        return value

    @model_validator(mode="after")
    def _rules(self) -> Latency:
        takes = {"constant": ("model", "ms"), "uniform": ("model", "min_ms", "max_ms"), "regions": ("model", "matrix")}[self.model]
        self.only(takes, f"latency model {self.model}")
        for key in takes:
            if key not in self.given():
                raise v.problem(f"missing required key {key!r} for latency model {self.model}")
        if self.model == "uniform" and self.min_ms > self.max_ms:  # type: ignore[operator]
            raise v.problem(f"min_ms ({self.min_ms:g}) is larger than max_ms ({self.max_ms:g})", "min_ms")
        if self.model == "regions":
            seen: dict[tuple[str, str], float] = {}
            for r1, row in (self.matrix or {}).items():
                for r2, ms in row.items():
                    key = (r1, r2) if r1 <= r2 else (r2, r1)
                    if key in seen and seen[key] != ms:
                        raise v.problem(f"the matrix gives {r1}-{r2} two different latencies ({seen[key]:g} and {ms:g})",
                                        "matrix", r1, r2)
                    seen[key] = ms
            if not seen:
                raise v.problem("expected at least one region", "matrix")
        return self

    def pairs(self) -> dict[tuple[str, str], float]:
        """The matrix as (r1, r2) -> ms with r1 <= r2."""
        return {((a, b) if a <= b else (b, a)): ms for a, row in (self.matrix or {}).items() for b, ms in row.items()}

    def dump(self) -> dict[str, Any]:
        d = super().dump()
        if self.model == "regions":
            rows: dict[str, dict[str, float]] = {}
            for (a, b), ms in sorted(self.pairs().items()):
                rows.setdefault(a, {})[b] = ms
            d["matrix"] = rows
        return d


class Links(Part):
    """Every link's parameters; `uplink` is each node's default bandwidth.
    `preset` (network_presets.py) gives the latency matrix, and each node a
    region and an uplink drawn by weight, instead of `latency`/`uplink`."""

    preset: Literal[tuple(PRESETS)] | None = Field(  # type: ignore[valid-type]
        None, description="a ready network model: regions, their latencies and bandwidth classes")
    latency: Latency = Field(default_factory=lambda: Latency(model="constant", ms=0.0))
    jitter_ms: v.number("a jitter in ms", le=v.MAX_LATENCY_MS) = 0.0  # type: ignore[valid-type]
    loss: v.number("a loss probability in [0, 1]", le=1.0) = 0.0  # type: ignore[valid-type]
    uplink: v.Rate | None = None

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if not isinstance(value, dict) or value.get("preset") not in PRESETS:
            return value
        for key in ("latency", "uplink"):
            if value.get(key) is not None:
                raise v.problem(f"preset {value['preset']} gives every link's {key}; leave {key} out "
                                "(a group's own region or uplink overrides the preset's draw)", key)
        return {**value, "latency": {"model": "regions", "matrix": PRESETS[value["preset"]].matrix()}}

    @property
    def network_preset(self) -> NetworkPreset | None:
        return PRESETS[self.preset] if self.preset is not None else None

    def dump(self) -> dict[str, Any]:
        d = super().dump()
        if self.preset is not None:
            del d["latency"]
        return d

    @property
    def uplink_bps(self) -> int | None:
        return self.uplink


class Wire(Part):
    """How nodes talk: the secure channel, how messages are signed and how
    their ids are computed (docs/experiment-files.md, "Wire")."""

    security: Literal["noise", "plaintext"] = "noise"
    authenticity: Literal["strict", "author", "anonymous"] = Field(
        "strict", description="strict: signed with from/seqno; author: from/seqno unsigned; anonymous: neither")
    message_id: Literal["from-seqno", "first-8-bytes"] = Field(
        "from-seqno", description="from-seqno: from + seqno; first-8-bytes: the data's first 8 bytes as a big-endian u64")

    @model_validator(mode="after")
    def _rules(self) -> Wire:
        """A combination written in full must work; one setting left out is
        chosen for the routers present (experiment/wire_fit.py), which checks again."""
        if {"authenticity", "message_id"} <= self.model_fields_set:
            try:
                check_combination(self.authenticity, self.message_id)  # the engine's own rule
            except ValueError as exc:
                raise v.problem(str(exc), "authenticity") from None
        return self
