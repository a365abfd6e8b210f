"""The value types of experiment files and their bounds.

Each type here is a pydantic `Annotated` type that carries its validator, its
bounds and its JSON Schema together, so `testbed schema`, the loader and
docs/experiment-files.md cannot drift apart. Validators raise `problem(...)`,
whose text becomes the `FILE:LINE: field.path: message` the user reads.

The bounds follow what one machine can run (the simulator holds every engine
in one process; the backends one container or process per node) and keep
every input from exhausting memory or time before a run starts.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from orchestrator.experiment.model import Expectation
from orchestrator.experiment.links import parse_rate

MAX_NODES = 1_000_000  # nodes in one experiment: the simulator's scale run at a million (docs/scale.md)
MAX_EDGES = 10_000_000  # overlay edges (full or random overlays included): a million nodes at degree 10
MAX_DEGREE = 1_000
MAX_MESSAGES = 100_000  # workload messages per workload
MAX_CHURN_ACTIONS = 1_000_000  # resolved churn actions, timeline and steady each
MAX_SECONDS = 7 * 24 * 3600.0  # every time and duration: one week
MAX_LATENCY_MS = 60_000.0  # one-way latency and jitter: one minute
MAX_RATE_BPS = 100 * 10**9  # 100 gbit
MAX_MEMORY_BYTES = 1 << 40  # 1 TiB per node
MAX_CPUS = 1024.0
MAX_TOPICS = 1_000  # topics per group
MAX_SEED = 2**63 - 1
MAX_MESSAGE_SIZE = (1 << 20) - 1024  # the wire's 1 MiB frame (node/wire/codec.py) less room for the envelope
LINGER_AUTO_MAX = 30.0  # `linger: auto` waits at most this long after the last message

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TIME_RE = re.compile(r"^\s*(?P<num>\d+(\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|min|h)?\s*$")
TIME_UNITS = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
SIZE_RE = re.compile(r"^\s*(?P<num>\d+)\s*(?P<unit>b|kb|kib|mb|mib)?\s*$", re.IGNORECASE)
SIZE_UNITS = {None: 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 10**6, "mib": 2**20}
MEMORY_RE = re.compile(r"^(?P<num>\d+(\.\d+)?)(?P<unit>[bkmgBKMG]?)$")
MEMORY_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
METRIC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
EXPECTATION_RE = re.compile(
    r"^\s*(?P<metric>\S+?)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$"
)


def schema_pattern(rx: re.Pattern[str]) -> str:
    """`rx` for a JSON Schema: without Python's named groups, and with both
    cases of each letter where `rx` ignores case (a JSON Schema regex has no
    flags). Case-insensitive patterns here spell their letters outside
    character classes."""
    pattern = re.sub(r"\?P<\w+>", "", rx.pattern)
    if rx.flags & re.IGNORECASE:
        pattern = re.sub(r"(?<!\\)[a-z]", lambda m: f"[{m[0]}{m[0].upper()}]", pattern)
    return pattern


def problem(message: str, *at: str | int) -> PydanticCustomError:
    """A validation error reading `message`, about the field `at` below the
    value being validated (none: the value itself)."""
    return PydanticCustomError("testbed", "{message}", {"message": message, "at": at})


def describe(value: Any) -> str:
    """What the user wrote, in words."""
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


def half_up(x: float) -> int:
    """Round half up (4.5 -> 5), as people count, not Python's half-to-even."""
    return math.floor(x + 0.5)


def _typed(base: type, check: Any, schema: dict[str, Any]) -> Any:
    return Annotated[base, PlainValidator(check), WithJsonSchema({k: v for k, v in schema.items() if v is not None})]


