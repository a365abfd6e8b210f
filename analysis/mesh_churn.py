"""Mesh churn: how often nodes change their meshes, per node per minute.

A GRAFT trace event is a peer added to the tracing node's mesh of a topic,
a PRUNE trace event one removed from it (go-libp2p-pubsub's meaning; what
the node did, whoever asked), so churn is counted from those events, not
from GRAFT/PRUNE control entries on the wire (a GRAFT the receiver refuses
changes no mesh). The structure events (metrics.structure_events) already
hold them on the driver. docs/metrics.md, "Mesh churn", defines the figures."""

from __future__ import annotations

from typing import Any

import pandas as pd

from node.trace.vocab import GRAFT, PRUNE

NS = 1_000_000_000
MINUTE_NS = 60 * NS
COLUMNS = ["minute", "node", "grafts", "prunes"]


def mesh_churn(structure: pd.DataFrame, t0: int) -> pd.DataFrame:
    """Per node and minute since t0 (floor) with any mesh change: the GRAFT
    and PRUNE trace events."""
    rows = structure[structure["type"].isin([GRAFT, PRUNE])]
    if not len(rows):
        return pd.DataFrame({"minute": pd.Series([], dtype="int64"), "node": pd.Series([], dtype="object"),
                             "grafts": pd.Series([], dtype="int64"), "prunes": pd.Series([], dtype="int64")})
    minute = ((rows["ts"].astype("int64") - t0) // MINUTE_NS).rename("minute")
    out = pd.DataFrame({
        "minute": minute,
        "node": rows["node"],
        "grafts": (rows["type"] == GRAFT).astype("int64"),
        "prunes": (rows["type"] == PRUNE).astype("int64"),
    }).groupby(["minute", "node"], sort=True).sum().reset_index()
    return out[COLUMNS]


def churn_summary(churn: pd.DataFrame, nodes: int, duration_s: float) -> dict[str, Any]:
    """summary.json's `mesh_churn`: GRAFT and PRUNE trace events in the run,
    and their sum per node per minute of the run (nodes x duration: a node
    down for part of the run still counts its whole time)."""
    grafts, prunes = int(churn["grafts"].sum()), int(churn["prunes"].sum())
    node_minutes = nodes * duration_s / 60
    return {
        "grafts": grafts,
        "prunes": prunes,
        "per_node_minute": (grafts + prunes) / node_minutes if node_minutes > 0 else None,
        "max_node_minute": int((churn["grafts"] + churn["prunes"]).max()) if len(churn) else 0,
    }
