"""The honest nodes' side of a run with sybils: delivery ratio and latency
percentiles over the expected recipients that are not sybils, which is what
an attack is judged by (the hardening report measures honest nodes only).
Which nodes are sybils comes from topology.json (`adversary` not null); in a
run without sybils every node is honest and the figures equal the overall
ones. Percentiles are computed as the overall ones are (Spark's
percentile_approx, analysis/deliveries.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.deliveries import spark_percentiles


def sybil_names(topology_nodes: list[dict[str, Any]]) -> set[str]:
    return {str(n["name"]) for n in topology_nodes if n.get("name") and n.get("adversary")}


def honest_summary(topology_nodes: list[dict[str, Any]], deliveries: pd.DataFrame) -> dict[str, Any]:
    """summary.json's `sybils` (how many) and the honest figures, flat so
    that expectations can name them. `deliveries` is deliveries.parquet's
    table (one row per message and expected recipient)."""
    sybils = sybil_names(topology_nodes)
    honest = deliveries[~deliveries["node"].isin(sybils)]
    expected = len(honest)
    delivered = int(honest["delivered"].sum())
    lat = honest.loc[honest["delivered"], "latency_ms"].to_numpy(float)
    p50, p99 = (spark_percentiles(np.zeros(len(lat), dtype=np.int64), lat, 1, [0.5, 0.99])[0].tolist()
                if len(lat) else (None, None))
    return {
        "sybils": len(sybils),
        "honest_expected_deliveries": expected,
        "honest_deliveries": delivered,
        "honest_delivery_ratio": delivered / expected if expected else None,
        "honest_latency_p50_ms": None if p50 is None else float(p50),
        "honest_latency_p99_ms": None if p99 is None else float(p99),
    }
