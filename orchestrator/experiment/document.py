"""The experiment file as one pydantic model: the single description of the
format. `read_document` validates plain YAML values against it and turns
pydantic's errors into `FILE:LINE: field.path: message` lines;
`experiment_json_schema` is what `testbed schema` prints.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, ValidationError, WithJsonSchema, field_validator, model_validator

from node.dilation import MAX_DILATION
from orchestrator.errors import InputError
from orchestrator.experiment import values as v
from orchestrator.experiment.activity import Churn, Workload
from orchestrator.experiment.parts import Group, Links, Overlay, Part, Resources, RouterName, Wire, router_params_schema
from orchestrator.experiment.yamlsrc import Source

DEFAULT_SEED = 1
DEFAULT_LINGER = 5.0
VARIANT_NAME_RE = r"^[A-Za-z0-9_-]+$"


def _linger(value: Any) -> float | str:
    return "auto" if value == "auto" else v.seconds(value)


Linger = Annotated[float | Literal["auto"], PlainValidator(_linger), WithJsonSchema({
    "description": "how long to keep running after the last message: a time, or 'auto' (until the network "
                   f"is quiet, at most {v.LINGER_AUTO_MAX:g} s)",
    "anyOf": [{"type": "number", "minimum": 0, "maximum": v.MAX_SECONDS}, {"type": "string", "pattern": v.schema_pattern(v.TIME_RE)},
              {"const": "auto"}],
})]
Expectations = list[v.ExpectationText]  # type: ignore[valid-type]


class VariantGroup(Part):
    """One group's router and parameters in a variant."""

    model_config = {"json_schema_extra": router_params_schema}

    router: RouterName | None = None
    router_params: dict[str, Any] | None = Field(
        None, description="merged over the group's own when the router stays the same; replacing them when it changes")


class Variant(VariantGroup):
    """The experiment again with other routers, parameters, name and
    expectations; everything else is shared."""

    name: v.name_type("an experiment name") | None = Field(  # type: ignore[valid-type]
        None, description="the variant's experiment name (default '<name>-<variant>')")
    groups: dict[str, VariantGroup | None] | None = Field(
        None, description="per-group overrides (groups: form only), by group name")
    expectations: Expectations | None = Field(None, description="replaces the file's expectations for this variant")


def _variant_name(value: Any) -> str:
    if not isinstance(value, str) or not re.match(VARIANT_NAME_RE, value):
        raise v.problem(f"expected a variant name (letters, digits, '_', '-'), got {value!r}")
    return value


VariantName = Annotated[str, PlainValidator(_variant_name), WithJsonSchema({"type": "string", "pattern": VARIANT_NAME_RE})]


