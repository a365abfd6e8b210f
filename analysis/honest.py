"""The honest nodes' side of a run with sybils: delivery ratio and latency
percentiles over the expected recipients that are not sybils, over the
victims the sybils eclipse, and over the honest recipients of the messages
of the publishers the sybils censor, which is what an attack is judged by
(the hardening report measures honest nodes only).
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


def victim_names(topology_nodes: list[dict[str, Any]]) -> set[str]:
    """The nodes some sybil eclipses."""
    return {str(t) for n in topology_nodes if n.get("adversary") for t in n["adversary"].get("eclipse") or ()}


def censored_names(topology_nodes: list[dict[str, Any]]) -> set[str]:
    """The publishers some sybil censors (`censor_publishers`)."""
    return {str(t) for n in topology_nodes if n.get("adversary")
            for t in n["adversary"].get("censor_publishers") or ()}


def honest_summary(topology_nodes: list[dict[str, Any]], deliveries: pd.DataFrame,
                   publishers: dict[str, list[str]]) -> dict[str, Any]:
    """summary.json's `sybils`, `victims` and `censored_publishers` (how
    many) and the figures of the honest nodes, of the victims among them
    and of the honest nodes' deliveries of the messages the censored
    publishers published (ratios and latencies null without victims,
    without censored publishers), flat so that expectations can name them.
    `deliveries` is deliveries.parquet's table (one row per message and
    expected recipient); `publishers` gives each message's publishers."""
    sybils = sybil_names(topology_nodes)
    victims = victim_names(topology_nodes)
    censored = censored_names(topology_nodes)
    honest_rows = deliveries[~deliveries["node"].isin(sybils)]
    censored_msgs = {m for m, pubs in publishers.items() if censored.intersection(pubs)}
    honest = _figures("honest", honest_rows)
    victim = _figures("victim", deliveries[deliveries["node"].isin(victims)])
    of_censored = _figures("censored", honest_rows[honest_rows["msg"].isin(censored_msgs)])
    return {"sybils": len(sybils), "victims": len(victims), "censored_publishers": len(censored),
            **honest, **victim, **of_censored}


def _figures(who: str, rows: pd.DataFrame) -> dict[str, Any]:
    expected = len(rows)
    delivered = int(rows["delivered"].sum())
    lat = rows.loc[rows["delivered"], "latency_ms"].to_numpy(float)
    p50, p99 = (spark_percentiles(np.zeros(len(lat), dtype=np.int64), lat, 1, [0.5, 0.99])[0].tolist()
                if len(lat) else (None, None))
    return {
        f"{who}_expected_deliveries": expected,
        f"{who}_deliveries": delivered,
        f"{who}_delivery_ratio": delivered / expected if expected else None,
        f"{who}_latency_p50_ms": None if p50 is None else float(p50),
        f"{who}_latency_p99_ms": None if p99 is None else float(p99),
    }
