"""What the report reads from a run directory: summary.json, the metrics
tables and the run's own files (analysis/rundir.py), loaded once per run."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from analysis.rundir import RunDir
from node.trace.vocab import RunEvent

# metrics/<name>.parquet tables the report reads (docs/metrics.md)
TABLES = ("latency_cdf", "timeseries_delivery", "timeseries_control", "mesh_degree", "mesh_degree_hist",
          "duplicates_hist", "nodes", "messages", "deliveries", "first_deliveries", "mesh_links",
          "mesh_churn", "scores", "mesh_sybils", "sybil_scores", "tree_degree")


@dataclass(frozen=True)
class RunData:
    run: RunDir
    summary: dict
    tables: dict[str, pd.DataFrame]
    index: int  # the run's position in the report: ids of its charts start r<index>-

    def table(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    @property
    def t0(self) -> int:
        return int(self.summary.get("t0_ns") or 0)

    @property
    def duration_s(self) -> float:
        return max(1.0, float(self.summary.get("duration_s") or 0))


def _table(run: RunDir, name: str) -> pd.DataFrame:
    path = run.metrics_dir / f"{name}.parquet"
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def load(run: RunDir, index: int) -> RunData:
    return RunData(run, json.loads(run.summary_path.read_text()), {t: _table(run, t) for t in TABLES}, index)


def churn_marks(d: RunData) -> list[tuple[float, str]]:
    """(t in s since t0, "action nodes") per churn event of events.jsonl."""
    marks = []
    for e in d.run.events:
        if e.get("kind") == RunEvent.CHURN:
            nodes = e.get("nodes") or []
            who = ",".join(nodes[:3]) + ("…" if len(nodes) > 3 else "")
            marks.append(((e["t_ns"] - d.t0) / 1e9, f"{e.get('action')} {who}".strip()))
    return marks