def integer(what: str, ge: int = 0, le: int | None = None, description: str | None = None) -> Any:
    """An integer in [ge, le]; 3.0 counts as 3."""

    def check(value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise problem(f"expected {what}, got {describe(value)}")
        if value < ge:
            raise problem(f"expected {what} >= {ge}, got {value}")
        if le is not None and value > le:
            raise problem(f"expected {what} <= {le}, got {value}")
        return value

    return _typed(int, check, {"type": "integer", "minimum": ge, "maximum": le, "description": description})


def number(
    what: str, ge: float | None = 0.0, le: float | None = None, gt: float | None = None, description: str | None = None,
) -> Any:
    """A finite number in the bounds."""

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise problem(f"expected {what}, got {describe(value)}")
        value = float(value)
        if gt is not None and value <= gt:
            raise problem(f"expected {what} > {gt:g}, got {value:g}")
        if ge is not None and value < ge:
            raise problem(f"expected {what} >= {ge:g}, got {value:g}")
        if le is not None and value > le:
            raise problem(f"expected {what} <= {le:g}, got {value:g}")
        return value

    return _typed(float, check, {
        "type": "number", "minimum": ge, "exclusiveMinimum": gt, "maximum": le, "description": description,
    })


def seconds(value: Any, positive: bool = False) -> float:
    """Seconds from a number or a string with a unit: '250ms', '2s', '5m', '1h'."""
    what = "a time (seconds, or a string like '250ms', '2s', '1m')"
    if isinstance(value, str):
        m = TIME_RE.match(value)
        if not m:
            if value.strip().startswith("-"):
                raise problem(f"expected a time >= 0, got {value!r}")
            raise problem(f"expected {what}, got {describe(value)}")
        result = float(m["num"]) * TIME_UNITS[m["unit"]]
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise problem(f"expected {what}, got {describe(value)}")
    else:
        result = float(value)
        if result < 0:
            raise problem(f"expected a time >= 0, got {value!r}")
    if positive and result <= 0:
        raise problem(f"expected a time > 0, got {value!r}")
    if result > MAX_SECONDS:
        raise problem(f"expected a time <= {MAX_SECONDS:g}s (one week), got {value!r}")
    return round(result, 9)


_TIME_SCHEMA = {
    "description": f"seconds, or a string with a unit: '250ms', '2s', '1m', '1h'; at most {MAX_SECONDS:g} s",
    "anyOf": [
        {"type": "number", "minimum": 0, "maximum": MAX_SECONDS},
        {"type": "string", "pattern": schema_pattern(TIME_RE)},
    ],
}
Time = Annotated[float, PlainValidator(seconds), WithJsonSchema(_TIME_SCHEMA)]
PositiveTime = Annotated[float, PlainValidator(lambda v: seconds(v, positive=True)), WithJsonSchema(_TIME_SCHEMA)]


def _rate(value: Any) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise problem(f"expected a bandwidth like '10mbit', got {describe(value)}")
    try:
        bps = parse_rate(value)
    except (ValueError, OverflowError) as exc:
        raise problem(str(exc)) from None
    if bps > MAX_RATE_BPS:
        raise problem(f"expected a bandwidth <= 100gbit, got {value!r}")
    return bps


Rate = Annotated[int, PlainValidator(_rate), WithJsonSchema({
    "description": "bits per second, or tc-style '10mbit', '512kbit', '1gbit'; at most 100gbit",
    "anyOf": [
        {"type": "integer", "exclusiveMinimum": 0, "maximum": MAX_RATE_BPS},
        {"type": "string", "pattern": r"^\s*[0-9.]+\s*[kmgtKMGT]?i?bit\s*$"},
    ],
})]


def _size(value: Any) -> int:
    if isinstance(value, str):
        m = SIZE_RE.match(value)
        if not m:
            raise problem(f"expected a size in bytes (e.g. 256 or '1KiB'), got {describe(value)}")
        size = int(m["num"]) * SIZE_UNITS[(m["unit"] or "b").lower()]
    elif isinstance(value, bool) or not isinstance(value, int):
        raise problem(f"expected a message size in bytes, got {describe(value)}")
    else:
        size = value
    if size < 1 or size > MAX_MESSAGE_SIZE:
        raise problem(f"expected a size between 1 and {MAX_MESSAGE_SIZE} bytes (the wire's 1 MiB frame), got {size}")
    return size


Size = Annotated[int, PlainValidator(_size), WithJsonSchema({
    "description": f"bytes, or a string with a unit: '1KiB', '4kb'; 1 to {MAX_MESSAGE_SIZE}",
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_MESSAGE_SIZE}, {"type": "string", "pattern": schema_pattern(SIZE_RE)}],
})]


