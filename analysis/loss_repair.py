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

from bisect import bisect_left
from collections import defaultdict
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
    the slowest repair (None when one never came). In time order.

    The tables are indexed once (who each node fed, per message; each
    source's publish times; each node's expected rows in publish order), so
    a loss costs its own children, not a scan of every delivery: a 100,000-
    node run has thousands of losses."""
    pub = deliveries.groupby("msg")["publish_ts"].first()
    by_source: dict[Any, list[tuple[int, str]]] = defaultdict(list)
    for m, ts in sorted(pub.items(), key=lambda kv: kv[1]):
        by_source[(publishers.get(m) or [None])[0]].append((int(ts), m))
    fed: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for m, n, sender in zip(first["msg"], first["node"], first["from_peer"]):
        fed[sender][m].append(n)
    downs: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for n, start, end in down:
        downs[n].append((start, end))
    # deliver_ts stays integer nanoseconds (a float64 holds 1.8e18 ns only to 256 ns): a mask says which are set
    rows = {n: (g["publish_ts"].to_numpy(np.int64), g["deliver_ts"].notna().to_numpy(),
                g["deliver_ts"].fillna(0).to_numpy(np.int64), g["latency_ms"].to_numpy(np.float64))
            for n, g in deliveries.sort_values("publish_ts", kind="stable").groupby("node", sort=False)}
    out = []
    for node, ts in sorted(resets, key=lambda r: (r[1], r[0])):
        last = [_last_before(msgs, ts) for source, msgs in by_source.items() if source != node]
        fed_now = {n for m in last if m is not None for n in fed[node].get(m, ())} - {node}
        children = sorted(n for n in fed_now if not any(a <= ts < b for a, b in downs.get(n, ())))
        if not children:
            continue
        waits, latencies, waiting = [], [], 0
        for child in children:
            if child not in rows:
                continue
            pts, delivered, dts, lat = rows[child]
            k = int(np.searchsorted(pts, ts, side="left"))
            if k == len(pts):
                continue
            waiting += 1
            got = k + np.flatnonzero(delivered[k:])
            if len(got):
                i = got[np.argmin(dts[got])]
                waits.append(float(int(dts[i]) - ts) / NS)
                latencies.append(float(lat[i]))
        never = waiting - len(waits)
        out.append({"node": node, "t_s": (ts - t0) / NS, "children": len(children), "waiting": waiting,
                    "unrepaired": never, "repair_s": float(max(waits)) if waits and not never else None,
                    "first_latency_ms": latencies})
    return out


def _last_before(msgs: list[tuple[int, str]], ts: int) -> str | None:
    """The last of a source's (publish time, message) pairs, in time order,
    published before `ts`."""
    k = bisect_left(msgs, (ts, ""))
    return msgs[k - 1][1] if k else None


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
