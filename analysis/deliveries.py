"""The stages that read the deliveries table, run on the driver with numpy.

Why here and not in Spark: the deliveries table (one row per expected
recipient of a message: docs/metrics.md) comes to the driver once anyway, as
Arrow, to be written to deliveries.parquet. Every figure computed from it (the
lower bound and stretch, per message, the delivery time series, per node, the
latency distribution, messages still in flight) is a sort or a group-by over
those rows; done in Spark each was one more job with its own shuffle, which
on a small run costs far more than the arithmetic and on a large one repeats
work the driver can do in one pass over arrays it already holds.

Percentiles are Spark's `percentile` (exact, linear interpolation between the
two closest ranks, nulls ignored; `spark_percentiles`), so the figures are
the ones Spark computed before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import numpy as np
import pandas as pd
import pyarrow as pa

NS = 1_000_000_000

# deliveries.parquet's columns, in order, with their types
DELIVERIES_SCHEMA = pa.schema(
    [
        ("msg", pa.string()),
        ("topic", pa.string()),
        ("node", pa.string()),
        ("publish_ts", pa.int64()),
        ("deliver_ts", pa.int64()),
        ("delivered", pa.bool_()),
        ("latency_ms", pa.float64()),
        ("lower_bound_ms", pa.float64()),
        ("stretch", pa.float64()),
    ]
)


def spark_percentiles(groups: np.ndarray, values: np.ndarray, n_groups: int, ps: list[float]) -> np.ndarray:
    """Per group (codes 0..n_groups-1), Spark's exact `percentile` of the
    non-NaN values at each fraction in `ps`: position p * (count - 1) in the
    sorted values, linear interpolation between the ranks either side as
    Spark 4 writes it (lower + (higher - lower) * fraction: the same figure
    to the last bit), NaN for a group without values. Shape (n_groups, len(ps))."""
    keep = ~np.isnan(values)
    g, v = groups[keep], values[keep]
    order = np.lexsort((v, g))
    g, v = g[order], v[order]
    counts = np.bincount(g, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    out = np.full((n_groups, len(ps)), np.nan)
    has = np.flatnonzero(counts)
    if len(has) == 0:
        return out
    base = starts[has]
    last = (counts[has] - 1).astype(np.float64)
    for j, p in enumerate(ps):
        pos = last * p
        lo, hi = np.floor(pos), np.ceil(pos)
        lk = v[base + lo.astype(np.int64)]
        hk = v[base + hi.astype(np.int64)]
        out[has, j] = np.where((hi == lo) | (hk == lk), lk, lk + (hk - lk) * (pos - lo))
    return out


def deliveries_table(
    rows: pa.Table,
    publishers: dict[str, list[str]],
    dist: dict[str, dict[str, float]] | None,
) -> pa.Table:
    """deliveries.parquet's table from the expected-recipient rows (msg,
    topic, node, publish_ts, deliver_ts): delivered, latency_ms (first
    delivery minus publish), lower_bound_ms (shortest overlay path from the
    nearest of the message's publishers; null without topology edges or a
    path) and stretch (latency over that bound, where it is positive)."""
    deliver = rows["deliver_ts"]
    delivered = deliver.is_valid().to_numpy(zero_copy_only=False)
    pub_ts = rows["publish_ts"].to_numpy(zero_copy_only=False).astype(np.int64)
    dlv_ts = deliver.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    latency = np.where(delivered, (dlv_ts - pub_ts) / 1e6, np.nan)
    lower = lower_bounds(
        rows["msg"].to_pandas(), rows["node"].to_pandas(), publishers, dist
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        stretch = np.where(delivered & (lower > 0), latency / lower, np.nan)
    computed = {
        "delivered": pa.array(delivered),
        "latency_ms": pa.array(latency, mask=np.isnan(latency)),
        "lower_bound_ms": pa.array(lower, mask=np.isnan(lower)),
        "stretch": pa.array(stretch, mask=np.isnan(stretch)),
    }
    return pa.Table.from_arrays(
        [computed[f.name] if f.name in computed else rows[f.name].cast(f.type) for f in DELIVERIES_SCHEMA],
        schema=DELIVERIES_SCHEMA,
    )


def lower_bounds(
    msgs: pd.Series, nodes: pd.Series, publishers: dict[str, list[str]], dist: dict[str, dict[str, float]] | None
) -> np.ndarray:
    """Per (message, node) row: the least shortest-path distance (ms) from
    any of the message's publishers to the node; NaN where none is known."""
    out = np.full(len(msgs), np.nan)
    if not dist or len(msgs) == 0:
        return out
    node_names = pd.Index(sorted({n for ds in dist.values() for n in ds}))
    src_names = sorted(dist)
    table = np.full((len(src_names) + 1, len(node_names) + 1), np.inf)  # last row/column: unknown
    for i, src in enumerate(src_names):
        ds = dist[src]
        cols = node_names.get_indexer(list(ds))
        table[i, cols] = list(ds.values())
    node_idx = node_names.get_indexer(nodes)
    node_idx[node_idx < 0] = len(node_names)
    src_pos = {s: i for i, s in enumerate(src_names)}
    msg_codes, msg_names = pd.factorize(msgs)
    pubs = [[src_pos.get(p, len(src_names)) for p in publishers.get(m) or ()] for m in msg_names]
    width = max((len(p) for p in pubs), default=0)
    best = np.full(len(msgs), np.inf)
    for k in range(width):
        src_of_msg = np.array([p[k] if k < len(p) else len(src_names) for p in pubs], dtype=np.int64)
        best = np.minimum(best, table[src_of_msg[msg_codes], node_idx])
    out[np.isfinite(best)] = best[np.isfinite(best)]
    return out


