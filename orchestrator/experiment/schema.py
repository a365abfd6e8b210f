"""The JSON Schema of experiment files (`testbed schema`), for editors and
linters. The loader (spec.py) is the authority: it also checks what a schema
cannot (node names exist, the matrix covers every region, router parameters
are consistent, selectors match nodes at the time they act); a test keeps the
key sets of the two in step.
"""

from __future__ import annotations

from typing import Any

from node.engine.registry import ROUTERS
from orchestrator.experiment import spec

TIME = {
    "description": "seconds, or a string with a unit: '250ms', '2s', '1m', '1h'",
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*(ms|s|m|min|h)?\s*$"},
    ],
}
RATE = {
    "description": "bits per second, or tc-style '10mbit', '512kbit', '1gbit'",
    "anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string", "pattern": r"^\s*[0-9.]+\s*[kmgtKMGT]?i?bit\s*$"}],
}
NAME = {"type": "string", "pattern": spec.NAME_RE.pattern}


def _obj(props: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        out["required"] = list(required)
    out.update(extra)
    return out


def _router_params() -> dict[str, Any]:
    import dataclasses

    variants = []
    for name, kind in ROUTERS.items():
        props = {}
        for f in dataclasses.fields(kind.params):
            if f.name in kind.fixed:
                continue
            t = str(f.type)
            types = []
            if "int" in t:
                types.append("integer")
            if "float" in t:
                types.append("number")
            if "bool" in t:
                types.append("boolean")
            if "None" in t:
                types.append("null")
            props[f.name] = {"type": types[0] if len(types) == 1 else types, "default": f.default}
        variants.append({
            "if": {"properties": {"router": {"const": name}}, "required": ["router"]},
            "then": {"properties": {"router_params": _obj(props)}},
        })
    return {"allOf": variants}


def experiment_json_schema() -> dict[str, Any]:
    resources = _obj({
        "memory": {"description": "container memory limit, docker style: '256m', '1g'",
                   "anyOf": [{"type": "string", "pattern": spec.MEMORY_RE.pattern}, {"type": "integer"}]},
        "cpus": {"type": "number", "exclusiveMinimum": 0},
    })
    group = _obj(
        {
            "name": {**NAME, "description": "group name (required when there are several groups)"},
            "count": {"type": "integer", "minimum": 1},
            "router": {"enum": list(ROUTERS)},
            "router_params": {"type": "object", "description": "the router's parameters (see docs/experiment-files.md)"},
            "topics": {"type": "array", "items": {"type": "string", "minLength": 1}, "default": ["t"]},
            "prefix": {"type": "string", "description": "node names are <prefix><i>; default 'n' for one group, '<group>-' for several"},
            "region": {"anyOf": [NAME, {"type": "array", "items": NAME, "minItems": 1}],
                       "description": "a region, or a list assigned round-robin to the group's nodes"},
            "uplink": RATE,
            "resources": resources,
        },
        ("count", "router"),
        **_router_params(),
    )
    selector = {
        "description": "which nodes: a name, a list of names, 'all', or a mapping with one of nodes/count/percent/all, optionally narrowed by group",
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            _obj({
                "nodes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "count": {"type": "integer", "minimum": 1},
                "percent": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
                "group": {"type": "string"},
                "all": {"const": True},
            }),
        ],
    }
    overlay = _obj(
        {
            "type": {"enum": list(spec.OVERLAY_TYPES)},
            "degree": {"type": "integer", "minimum": 1,
                       "description": "random: each node dials this many random peers (N-connect); random_regular: every node's exact degree"},
            "edges": {"type": "array", "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}},
            "connected": {"type": "boolean", "default": True,
                          "description": "redraw a random overlay (seeded) until it is connected"},
        },
        ("type",),
    )
    latency = {
        "anyOf": [
            {"type": "number", "minimum": 0, "description": "constant one-way latency in ms"},
            _obj({
                "model": {"enum": list(spec.LATENCY_MODELS)},
                "ms": {"type": "number", "minimum": 0},
                "min_ms": {"type": "number", "minimum": 0},
                "max_ms": {"type": "number", "minimum": 0},
                "matrix": {"type": "object", "additionalProperties": {
                    "type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                    "description": "one-way ms between regions: matrix.<r1>.<r2>, symmetric"},
            }, ("model",)),
        ],
    }
    links = _obj({
        "latency": latency,
        "jitter_ms": {"type": "number", "minimum": 0, "default": 0},
        "loss": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
        "uplink": RATE,
    })
    workload = _obj(
        {
            "topic": {"type": "string"},
            "messages": {"type": "integer", "minimum": 0},
            "interval": TIME,
            "size": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}], "default": 256},
            "start": TIME,
            "publishers": selector,
            "inject": {"type": "integer", "minimum": 1,
                       "description": "injection mode: each message handed to this many random nodes"},
            "order": {"enum": ["round_robin", "random"], "default": "round_robin"},
        },
        ("messages",),
    )
    dist = _obj(
        {
            "distribution": {"enum": list(spec.DISTRIBUTIONS)},
            "mean": TIME, "shape": {"type": "number", "exclusiveMinimum": 0}, "scale": TIME, "min": TIME,
        },
        ("distribution",),
    )
    entry = _obj(
        {
            "at": TIME, "every": TIME, "from": TIME, "until": TIME,
            "action": {"enum": list(spec.VERBS)},
            "select": selector,
            "topic": {"type": "string"},
            "peers": selector,
            "for": {**TIME, "description": "undo after this long (kill/stop->start, pause->unpause, disconnect->reconnect, leave->join)"},
        },
        ("action", "select"),
    )
    steady = _obj(
        {
            "fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "action": {"enum": list(spec.STEADY_ACTIONS), "default": "kill"},
            "session": dist, "downtime": dist, "select": selector, "from": TIME, "until": TIME,
        },
        ("fraction", "session"),
    )
    expectations = {"type": "array", "items": {"type": "string", "pattern": spec.EXPECTATION_RE.pattern}}
    override = {
        "router": {"enum": list(ROUTERS)},
        "router_params": {"type": ["object", "null"],
                          "description": "merged over the group's own when the router stays the same; "
                                         "replacing them when the router changes"},
    }
    variant = _obj(
        {
            "name": {**NAME, "description": "the variant's experiment name (default '<name>-<variant>')"},
            **override,
            "groups": {"type": "object", "description": "per-group overrides (groups: form only), by group name",
                       "additionalProperties": {"anyOf": [{"type": "null"}, _obj(dict(override), **_router_params())]}},
            "expectations": {**expectations, "description": "replaces the file's expectations for this variant"},
        },
        **_router_params(),
    )
    variants = {
        "type": "object", "minProperties": 1,
        "description": "the same experiment run once per variant, each overriding only routers, "
                       "router parameters, name and expectations (see docs/experiment-files.md)",
        "propertyNames": {"pattern": spec.VARIANT_NAME_RE.pattern},
        "additionalProperties": {"anyOf": [{"type": "null"}, variant]},
    }
    props = {
        "name": NAME,
        "description": {"type": "string"},
        "seed": {"type": "integer", "minimum": 0, "default": spec.DEFAULT_SEED},
        "nodes": group,
        "groups": {"type": "array", "items": group, "minItems": 1},
        "overlay": overlay,
        "links": links,
        "workload": {"anyOf": [workload, {"type": "array", "items": workload}]},
        "churn": _obj({"timeline": {"type": "array", "items": entry}, "steady": steady}),
        "expectations": expectations,
        "duration": TIME,
        "linger": {**TIME, "default": spec.DEFAULT_LINGER},
        "resources": resources,
        "variants": variants,
        "wire": _obj({
            "security": {"enum": list(spec.SECURITY), "default": spec.DEFAULT_WIRE["security"]},
            "authenticity": {"enum": list(spec.AUTHENTICITY), "default": spec.DEFAULT_WIRE["authenticity"]},
            "message_id": {"enum": list(spec.MESSAGE_IDS), "default": spec.DEFAULT_WIRE["message_id"]},
        }),
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gossip-testbed/experiment.schema.json",
        "title": "gossip-testbed experiment",
        "description": "One experiment: nodes, overlay, links, workload, churn, expectations. See docs/experiment-files.md.",
        **_obj(props, ("overlay",)),
        "oneOf": [{"required": ["nodes"]}, {"required": ["groups"]}],
    }
