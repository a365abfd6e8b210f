"""IDONTWANT (gossipsub v1.2) figures: what was sent and received, and an
upper bound on the message bytes it saved.

The counts come from the RPC metas (ControlMeta.idontwant, field 5 as go's
trace.proto numbers it), summed per node by the job (metrics.per_node_counts).
What IDONTWANT saves is a copy not sent, which no trace records; the bound
here is the one the traces support (docs/metrics.md, "IDONTWANT"): every
message id a node received in an IDONTWANT is at most one copy of that
message the node then did not send to that peer."""

from __future__ import annotations

from typing import Any

import pandas as pd


def message_bytes(publishes: list[dict[str, Any]]) -> int | None:
    """The workload's message size when every publish in events.jsonl has
    the same one; None when they differ or no size was logged."""
    sizes = [p.get("size") for p in publishes]
    if not sizes or None in sizes:
        return None
    distinct = {int(size) for size in sizes}
    return distinct.pop() if len(distinct) == 1 else None


def idontwant_summary(per_node: pd.DataFrame, publishes: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json's `idontwant`: entries and message ids sent and
    received, the message size and bytes_saved_max = ids received x size."""

    def total(col: str) -> int:
        return int(per_node[col].sum()) if len(per_node) else 0

    size = message_bytes(publishes)
    received_ids = total("idontwant_ids_received")
    return {
        "sent": total("idontwant_sent"),
        "received": total("idontwant_received"),
        "ids_sent": total("idontwant_ids_sent"),
        "ids_received": received_ids,
        "message_bytes": size,
        "bytes_saved_max": received_ids * size if size is not None else None,
    }