def _memory(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        value = str(value)
    m = MEMORY_RE.match(value) if isinstance(value, str) else None
    if m is None:
        raise problem(f"expected a memory size like '256m' or '1g', got {describe(value)}")
    if float(m["num"]) * MEMORY_UNITS[m["unit"].lower()] > MAX_MEMORY_BYTES:
        raise problem(f"expected a memory size <= 1024g, got {value!r}")
    return value.lower()


Memory = Annotated[str, PlainValidator(_memory), WithJsonSchema({
    "description": "container memory limit, docker style: '256m', '1g'; at most 1024g",
    "anyOf": [{"type": "string", "pattern": schema_pattern(MEMORY_RE)}, {"type": "integer", "exclusiveMinimum": 0}],
})]


# A swarm placement constraint, as `docker service create --constraint` takes it.
CONSTRAINT_RE = re.compile(r"^(node|engine)\.[A-Za-z0-9_.-]+ *(==|!=) *[^ ].*$")


def _constraint(value: Any) -> str:
    if not isinstance(value, str) or not CONSTRAINT_RE.match(value):
        raise problem("expected a swarm placement constraint like 'node.labels.zone==a' or "
                      f"'node.role!=manager', got {describe(value)}")
    return value


Constraint = Annotated[str, PlainValidator(_constraint), WithJsonSchema({
    "description": "a swarm placement constraint (docker service create --constraint): node.labels.zone==a",
    "type": "string", "pattern": CONSTRAINT_RE.pattern,
})]


def check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value) or len(value) > 200:
        raise problem(
            f"expected {what} (letters, digits, '_', '.', '-'; starting with a letter or digit), got {describe(value)}"
        )
    return value


def name_type(what: str) -> Any:
    return _typed(str, lambda value: check_name(value, what), {"type": "string", "pattern": NAME_RE.pattern, "maxLength": 200})


def text_type(what: str) -> Any:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise problem(f"expected {what}, got {describe(value)}")
        return value

    return _typed(str, check, {"type": "string", "minLength": 1})


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise problem(f"expected true or false, got {describe(value)}")
    return value


Flag = Annotated[bool, PlainValidator(_flag), WithJsonSchema({"type": "boolean"})]


def _expectation(text: Any) -> Expectation:
    if not isinstance(text, str):
        raise problem(f"expected an assertion string like 'delivery_ratio >= 0.99', got {describe(text)}")
    m = EXPECTATION_RE.match(text)
    if not m:
        raise problem(f"expected '<metric> <op> <number>' with op one of < <= > >= == !=, got {text!r}")
    if not METRIC_RE.match(m["metric"]):
        raise problem(f"expected a metric name (letters, digits, '_' and '.'), got {m['metric']!r}")
    value = float(m["value"])
    if not math.isfinite(value):
        raise problem(f"expected a finite number in {text!r}")
    return Expectation(m["metric"], m["op"], value, text.strip())  # type: ignore[arg-type]


ExpectationText = Annotated[
    Expectation, PlainValidator(_expectation), PlainSerializer(lambda e: e.text, return_type=str),
    WithJsonSchema({"type": "string", "pattern": schema_pattern(EXPECTATION_RE),
                    "description": "'<metric> <op> <number>', e.g. 'delivery_ratio >= 0.99'"}),
]
