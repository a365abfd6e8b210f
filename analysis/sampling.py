"""summary.json's `trace_level` and `exact`: what a sampled simulator run
(docs/simulator.md, "Trace levels") lets the analysis say, and for whom.

At the `sample` level only a seeded sample of the nodes left traces, so
every figure the analysis computes from traces (the rest of the summary)
is the sample's: its expected recipients are the traced nodes. Two sets of
figures stay exact for every node, and are reported here as such: each
node's count of each trace event type (counters.csv, written by the
simulator as it ran), and the simulator's own delivery ratio and latency
percentiles (the manifest's `sim_summary`), counted over every expected
recipient."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from analysis.rundir import RunDir
from node.errors import InputError

# the simulator's own figures that are exact at every trace level (sim_summary's names)
EXACT_SIM_FIGURES = ("messages", "expected_deliveries", "deliveries", "delivery_ratio", "latency_p50_ms",
                     "latency_p99_ms", "latency_max_ms", "rpcs", "pubsub.publish", "connect")


def sample_summary(run: RunDir) -> dict[str, Any]:
    """`trace_level` always; at the sample level also `exact` and its flat
    aliases (`exact_delivery_ratio`, ...), usable in expectations."""
    trace = run.manifest.get("trace") or {"level": "full"}
    if trace.get("level") != "sample":
        return {"trace_level": {"level": trace.get("level", "full")}}
    counters = read_counters(run.path / str(trace.get("counters")))
    sim = run.manifest.get("sim_summary") or {}
    exact: dict[str, Any] = {"nodes": len(counters), "events": event_totals(counters)}
    exact.update({k: sim.get(k) for k in EXACT_SIM_FIGURES})
    level = {
        "level": "sample", "fraction": trace.get("fraction"), "traced_nodes": trace.get("traced_nodes"),
        "nodes": trace.get("nodes"),
        "sampled": "every figure computed from the traces: the traced nodes' alone",
        "exact": "`exact`: every node's trace event counts (counters.csv) and the simulator's delivery figures",
    }
    flat = {f"exact_{k.replace('.', '_')}": v for k, v in exact.items() if not isinstance(v, dict)}
    return {"trace_level": level, "exact": exact, **flat}


def read_counters(path: Path) -> dict[str, dict[str, int]]:
    """counters.csv: {node: {trace event type name: count}}."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise InputError(f"{path}: the per-node counts of a sampled run are not readable: {exc}") from None
    try:
        return {row.pop("node"): {k: int(v) for k, v in row.items()} for row in rows}
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: not a counters file (node, then one count per trace event type): {exc}") from None


def event_totals(counters: dict[str, dict[str, int]]) -> dict[str, int]:
    """Every node's counts added up, per trace event type name."""
    out: dict[str, int] = {}
    for counts in counters.values():
        for k, v in counts.items():
            out[k] = out.get(k, 0) + v
    return out
