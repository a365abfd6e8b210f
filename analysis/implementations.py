"""Per-implementation figures for mixed runs (issue 12): our routers,
rust-libp2p, py-libp2p and bare gossipsub-interop images side by side.

Why a module of its own: an implementation's trace may hold only some event
types (a bare contract image traces PUBLISH, DELIVER and DUPLICATE from its
stdout), and a metric computed from events that were never recorded would
read as 0 — a router that sends no RPCs. topology.json says per node which
implementation ran it and which TraceType names it can record
("trace_events", null = the full go-format trace); a metric whose events an
implementation cannot record is null here and listed in `unavailable`, and
the report shows it as unavailable, never as 0.

Beside ours, each implementation gets the three figures libp2p/test-plans'
gossipsub-interop reports per message (analyze_message_deliveries.py, checked
at commit f4942573), restricted to its receivers and averaged over messages:
`dissemination_p50_ms`, the time from the message's first delivery anywhere
(theirs: the first "Received Message" of any node, not the publish) to its
median receiver's first delivery (their index len // 2 of the sorted
deliveries); `duplicates_per_node`, copies beyond the first per node per
message (theirs: a message's duplicates over the node count); `reach`, the
share of the expected receivers that got it (theirs: receivers over nodes
less the publisher), with `reach_min` its worst message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from node.trace.vocab import TraceType

# metric -> the trace event types it is computed from (all needed)
NEEDS: dict[str, frozenset[str]] = {
    "delivery_ratio": frozenset({TraceType.DELIVER_MESSAGE.name}),
    "latency_p50_ms": frozenset({TraceType.DELIVER_MESSAGE.name}),
    "latency_p99_ms": frozenset({TraceType.DELIVER_MESSAGE.name}),
    "duplicates_per_delivery": frozenset({TraceType.DELIVER_MESSAGE.name, TraceType.DUPLICATE_MESSAGE.name}),
    "rpcs_sent": frozenset({TraceType.SEND_RPC.name}),
    "bytes_sent": frozenset({TraceType.SEND_RPC.name}),
    "dissemination_p50_ms": frozenset({TraceType.DELIVER_MESSAGE.name}),
    "duplicates_per_node": frozenset({TraceType.DELIVER_MESSAGE.name, TraceType.DUPLICATE_MESSAGE.name}),
    "reach": frozenset({TraceType.DELIVER_MESSAGE.name}),
    "reach_min": frozenset({TraceType.DELIVER_MESSAGE.name}),
}


def declared(topology_nodes: list[dict[str, Any]]) -> bool:
    """Whether topology.json says which implementation ran each node (runs
    from before issue 12 do not, and get no breakdown)."""
    return any("implementation" in n for n in topology_nodes)


def _recordable(nodes: list[dict[str, Any]]) -> frozenset[str] | None:
    """The event types every one of these nodes can record; None = all."""
    lists = [frozenset(n["trace_events"]) for n in nodes if n.get("trace_events") is not None]
    if not lists:
        return None
    return frozenset.intersection(*lists)


def _float(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def test_plans_figures(names: set[str], deliveries: pd.DataFrame, duplicates: int, messages: int) -> dict[str, Any]:
    """test-plans' per-message figures for the receivers `names`, averaged
    over the messages they were expected to receive. `deliveries` holds every
    expected (message, receiver) row of the run, all implementations (the
    first delivery anywhere is the clock's zero); `duplicates`: the copies
    beyond the first these nodes received, over `messages` messages."""
    got = deliveries[deliveries["delivered"]]
    first = got.groupby("msg")["deliver_ts"].min()
    p50s: list[float] = []
    reach: list[float] = []
    for msg, rows in deliveries[deliveries["node"].isin(names)].groupby("msg", sort=True):
        times = np.sort(rows.loc[rows["delivered"], "deliver_ts"].to_numpy(np.int64))
        reach.append(len(times) / len(rows))
        if len(times):
            p50s.append((times[len(times) // 2] - first[msg]) / 1e6)
    return {
        "dissemination_p50_ms": float(np.mean(p50s)) if p50s else None,
        "duplicates_per_node": duplicates / (len(names) * messages) if messages else None,
        "reach": float(np.mean(reach)) if reach else None,
        "reach_min": float(min(reach)) if reach else None,
    }


def per_implementation(
    topology_nodes: list[dict[str, Any]], nodes_df: pd.DataFrame, per_node: pd.DataFrame, deliveries: pd.DataFrame
) -> dict[str, dict[str, Any]]:
    """Implementation name -> its nodes' figures as receivers. `nodes_df` is
    nodes.parquet's table, `per_node` the raw per-node counts (bytes_sent null
    where no RPC carried a size), `deliveries` deliveries.parquet's."""
    by_impl: dict[str, list[dict[str, Any]]] = {}
    for n in topology_nodes:
        if n.get("name"):
            by_impl.setdefault(str(n.get("implementation") or "gossip-testbed"), []).append(n)
    out: dict[str, dict[str, Any]] = {}
    messages = int(deliveries["msg"].nunique())
    for impl, members in sorted(by_impl.items()):
        names = {str(n["name"]) for n in members}
        can = _recordable(members)
        mine = nodes_df[nodes_df["node"].isin(names)]
        raw = per_node[per_node["node"].isin(names)]
        expected = int(mine["expected"].sum())
        got = int(mine["delivered_expected"].sum())
        lat = deliveries.loc[deliveries["node"].isin(names) & deliveries["delivered"], "latency_ms"].to_numpy(float)
        sized = raw["bytes_sent"].notna().any() if len(raw) else False
        figures: dict[str, Any] = {
            "delivery_ratio": got / expected if expected else None,
            "latency_p50_ms": _float(np.percentile(lat, 50)) if len(lat) else None,
            "latency_p99_ms": _float(np.percentile(lat, 99)) if len(lat) else None,
            "duplicates_per_delivery": int(mine["duplicated"].sum()) / got if got else None,
            "rpcs_sent": int(mine["rpcs_sent"].sum()),
            "bytes_sent": int(raw["bytes_sent"].sum()) if sized else None,
            **test_plans_figures(names, deliveries, int(mine["duplicated"].sum()), messages),
        }
        unavailable = sorted(m for m, need in NEEDS.items() if can is not None and not need <= can)
        for m in unavailable:
            figures[m] = None
        out[impl] = {
            "nodes": len(members),
            "trace_events": sorted(can) if can is not None else None,
            **figures,
            "unavailable": unavailable,
        }
    return out
