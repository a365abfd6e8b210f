"""Time to repair after each node lost, for every router: from a node_down
to the moment the first message published at or after it had reached every
one of its expected recipients. recovery_after_churn (analysis/metrics.py)
asks when the delivery ratio is back in 1 s buckets, which a tree that
loses a subtree for a few hundred ms never shows; this is the time the
routers' repair takes, the wait for the next publish included
(docs/metrics.md, "Time to repair after a node lost")."""

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
