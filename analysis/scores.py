"""Score distributions over time, from the run directory's score files.

Routers that score their peers (gossipsub v1.1 and v1.2) write, at every
heartbeat, each connected peer's score in scores/<node>.csv
(node/trace/scores.py); go's trace format has no place for scores, so these
figures come from those files, not from the traces. The files grow with
nodes x peers x heartbeats, not with messages, so the driver reads them
with pandas. docs/metrics.md, "Peer scores", defines the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

NS = 1_000_000_000
# the distribution per second: these quantiles of every (node, peer) score recorded in it
QUANTILES = {"min": 0.0, "p10": 0.1, "p50": 0.5, "p90": 0.9, "max": 1.0}
COLUMNS = ["t_s", "samples", "negative", *QUANTILES]
SIDE_COLUMNS = {"t_s": "int64", "side": "object", "samples": "int64", "p10": "float64", "p50": "float64",
                "p90": "float64"}


def score_files(run_path: Path) -> list[Path]:
    return sorted((run_path / "scores").glob("*.csv"))


def read_scores(run_path: Path) -> pd.DataFrame:
    """Every score file's rows (time_ns, score) with the recording node's name
    (the file's stem); empty when the run has none. A row cut short (a node
    killed mid-write) lacks its score and is left out."""
    frames = [pd.read_csv(p, usecols=["time_ns", "score"]).dropna().assign(node=p.stem) for p in score_files(run_path)]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({"time_ns": pd.Series([], dtype="int64"), "score": pd.Series([], dtype="float64"),
                             "node": pd.Series([], dtype="object")})
    return pd.concat(frames, ignore_index=True)


def scores_over_time(rows: pd.DataFrame, t0: int) -> pd.DataFrame:
    """Per second since t0 (floor): how many scores were recorded, how many
    were below zero, and the QUANTILES of them (linear interpolation)."""
    if not len(rows):
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c in ("t_s", "samples", "negative") else "float64")
                             for c in COLUMNS})
    t_s = (rows["time_ns"].astype("int64") - t0) // NS
    g = rows["score"].astype("float64").groupby(t_s.rename("t_s"))
    out = pd.DataFrame({"samples": g.size(), "negative": g.apply(lambda s: int((s < 0).sum()))})
    for name, q in QUANTILES.items():
        out[name] = g.quantile(q)
    out = out.reset_index()
    out["t_s"] = out["t_s"].astype("int64")
    out["negative"] = out["negative"].astype("int64")
    return out[COLUMNS]


def score_summary(rows: pd.DataFrame) -> dict[str, Any] | None:
    """summary.json's `scores`: over every score recorded in the run; None
    when no router recorded any."""
    if not len(rows):
        return None
    s = rows["score"].astype("float64").to_numpy()
    return {
        "samples": int(len(s)),
        "nodes": int(rows["node"].nunique()),
        "negative": int((s < 0).sum()),
        "min": float(s.min()),
        "p50": float(np.quantile(s, 0.5)),
        "max": float(s.max()),
    }


def scores_by_side(run_path: Path, sybil_ids: set[str], sybils: set[str], t0: int) -> pd.DataFrame:
    """sybil_scores.parquet, in a run with sybils: the scores honest nodes
    gave their peers, per second since t0 (floor) and per side of the peer
    (`side`: "honest" or "sybil", by its base58 peer id in `sybil_ids`):
    how many, and their p10, p50 and p90. How v1.1 tells the attackers
    apart, or does not. Empty without sybils or score files."""
    frames = [pd.read_csv(p, usecols=["time_ns", "peer", "score"]).dropna()
              for p in score_files(run_path) if p.stem not in sybils] if sybil_ids else []
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not len(rows):
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in SIDE_COLUMNS.items()})
    key = [((rows["time_ns"].astype("int64") - t0) // NS).rename("t_s"),
           rows["peer"].isin(sybil_ids).map({True: "sybil", False: "honest"}).rename("side")]
    g = rows["score"].astype("float64").groupby(key)
    out = pd.DataFrame({"samples": g.size(), "p10": g.quantile(0.1), "p50": g.quantile(0.5), "p90": g.quantile(0.9)})
    return out.reset_index().astype(SIDE_COLUMNS)[list(SIDE_COLUMNS)]
