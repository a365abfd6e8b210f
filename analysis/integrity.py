"""How far the figures of a run can be trusted: damaged trace files and
missing run files (docs/metrics.md, "Trace integrity" and "Missing files").

A damaged trace lowers the delivery ratio without saying why; a missing
events.jsonl silently drops churn from the expected recipients. Both are
counted here, put in summary.json, shown as banners in the report, and can
fail `testbed analyze --strict`.
"""

from __future__ import annotations

from typing import Any

from analysis.ingest import TraceFileReport
from analysis.rundir import RunDir

# What the analysis loses without each run file.
MISSING_FILE_EFFECTS: dict[str, str] = {
    "manifest.json": "t0 is taken from events.jsonl or the first trace event; backend, shaping path and "
    "host facts are unknown",
    "topology.json": "no lower bound or stretch (no overlay latencies); nodes that wrote no trace are not "
    "counted; subscriptions come from JOIN/LEAVE only",
    "events.jsonl": "no churn: nodes count as up between their first and last trace event, so expected "
    "recipients ignore downtime; recovery after churn and publishes not traced are unavailable",
}
# A node stopped this way may leave its trace cut mid-record: expected, not damage.
CUT_BY_CHURN = frozenset({"kill"})


def killed_nodes(run: RunDir) -> set[str]:
    return {
        str(e["node"])
        for e in run.events
        if e.get("kind") == "node_down" and e.get("cause") in CUT_BY_CHURN and e.get("node")
    }


def trace_integrity(reports: tuple[TraceFileReport, ...] | list[TraceFileReport], killed: set[str]) -> dict[str, Any]:
    """summary.json's `trace_integrity`. A trace cut at its end by a node the
    run killed is counted in `truncated` and listed under `cut_by_kill`, but
    does not make the node damaged; any other cut or corrupt stretch does."""
    damaged = [r for r in reports if r.corrupt or (r.truncated and r.node not in killed)]
    return {
        "files": len(reports),
        "records": sum(r.records for r in reports),
        "truncated": sum(1 for r in reports if r.truncated),
        "corrupt": sum(1 for r in reports if r.corrupt),
        "bytes_skipped": sum(r.bytes_skipped for r in reports),
        "damaged_nodes": sorted({r.node for r in damaged}),
        "cut_by_kill": sorted({r.node for r in reports if r.truncated and not r.corrupt and r.node in killed}),
        "damaged_files": [
            {
                "file": r.file,
                "node": r.node,
                "records": r.records,
                "bytes": r.bytes,
                "bytes_skipped": r.bytes_skipped,
                "truncated": r.truncated,
                "corrupt": r.corrupt,
            }
            for r in damaged
        ],
    }


def missing_files(run: RunDir) -> list[dict[str, str]]:
    """summary.json's `missing_files`: each run file absent and what it costs."""
    present = {
        "manifest.json": bool(run.manifest) or (run.path / "manifest.json").is_file(),
        "topology.json": run.topology is not None,
        "events.jsonl": run.has_events,
    }
    return [{"file": name, "affects": MISSING_FILE_EFFECTS[name]} for name, ok in present.items() if not ok]


def strict_traces_option(run: RunDir) -> bool:
    """The experiment's `strict_traces` option, as experiment.resolved.yaml
    records it (written only when true)."""
    value = run.experiment.get("strict_traces", False)
    return value is True