def per_message(msgs: pd.DataFrame, deliveries: pd.DataFrame, t0: int) -> pd.DataFrame:
    """Per message (`msgs`: msg, publish_ts, topic, publishers, duplicates):
    expected and delivered recipients, median and max latency, duplicates,
    delivery ratio, publish time from t0 (messages.parquet)."""
    index = pd.Index(msgs["msg"])
    code = index.get_indexer(deliveries["msg"])
    known = code >= 0
    code, lat = code[known], deliveries["latency_ms"].to_numpy()[known]
    n = len(index)
    expected = np.bincount(code, minlength=n).astype(np.int64)
    delivered = np.bincount(code, weights=deliveries["delivered"].to_numpy()[known], minlength=n).astype(np.int64)
    p50 = spark_percentiles(code, lat, n, [0.5])[:, 0]
    latmax = np.full(n, -np.inf)
    ok = ~np.isnan(lat)
    np.maximum.at(latmax, code[ok], lat[ok])
    latmax[np.isinf(latmax)] = np.nan
    out = msgs[["msg", "publish_ts", "topic", "publishers"]].copy()
    out["expected"] = expected
    out["delivered"] = delivered
    out["latency_p50_ms"] = p50
    out["latency_max_ms"] = latmax
    out["duplicates"] = msgs["duplicates"].fillna(0).astype("int64").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["delivery_ratio"] = np.where(expected > 0, delivered / expected, np.nan)
    out["publish_t_s"] = (msgs["publish_ts"].to_numpy(dtype=np.int64) - t0) / 1e9
    return out


@dataclass(frozen=True)
class LatencyDistribution:
    """Over all deliveries: how many, the CDF's percentiles (CDF_POINTS),
    max, mean; and the stretch percentiles (p50, p90, p99) over the
    deliveries with a positive lower bound."""

    n: int
    q: list[float] | None
    max: float | None
    mean: float | None
    stretch_n: int
    stretch_q: list[float] | None


def latency_distribution(deliveries: pd.DataFrame, points: list[float]) -> LatencyDistribution:
    lat = deliveries["latency_ms"].to_numpy()
    lat = lat[~np.isnan(lat)]
    stretch = deliveries["stretch"].to_numpy()
    stretch = stretch[~np.isnan(stretch)]
    one = np.zeros(len(lat), dtype=np.int64)
    q = spark_percentiles(one, lat, 1, points)[0].tolist() if len(lat) else None
    sq = (
        spark_percentiles(np.zeros(len(stretch), dtype=np.int64), stretch, 1, [0.5, 0.9, 0.99])[0].tolist()
        if len(stretch)
        else None
    )
    return LatencyDistribution(
        n=len(lat),
        q=q,
        max=float(lat.max()) if len(lat) else None,
        mean=float(lat.sum() / len(lat)) if len(lat) else None,
        stretch_n=len(stretch),
        stretch_q=sq,
    )


