"""The analysis of a run directory: a PySpark job over the nodes' traces that
writes RUN_DIR/metrics/*.parquet and RUN_DIR/summary.json (docs/metrics.md),
the expectation checks that gate CI, and the self-contained HTML report.

    summary = run_analysis("runs/quick-...")          # dict, also in summary.json
    results = check_assertions(summary, ["delivery_ratio >= 0.999"])
    write_report(["runs/a", "runs/b"], "report.html")
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from analysis.assertions import AssertionResult, check_assertions, junit_xml, parse_assertion
from analysis.rundir import open_run_dir

__all__ = [
    "AssertionResult",
    "check_assertions",
    "junit_xml",
    "load_summary",
    "parse_assertion",
    "run_analysis",
    "write_report",
]

SMALL_RUN_EVENTS = 1_000_000
Progress = Callable[[str, float | None], None]


def run_analysis(
    run_dir: str | Path,
    spark_master: str | None = None,
    traces: str | Path | None = None,
    progress: Progress | None = None,
    spark_remote: str | None = None,
) -> dict[str, Any]:
    """Analyse a run directory; returns the summary (also written to
    RUN_DIR/summary.json). `spark_remote` (or $SPARK_REMOTE) names a Spark
    Connect server, else a classic session starts (analysis/spark.py). Bad
    input raises InputError; no Java, or no server at `spark_remote`,
    BackendUnavailable. `progress(stage, fraction_or_None)` reports stages."""
    from analysis.ingest import ingest, known_peer_ids
    from analysis.integrity import killed_nodes, missing_files, trace_integrity
    from analysis.metrics import compute
    from analysis.sampling import sample_summary
    from analysis.spark import get_spark

    run = open_run_dir(run_dir, traces)
    started = time.monotonic()

    def report(stage: str, frac: float | None = None) -> None:
        if progress:
            progress(stage, frac)

    events_dir = run.metrics_dir / "_events"
    report("decoding traces", 0.0)
    ing = ingest(
        run.traces,
        events_dir,
        progress=lambda d, n: report("decoding traces", d / n if n else 1.0),
        known=known_peer_ids(run.topology_nodes()),
    )
    report("starting Spark", None)
    spark = get_spark(spark_master, small=ing.events < SMALL_RUN_EVENTS, remote=spark_remote)
    try:
        summary = compute(spark, run, ing, progress=lambda stage: report(stage, None))
    finally:
        shutil.rmtree(events_dir, ignore_errors=True)
    summary["trace_files"] = ing.files
    summary["trace_integrity"] = trace_integrity(ing.reports, killed_nodes(run))
    summary["missing_files"] = missing_files(run)
    summary.update(sample_summary(run))
    summary["analysis_wall_s"] = round(time.monotonic() - started, 3)
    expectations = run.expectations()
    if expectations:
        summary["expectations"] = [
            r.to_dict() for r in check_assertions(summary, expectations, source="expectation")
        ]
    run.summary_path.write_text(json.dumps(summary, indent=2, sort_keys=False, default=_json_default) + "\n")
    report("done", 1.0)
    return summary


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def load_summary(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def write_report(
    run_dirs: list[str | Path],
    out_path: str | Path,
    spark_master: str | None = None,
    spark_remote: str | None = None,
) -> Path:
    """One self-contained HTML report for one or several runs; runs whose
    metrics are missing are analysed first."""
    from analysis.report import render_report

    runs = []
    for rd in run_dirs:
        run = open_run_dir(rd)
        if not run.summary_path.is_file() or not (run.metrics_dir / "nodes.parquet").is_file():
            run_analysis(rd, spark_master=spark_master, spark_remote=spark_remote)
        runs.append(run)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(runs), encoding="utf-8")
    return out
