"""The stages that build and read the deliveries table, run on the driver
with numpy.

Why here and not in Spark: the deliveries table (one row per expected
recipient of a message: docs/metrics.md) comes to the driver once anyway, as
Arrow, to be written to deliveries.parquet, and what it is built from (the
messages, the subscription and up/down intervals, each node's first
deliveries) is there too. Building it (`expected_recipients`,
`with_first_deliveries`) and every figure computed from it (the
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
import pyarrow.compute as pc

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


def expected_recipients(
    msgs: pd.DataFrame, subscriptions: list[tuple[str, str, int, int]], down: list[tuple[str, int, int]]
) -> pa.Table:
    """(msg, topic, node, publish_ts), one row per expected recipient of a
    message (`msgs`: msg, publish_ts, topic, publishers): a node subscribed
    to its topic at its publish time (`subscriptions`: node, topic, start,
    end, start included), not one of its publishers, and not down then
    (`down`: node, start, end). A message without a topic has none.

    Each subscription interval takes the run of its topic's messages
    (sorted by publish time) that falls inside it, so the work is the size
    of the answer; each down interval removes a run of its node's rows."""
    pub_ts = msgs["publish_ts"].to_numpy(dtype=np.int64)
    topic = msgs["topic"].to_numpy(dtype=object)
    nodes = sorted({sub[0] for sub in subscriptions})
    node_of = {name: i for i, name in enumerate(nodes)}
    msg_parts, node_parts = [], []
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for node, top, start, end in subscriptions:
        by_topic.setdefault(top, []).append((node_of[node], start, end))
    for top, subs in by_topic.items():
        of_topic = np.flatnonzero(topic == top) if top is not None else np.empty(0, dtype=np.int64)
        of_topic = of_topic[np.argsort(pub_ts[of_topic], kind="stable")]
        ts = pub_ts[of_topic]
        node_ix, start, end = (np.array(col, dtype=np.int64) for col in zip(*subs))
        lo = np.searchsorted(ts, start, side="left")
        hi = np.searchsorted(ts, end, side="left")
        counts = np.maximum(hi - lo, 0)
        first = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())
        msg_parts.append(of_topic[first])
        node_parts.append(np.repeat(node_ix, counts))
    width = max(len(nodes), 1)
    pairs = [m * width + n for m, n in zip(msg_parts, node_parts)]
    key = np.sort(np.concatenate(pairs)) if pairs else np.empty(0, dtype=np.int64)
    # one row per (message, node), whatever the subscription intervals (np.unique
    # hashes: several times slower than a sort at a million rows)
    key = key[np.append(True, key[1:] != key[:-1])] if len(key) else key
    publisher_keys = [
        m * width + node_of[p]
        for m, pubs in enumerate(msgs["publishers"]) for p in (pubs if pubs is not None else ()) if p in node_of
    ]
    key = key[~np.isin(key, np.array(publisher_keys, dtype=np.int64))]
    msg_ix, node_ix = key // width, key % width
    if down and len(key):
        order = np.lexsort((pub_ts[msg_ix], node_ix))
        msg_ix, node_ix = msg_ix[order], node_ix[order]
        ts = pub_ts[msg_ix]
        keep = np.ones(len(msg_ix), dtype=bool)
        node_start = np.searchsorted(node_ix, np.arange(width + 1), side="left")
        for node, start, end in down:
            if node in node_of:
                a, b = node_start[node_of[node]], node_start[node_of[node] + 1]
                lo, hi = np.searchsorted(ts[a:b], [start, end], side="left")
                keep[a + lo:a + hi] = False
        msg_ix, node_ix = msg_ix[keep], node_ix[keep]
    msg_rows = pa.array(msg_ix)
    return pa.table(
        {
            "msg": pa.array(msgs["msg"], pa.string()).take(msg_rows),
            "topic": pa.array(msgs["topic"], pa.string()).take(msg_rows),
            "node": pa.array(nodes, pa.string()).take(pa.array(node_ix)),
            "publish_ts": pa.array(pub_ts[msg_ix]),
        }
    )


