"""Time to repair after each node lost, for every router: from a node_down
to the moment the first message published at or after it had reached every
one of its expected recipients. recovery_after_churn (analysis/metrics.py)
asks when the delivery ratio is back in 1 s buckets, which a tree that
loses a subtree for a few hundred ms never shows; this is the time the
routers' repair takes, the wait for the next publish included
(docs/metrics.md, "Time to repair after a node lost").

The same per subtree: the nodes a lost node fed (their first copy of the
last message from each publisher came from it) and how long each waited
for its next message. A tree (episub) has to find them a new parent; in a
mesh (gossipsub) their next copy takes another of its paths
(docs/metrics.md, "Time to repair a lost node's subtree")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

NS = 1_000_000_000


def repair_after_loss(per_message: pd.DataFrame, resets: list[tuple[str, int]], t0: int) -> list[dict[str, Any]]:
    """Per node lost (node_down): seconds from the loss to the first
    delivery of the last expected recipient of the first message published
    at or after it that reached all of them (its publish time plus its
    largest latency); None when no later message did. In time order."""
    m = per_message[per_message["expected"] > 0].sort_values("publish_ts")
    pub = m["publish_ts"].to_numpy(dtype=np.int64)
    complete = (m["delivered"] == m["expected"]).to_numpy()
    done_at = pub + np.nan_to_num(m["latency_max_ms"].to_numpy(dtype=np.float64)) * 1e6
    out = []
    for node, ts in sorted(resets, key=lambda r: (r[1], r[0])):
        later = np.nonzero((pub >= ts) & complete)[0]
        first = later[0] if len(later) else None
        out.append({"node": node, "t_s": (ts - t0) / NS,
                    "repair_s": float((done_at[first] - ts) / NS) if first is not None else None})
    return out


def loss_summary(after: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json's `repair_after_loss`."""
    times = np.array([a["repair_s"] for a in after if a["repair_s"] is not None], dtype=np.float64)
    return {
        "losses": len(after),
        "unrepaired": len(after) - len(times),
        "p50_s": float(np.quantile(times, 0.5)) if len(times) else None,
        "max_s": float(times.max()) if len(times) else None,
        "per_loss": after,
    }


def subtree_repair(first: pd.DataFrame, deliveries: pd.DataFrame, publishers: dict[str, list[str]],
                   resets: list[tuple[str, int]], down: list[tuple[str, int, int]], t0: int) -> list[dict[str, Any]]:
    """Per node lost (node_down) that fed others. `first`: every node's
    first delivery of every message (msg, node, from_peer); `deliveries`:
    the expected-recipient rows (msg, node, publish_ts, deliver_ts,
    latency_ms). Its children: the nodes whose first copy of the last
    message each publisher published before the loss came from it, less
    those down at the loss. A child waits when it is an expected recipient
    of a message published at or after the loss; its repair is its first
    delivery of such a message, `repair_s` after the loss with that copy's
    latency. Per loss: children, those waiting, those never repaired, and
    the slowest repair (None when one never came). In time order."""
    pub = deliveries.groupby("msg")["publish_ts"].first()
    source = {m: (publishers.get(m) or [None])[0] for m in pub.index}
    from_peer = first.set_index(["msg", "node"])["from_peer"]
    out = []
    for node, ts in sorted(resets, key=lambda r: (r[1], r[0])):
        before = pub[pub < ts]
        last = {source[m]: m for m in before.sort_values(kind="stable").index if source[m] != node}
        fed = from_peer[from_peer.index.get_level_values("msg").isin(list(last.values())) & (from_peer == node)]
        gone = {n for n, start, end in down if start <= ts < end}
        children = sorted(set(fed.index.get_level_values("node")) - {node} - gone)
        if not children:
            continue
        later = deliveries[(deliveries["publish_ts"] >= ts) & deliveries["node"].isin(children)]
        got = later[later["deliver_ts"].notna()].sort_values("deliver_ts").groupby("node").first()
        waiting = set(later["node"])
        waits = ((got["deliver_ts"] - ts) / NS).to_numpy(dtype=np.float64)
        never = len(waiting - set(got.index))
        out.append({"node": node, "t_s": (ts - t0) / NS, "children": len(children), "waiting": len(waiting),
                    "unrepaired": never,
                    "repair_s": float(waits.max()) if len(waits) and not never else None,
                    "first_latency_ms": [float(v) for v in got["latency_ms"]]})
    return out


def subtree_summary(after: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json's `subtree_repair`; per loss, the children's first
    latencies reduce to their largest."""
    times = np.array([a["repair_s"] for a in after if a["repair_s"] is not None], dtype=np.float64)
    lat = np.array([v for a in after for v in a["first_latency_ms"]], dtype=np.float64)
    return {
        "losses": len(after),
        "children": sum(a["children"] for a in after),
        "waiting": sum(a["waiting"] for a in after),
        "unrepaired": sum(a["unrepaired"] for a in after),
        "p50_s": float(np.quantile(times, 0.5)) if len(times) else None,
        "max_s": float(times.max()) if len(times) else None,
        "first_latency_p50_ms": float(np.quantile(lat, 0.5)) if len(lat) else None,
        "first_latency_max_ms": float(lat.max()) if len(lat) else None,
        "per_loss": [{**{k: v for k, v in a.items() if k != "first_latency_ms"},
                      "first_latency_max_ms": max(a["first_latency_ms"], default=None)} for a in after],
    }