def time_series_delivery(deliveries: pd.DataFrame, t0: int) -> pd.DataFrame:
    """Per second of publish time: messages, expected, delivered, latency p50/p99, delivery ratio."""
    sec = np.floor((deliveries["publish_ts"].to_numpy(dtype=np.int64) - t0) / 1e9).astype(np.int64)
    secs, code = np.unique(sec, return_inverse=True)
    n = len(secs)
    msg_code = pd.factorize(deliveries["msg"])[0] + 1  # 0: no message id
    # distinct (second, message) pairs as one int64 key each: np.unique over
    # a 2-row array (axis=1) sorts structured rows, ~50x slower at 1M rows
    width = int(msg_code.max()) + 1 if len(msg_code) else 1
    pairs = np.unique(code.astype(np.int64) * width + msg_code)
    messages = np.bincount(pairs // width, minlength=n).astype(np.int64)
    expected = np.bincount(code, minlength=n).astype(np.int64)
    delivered = np.bincount(code, weights=deliveries["delivered"].to_numpy(), minlength=n).astype(np.int64)
    q = spark_percentiles(code, deliveries["latency_ms"].to_numpy(), n, [0.5, 0.99])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = delivered / expected
    return pd.DataFrame(
        {
            "t_s": secs,
            "messages": messages,
            "expected": expected,
            "delivered": delivered,
            "latency_p50_ms": q[:, 0],
            "latency_p99_ms": q[:, 1],
            "delivery_ratio": ratio,
        }
    )


def per_node_delivery(deliveries: pd.DataFrame) -> pd.DataFrame:
    """Per node: messages it was expected to get, how many it got, median latency."""
    code, nodes = pd.factorize(deliveries["node"], sort=True)
    n = len(nodes)
    return pd.DataFrame(
        {
            "node": pd.Series(nodes, dtype="object"),
            "expected": np.bincount(code, minlength=n).astype(np.int64),
            "delivered_expected": np.bincount(code, weights=deliveries["delivered"].to_numpy(), minlength=n).astype(
                np.int64
            ),
            "latency_p50_ms": spark_percentiles(code, deliveries["latency_ms"].to_numpy(), n, [0.5])[:, 0],
        }
    )


def unexpected_deliveries(candidates: pd.DataFrame, publishers: dict[str, list[str]]) -> int:
    """First deliveries (msg, node) to a node that was not an expected
    recipient and is not a publisher of the message (a publisher's own
    DELIVER, as go traces it, is not a delivery to another subscriber)."""
    return sum(
        1 for m, n in zip(candidates["msg"], candidates["node"]) if n not in (publishers.get(m) or ())
    )


def in_flight(
    unmatched: pd.DataFrame, down: list[tuple[str, int, int]], t_end: int, deliveries: pd.DataFrame
) -> dict[str, int]:
    """From the SEND_RPCs their receiver never recorded (`unmatched`: dst,
    ts, msg): how many; how many were still in flight at the end (the
    receiver stayed up from the send to the end of the run, so not lost to
    churn); and how many messages were still propagating (an in-flight RPC
    carried the message, as its first message, to an expected recipient that
    had not got it)."""
    dst = unmatched["dst"].to_numpy(dtype=object)
    ts = unmatched["ts"].to_numpy(dtype=np.int64)
    lost = np.zeros(len(unmatched), dtype=bool)
    for node, start, end in down:
        if start <= t_end:
            lost |= (dst == node) & (ts < end)
    flying = unmatched.loc[~lost & unmatched["msg"].notna(), ["msg", "dst"]].drop_duplicates()
    pending = deliveries.loc[~deliveries["delivered"], ["msg", "node"]]
    propagating = pending.merge(flying.rename(columns={"dst": "node"}), on=["msg", "node"])["msg"].nunique()
    return {
        "rpcs_unreceived": len(unmatched),
        "rpcs_in_flight_at_end": int((~lost).sum()),
        "messages_propagating_at_end": int(propagating),
    }


def cdf_frame(lat: LatencyDistribution, points: list[float]) -> pd.DataFrame:
    """latency_cdf.parquet: the quantile points and their latency (empty without deliveries)."""
    df = pd.DataFrame({"quantile": points, "latency_ms": lat.q if lat.q else [math.nan] * len(points)})
    return df if lat.q else df.iloc[0:0]