class ExperimentFile(Part):
    """One experiment: nodes, overlay, links, workload, churn, expectations.
    See docs/experiment-files.md."""

    model_config = {"title": "gossip-testbed experiment"}

    name: v.name_type("an experiment name") | None = Field(None, description="default: the file name")  # type: ignore[valid-type]
    description: v.text_type("a string") | None = None  # type: ignore[valid-type]
    seed: v.integer("a seed (integer)", ge=0, le=v.MAX_SEED) = DEFAULT_SEED  # type: ignore[valid-type]
    nodes: Group | None = Field(None, description="the one group of nodes (or use 'groups')")
    groups: list[Group] | None = Field(None, min_length=1, description="several groups of nodes (or use 'nodes')")
    overlay: Overlay
    links: Links = Field(default_factory=Links)
    workload: list[Workload] = Field([], description="one workload, or a list of them")
    churn: Churn = Field(default_factory=Churn)
    expectations: Expectations = []
    duration: v.PositiveTime | None = Field(None, description="default: the last message or churn action plus linger")
    linger: Linger = DEFAULT_LINGER
    strict_traces: bool = Field(False, description="a cut or corrupt trace file fails the run (exit 1), as analyze --strict")
    resources: Resources | None = Field(None, description="defaults for every group's resources")
    time_dilation: v.number("a time dilation factor", ge=1.0, le=MAX_DILATION) = Field(  # type: ignore[valid-type]
        1.0, description="run the experiment this many times slower on the wall clock (links, router "
                         "timers, workload, churn); traces and metrics stay on the experiment's clock "
                         "(docs/experiment-files.md)")
    wire: Wire = Field(default_factory=Wire)
    sizes: dict[Literal["process", "docker", "swarm"], dict[str, v.integer("a node count", ge=1, le=v.MAX_NODES)]] | None = Field(  # type: ignore[valid-type]
        None,
        description="group counts on a backend that cannot host the file's own (by backend, then group name): "
                    "`testbed run --backend docker` runs the file, and every variant, with these counts; "
                    "`testbed sim` and other backends keep the file's (docs/experiment-files.md)")
    validation_delay: dict[v.text_type("a topic"), v.Time] = Field(  # type: ignore[valid-type]
        {}, description="topic -> how long validating one of its messages takes on every node (test-plans' "
                        "setTopicValidationDelay); the message is delivered and forwarded after it")
    variants: dict[VariantName, Variant | None] | None = Field(
        None,
        description="the same experiment run once per variant, each overriding only routers, router "
                    "parameters, name and expectations (docs/experiment-files.md)")

    @field_validator("workload", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _rules(self) -> ExperimentFile:
        if (self.nodes is None) == (self.groups is None):
            raise v.problem("expected exactly one of 'nodes' (one group) or 'groups' (a list of groups)")
        if self.variants == {}:
            raise v.problem("expected at least one variant (e.g. {floodsub: {router: floodsub}, "
                            "gossipsub: {router: gossipsub}})", "variants")
        return self


def experiment_json_schema() -> dict[str, Any]:
    """The JSON Schema of experiment files, every definition written in
    place (the model has no recursion), for editors and linters."""
    schema = _inline(ExperimentFile.model_json_schema(by_alias=True))
    workload = schema["properties"]["workload"]
    item = workload.pop("items")
    workload.pop("type")
    workload["anyOf"] = [item, {"type": "array", "items": item}]
    schema["oneOf"] = [{"required": ["nodes"]}, {"required": ["groups"]}]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://gossip-testbed/experiment.schema.json", **schema}


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk({**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: x for k, x in node.items() if k != "$ref"}})
            return {k: walk(x) for k, x in node.items()}
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    return walk(schema)


def read_document(raw: Any, source: Source) -> ExperimentFile:
    """The validated file; InputError with one line per problem."""
    source.document = raw
    try:
        return ExperimentFile.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            path, message = _explain(error)
            lines.append((source.line(source.project(path)), str(source.error(path, message))))
        lines.sort(key=lambda x: x[0])
        raise InputError("\n".join(dict.fromkeys(text for _, text in lines))) from None


def _explain(error: Any) -> tuple[tuple, str]:
    """The field path and the message of one pydantic error."""
    loc = tuple(p for p in error["loc"] if p != "[key]")  # a mapping key's error is the key's
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "testbed":
        return (*loc, *ctx.get("at", ())), ctx["message"]
    if kind == "missing":
        return loc[:-1], f"missing required key {loc[-1]!r}"
    if kind == "literal_error":
        return loc, f"expected one of: {ctx['expected'].replace(chr(39), '')}; got {v.describe(got)}"
    if kind in ("list_type", "tuple_type"):
        return loc, f"expected a list, got {v.describe(got)}"
    if kind in ("dict_type", "model_type"):
        return loc, f"expected a mapping, got {v.describe(got)}"
    if kind == "string_type":
        return loc, f"expected a string, got {v.describe(got)}"
    if kind == "too_short":
        return loc, f"expected at least {ctx.get('min_length', 1)} item(s), got none"
    if kind == "too_long":
        return loc, f"expected at most {ctx.get('max_length')} items"
    return loc, error["msg"]