def with_first_deliveries(expected: pa.Table, first: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The expected-recipient rows with each one's first delivery
    (deliver_ts, null if none), and the first deliveries (`first`: msg,
    node, deliver_ts) that no expected row matched, as (msg, node): what
    unexpected deliveries are counted from."""
    msg_vals = pc.unique(expected["msg"])
    node_vals = pc.unique(expected["node"])
    width = max(len(node_vals), 1)

    def keys(table: pa.Table) -> np.ndarray:
        m = pc.index_in(table["msg"], value_set=msg_vals, skip_nulls=True).fill_null(-1).to_numpy(zero_copy_only=False)
        n = pc.index_in(table["node"], value_set=node_vals, skip_nulls=True).fill_null(-1).to_numpy(zero_copy_only=False)
        return np.where((m >= 0) & (n >= 0), m.astype(np.int64) * width + n, -1)

    want, got = keys(expected), keys(first)
    order = np.argsort(got, kind="stable")
    sorted_got = got[order]
    at = np.searchsorted(sorted_got, want)
    inside = (at < len(got)) & (want >= 0)
    hit = np.zeros(len(want), dtype=bool)
    hit[inside] = sorted_got[at[inside]] == want[inside]
    row = order[at[hit]]
    deliver = np.zeros(len(want), dtype=np.int64)
    deliver[hit] = first["deliver_ts"].to_numpy(zero_copy_only=False)[row]
    matched = np.zeros(len(got), dtype=bool)
    matched[row] = True
    return (
        expected.append_column("deliver_ts", pa.array(deliver, mask=~hit)),
        first.filter(pa.array(~matched)).select(["msg", "node"]),
    )


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


def stayed_up(deliveries: pa.Table, down: list[tuple[str, int, int]]) -> dict[str, int | float | None]:
    """summary.json's `stayed_up`: delivery to the expected recipients that
    stayed up until the message reached them, or, for one it never reached,
    until it stopped spreading: its last first delivery to anyone
    (`deliveries`: msg, node, publish_ts, deliver_ts). A recipient that went
    down after the publish and before then (`down`: node, start, end; a churn
    kill of a node the message had not reached yet) is counted in
    `went_down` and left out; one that stayed up and missed the message is a
    miss here as in `delivery_ratio`."""
    msg_codes, _ = pd.factorize(deliveries["msg"].to_numpy(zero_copy_only=False))
    nodes = deliveries["node"].to_numpy(zero_copy_only=False)
    pub = deliveries["publish_ts"].to_numpy(zero_copy_only=False).astype(np.int64)
    got = deliveries["deliver_ts"].is_valid().to_numpy(zero_copy_only=False)
    dlv_ts = deliveries["deliver_ts"].fill_null(np.iinfo(np.int64).min).to_numpy(zero_copy_only=False)
    last = np.full(int(msg_codes.max()) + 1 if len(msg_codes) else 0, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, msg_codes, dlv_ts.astype(np.int64))
    spread_end = np.maximum(last[msg_codes], pub) if len(msg_codes) else pub
    until = np.where(got, dlv_ts, spread_end)
    went = np.zeros(len(pub), dtype=bool)
    rows_of = pd.Series(np.arange(len(nodes))).groupby(nodes).indices if len(nodes) else {}
    for node, start, _end in down:
        rows = rows_of.get(node)
        if rows is not None:
            went[rows] |= (pub[rows] < start) & (start <= until[rows])
    expected = int((~went).sum())
    delivered = int((got & ~went).sum())
    return {
        "expected": expected,
        "delivered": delivered,
        "delivery_ratio": delivered / expected if expected else None,
        "went_down": int(went.sum()),
    }


def cdf_frame(lat: LatencyDistribution, points: list[float]) -> pd.DataFrame:
    """latency_cdf.parquet: the quantile points and their latency (empty without deliveries)."""
    df = pd.DataFrame({"quantile": points, "latency_ms": lat.q if lat.q else [math.nan] * len(points)})
    return df if lat.q else df.iloc[0:0]
