"""Expectations and --assert expressions: `<metric> <op> <number>`.

A metric is a flat key of summary.json (`delivery_ratio`, `latency_p99_ms`)
or a dotted path into it (`latency_ms.p99`, `control.graft`). The parser is a
single regular expression and a float(): nothing is evaluated.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import asdict, dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from node.errors import InputError

OPS = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}
_EXPR = re.compile(
    r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*"
    r"(?P<op><=|>=|==|!=|<|>)\s*"
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)


@dataclass(frozen=True)
class Assertion:
    metric: str
    op: str
    value: float
    text: str


@dataclass(frozen=True)
class AssertionResult:
    expr: str
    metric: str
    op: str
    expected: float
    actual: float | None
    passed: bool
    message: str
    source: str = "assert"  # "expectation" (experiment file) or "assert" (command line)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_assertion(text: str) -> Assertion:
    m = _EXPR.match(text)
    if not m:
        raise InputError(
            f"bad assertion {text!r}: expected '<metric> <op> <number>' with op one of "
            f"{', '.join(OPS)} (e.g. 'delivery_ratio >= 0.999')"
        )
    return Assertion(m["metric"], m["op"], float(m["value"]), text.strip())


# The top-level keys of summary.json (docs/metrics.md): an expression naming
# anything else is rejected before the analysis runs. tests/test_ready_files.py
# checks every key of every ready file's summary against it.
SUMMARY_KEYS = frozenset(
    """run backend nodes events messages expected_deliveries deliveries unexpected_deliveries
    delivery_ratio messages_lost messages_complete min_message_delivery_ratio latency_ms duplicates
    duplicates_per_message duplicates_per_delivery transmissions amplification control rpcs bytes
    load stretch lower_bound_available mesh_degree recovery recovery_max_s recovered_all t0_ns
    duration_s trace_files analysis_wall_s deliver_events expectations missing_files trace_integrity
    trace_level implementations scores mesh_snapshots in_flight messages_propagating_at_end
    rpcs_in_flight_at_end rpcs_unreceived
    latency_p50_ms latency_p90_ms latency_p99_ms latency_max_ms latency_mean_ms
    control_publish control_deliver control_graft control_prune control_ihave control_iwant
    stretch_p50 stretch_p90 stretch_p99 mesh_degree_mean mesh_degree_p50 mesh_degree_min
    mesh_degree_max rpcs_sent rpcs_received rpcs_dropped bytes_sent bytes_received bytes_dropped
    load_gini load_max_over_mean dropped_rpcs
    sybils honest_expected_deliveries honest_deliveries honest_delivery_ratio honest_latency_p50_ms
    honest_latency_p99_ms victims victim_expected_deliveries victim_deliveries victim_delivery_ratio
    victim_latency_p50_ms victim_latency_p99_ms mesh_sybil_fraction_max mesh_sybil_fraction_mean
    mesh_sybil_fraction_end victim_mesh_sybil_fraction_max victim_mesh_sybil_fraction_mean
    victim_mesh_sybil_fraction_end victim_mesh_all_sybil_share censored_publishers
    censored_expected_deliveries censored_deliveries censored_delivery_ratio censored_latency_p50_ms
    censored_latency_p99_ms""".split()
)
# Groups whose figures also have flat names, `<group>_<figure>`: those every
# summary has, those only some runs have (metrics.flat_aliases), and a
# sampled run's exact counts (sampling.py).
ALWAYS_ALIASED = ("stayed_up", "idontwant", "prune", "mesh_churn")
SOMETIMES_ALIASED = ("repair_after_loss", "subtree_repair", "tree")
ALIASED_GROUPS = (*ALWAYS_ALIASED, *SOMETIMES_ALIASED, "exact")


def known_metric(metric: str) -> bool:
    """Whether `metric` (a key, a dotted path or a flat alias) can be in a summary."""
    top = metric.split(".")[0]
    return top in SUMMARY_KEYS or top in ALIASED_GROUPS or any(top.startswith(g + "_") for g in ALIASED_GROUPS)


def validate_assertion(text: str) -> Assertion:
    """Parse and check that the metric names a summary key (before any analysis)."""
    a = parse_assertion(text)
    if not known_metric(a.metric):
        raise InputError(
            f"bad assertion {text!r}: unknown metric {a.metric!r} (known: {', '.join(sorted(SUMMARY_KEYS))}, "
            f"and the figures of {', '.join(ALIASED_GROUPS)} as <group>_<figure>)"
        )
    return a


def lookup(summary: dict[str, Any], metric: str) -> tuple[bool, Any]:
    """(found, value) for a flat key or a dotted path."""
    if metric in summary:
        return True, summary[metric]
    node: Any = summary
    for part in metric.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def check_assertions(
    summary: dict[str, Any], exprs: list[str], source: str = "assert"
) -> list[AssertionResult]:
    """Check each `<metric> <op> <number>` against the summary. A bad
    expression or an unknown metric raises InputError; a metric without a
    value (e.g. latency when nothing was delivered) fails the assertion."""
    parsed = [parse_assertion(e) for e in exprs]
    results = []
    for a in parsed:
        found, value = lookup(summary, a.metric)
        if not found:
            known = sorted(k for k, v in summary.items() if isinstance(v, (int, float)) or v is None)
            raise InputError(
                f"bad assertion {a.text!r}: unknown metric {a.metric!r} (known: {', '.join(known)})"
            )
        if isinstance(value, bool):
            value = float(value)
        if value is None or not isinstance(value, (int, float)) or (
            isinstance(value, float) and math.isnan(value)
        ):
            results.append(
                AssertionResult(a.text, a.metric, a.op, a.value, None, False,
                                f"{a.metric} has no value in this run", source)
            )
            continue
        ok = bool(OPS[a.op](float(value), a.value))
        msg = f"{a.metric} = {value:.6g} {'satisfies' if ok else 'violates'} {a.op} {a.value:g}"
        results.append(AssertionResult(a.text, a.metric, a.op, a.value, float(value), ok, msg, source))
    return results


def junit_xml(results: list[AssertionResult], suite: str = "testbed.analyze", time_s: float = 0.0) -> str:
    """JUnit XML: one testcase per assertion, failures with the actual value."""
    failures = sum(not r.passed for r in results)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<testsuites tests={quoteattr(str(len(results)))} failures={quoteattr(str(failures))}>",
        f"  <testsuite name={quoteattr(suite)} tests={quoteattr(str(len(results)))} "
        f"failures={quoteattr(str(failures))} errors=\"0\" time={quoteattr(f'{time_s:.3f}')}>",
    ]
    for r in results:
        name = quoteattr(r.expr)
        cls = quoteattr(f"{suite}.{r.source}")
        if r.passed:
            lines.append(f"    <testcase classname={cls} name={name}>")
            lines.append(f"      <system-out>{escape(r.message)}</system-out>")
            lines.append("    </testcase>")
        else:
            lines.append(f"    <testcase classname={cls} name={name}>")
            lines.append(
                f"      <failure message={quoteattr(r.message)} type=\"AssertionError\">"
                f"{escape(r.message)}</failure>"
            )
            lines.append("    </testcase>")
    lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"
