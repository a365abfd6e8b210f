"""The driver-side stages over the deliveries table (analysis/deliveries.py)
compute what Spark computed before: percentiles equal Spark's `percentile`
on the same values (ties, nulls, one-value and empty groups), lower bounds
take the nearest of several publishers, and in-flight RPCs respect churn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from analysis import deliveries as dlv
from tests.spark_fixtures import requires_java
from tests.spark_fixtures import spark  # noqa: F401

POINTS = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0]


@requires_java
@pytest.mark.spark
def test_percentiles_equal_sparks(spark):  # noqa: F811
    rng = np.random.default_rng(7)
    groups, values = [], []
    for g in range(40):
        n = int(rng.integers(0, 30))  # some groups empty, some of one value
        vals = rng.choice([1.5, 2.0, 2.25, 3.0, 10.0, 1e-3], size=n) if g % 3 else rng.lognormal(4, 1, size=n)
        groups += [g] * n
        values += [float(v) for v in vals]
    groups += [40, 40, 41]
    values += [float("nan"), 5.0, float("nan")]  # nulls are ignored; a group of only nulls has none
    pdf = pd.DataFrame({"g": groups, "v": [None if np.isnan(v) else v for v in values]})
    from pyspark.sql import functions as F

    pts = ", ".join(str(p) for p in POINTS)
    rows = (
        spark.createDataFrame(pdf, "g long, v double")
        .groupBy("g")
        .agg(F.expr(f"percentile(v, array({pts}))").alias("q"))
        .collect()
    )
    want = {r.g: r.q for r in rows}
    got = dlv.spark_percentiles(np.array(groups), np.array(values), 42, POINTS)
    for g in range(42):
        if want.get(g) is None:
            assert np.isnan(got[g]).all(), g
        else:
            assert got[g].tolist() == [float(x) for x in want[g]], g  # bit for bit


def test_lower_bound_is_the_nearest_publisher_and_null_without_a_path():
    dist = {"A": {"A": 0.0, "B": 10.0, "C": 20.0}, "D": {"D": 0.0, "C": 5.0}}
    rows = pa.table({
        "msg": ["m1", "m1", "m2", "m2", "m3"],
        "topic": ["t"] * 5,
        "node": ["B", "C", "C", "X", "C"],
        "publish_ts": [0, 0, 0, 0, 0],
        "deliver_ts": pa.array([10_000_000, 40_000_000, None, None, 7_000_000], pa.int64()),
    })
    table = dlv.deliveries_table(rows, {"m1": ["A"], "m2": ["A", "D"], "m3": []}, dist)
    assert table.schema == dlv.DELIVERIES_SCHEMA
    got = table.to_pydict()
    assert got["lower_bound_ms"] == [10.0, 20.0, 5.0, None, None]
    assert got["delivered"] == [True, True, False, False, True]
    assert got["latency_ms"] == [10.0, 40.0, None, None, 7.0]
    assert got["stretch"] == [1.0, 2.0, None, None, None]
    assert got["deliver_ts"] == [10_000_000, 40_000_000, None, None, 7_000_000]
    no_edges = dlv.deliveries_table(rows, {"m1": ["A"]}, None).to_pydict()
    assert no_edges["lower_bound_ms"] == [None] * 5 and no_edges["stretch"] == [None] * 5


def test_in_flight_counts_only_receivers_that_stayed_up():
    s = 1_000_000_000
    unmatched = pd.DataFrame({"dst": ["B", "B", "C"], "ts": [1 * s, 5 * s, 2 * s], "msg": ["m1", None, "m2"]})
    deliveries = pd.DataFrame({"msg": ["m1", "m2"], "node": ["B", "C"], "delivered": [False, False]})
    # C went down at 3 s and never came back: its RPC was lost to churn
    got = dlv.in_flight(unmatched, [("C", 3 * s, 1 << 62)], 10 * s, deliveries)
    assert got == {"rpcs_unreceived": 3, "rpcs_in_flight_at_end": 2, "messages_propagating_at_end": 1}
    # ... a down interval before the send does not make it lost
    got = dlv.in_flight(unmatched, [("C", 0, 1 * s)], 10 * s, deliveries)
    assert got == {"rpcs_unreceived": 3, "rpcs_in_flight_at_end": 3, "messages_propagating_at_end": 2}


def test_unexpected_deliveries_exclude_the_publishers_own():
    cands = pd.DataFrame({"msg": ["m1", "m1", "m9"], "node": ["A", "Z", "A"]})
    assert dlv.unexpected_deliveries(cands, {"m1": ["A"]}) == 2  # Z, and m9 that no one published


def _expected_by_definition(msgs, subscriptions, down):
    """docs/metrics.md's expected recipients, one pair at a time."""
    out = set()
    for m, ts, topic, pubs in msgs[["msg", "publish_ts", "topic", "publishers"]].itertuples(index=False):
        for node, sub_topic, start, end in subscriptions:
            if topic is None or sub_topic != topic or not start <= ts < end or node in pubs:
                continue
            if any(d == node and a <= ts < b for d, a, b in down):
                continue
            out.add((m, topic, node, ts))
    return out


def test_expected_recipients_and_first_deliveries_follow_the_definition():
    """Random runs: overlapping subscription intervals of one node, several
    publishers, messages without a topic or id, down intervals that start or
    end exactly at a publish time; first deliveries to expected recipients,
    to other nodes, to unknown nodes and without a message id (which, as in
    a Spark join, match nothing)."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        nodes = [f"n{i}" for i in range(int(rng.integers(1, 8)))]
        topics = ["a", "b"]
        times = rng.integers(0, 50, size=int(rng.integers(0, 25)))
        ids = [None if i == 3 else f"m{i}" for i in range(len(times))]  # m3: a PUBLISH without an id
        msgs = pd.DataFrame({
            "msg": pd.Series(ids, dtype=object),
            "publish_ts": times.astype(np.int64),
            "topic": [None if rng.random() < 0.1 else str(rng.choice(topics)) for _ in times],
            "publishers": [list(rng.choice(nodes, size=int(rng.integers(0, 3)))) for _ in times],
        })
        subs = [(str(rng.choice(nodes)), str(rng.choice(topics)), int(a), int(a + rng.integers(0, 40)))
                for a in rng.integers(-10, 50, size=int(rng.integers(0, 12)))]
        down = [(str(rng.choice(nodes + ["gone"])), int(t), int(t + rng.integers(0, 20)))
                for t in rng.choice(times if len(times) else [0], size=int(rng.integers(0, 4)))]
        x = dlv.expected_recipients(msgs, subs, down)
        assert set(zip(*(x[c].to_pylist() for c in ("msg", "topic", "node", "publish_ts"))))\
            == _expected_by_definition(msgs, subs, down)
        assert x.num_rows == len(_expected_by_definition(msgs, subs, down))  # no pair twice

        pairs = sorted({(m, n) for m in [*ids, None] for n in nodes + ["stranger"] if rng.random() < 0.5},
                       key=str)
        first = pa.table({"msg": pa.array([m for m, _ in pairs], pa.string()),
                          "node": pa.array([n for _, n in pairs], pa.string()),
                          "deliver_ts": pa.array([100 + i for i in range(len(pairs))], pa.int64())})
        rows, unmatched = dlv.with_first_deliveries(x, first)
        got = dict(zip(zip(first["msg"].to_pylist(), first["node"].to_pylist()), first["deliver_ts"].to_pylist()))
        expected_pairs = set(zip(x["msg"].to_pylist(), x["node"].to_pylist()))
        assert rows.select(["msg", "topic", "node", "publish_ts"]).equals(x)
        assert rows["deliver_ts"].to_pylist() == [
            got.get(k) if k[0] is not None else None for k in zip(x["msg"].to_pylist(), x["node"].to_pylist())
        ]
        assert sorted(zip(unmatched["msg"].to_pylist(), unmatched["node"].to_pylist()), key=str) \
            == sorted((k for k in got if k not in expected_pairs or k[0] is None), key=str)


def test_stayed_up_leaves_out_recipients_that_went_down_before_the_message_reached_them():
    """m1 spreads from 0 to 300 ms (its last first delivery, to C). B is
    killed at 200 ms before it got m1, and C at 150 ms, getting m1 only after
    its restart: both went down, left out. A is killed at 200 ms after it got
    m1 at 100 ms: a delivery. D is killed at 400 ms, after m1 stopped
    spreading, without having it: a miss. E was killed at exactly the
    publish (not after it): a miss too. m2 reaches nobody: its window is its
    publish alone, so C's fall a nanosecond later does not count."""
    ms = 1_000_000
    rows = pa.table({
        "msg": ["m1", "m1", "m1", "m1", "m1", "m2", "m2"],
        "node": ["A", "B", "C", "D", "E", "B", "C"],
        "publish_ts": [0, 0, 0, 0, 0, 1000 * ms, 1000 * ms],
        "deliver_ts": pa.array([100 * ms, None, 300 * ms, None, None, None, None], pa.int64()),
    })
    down = [("A", 200 * ms, 250 * ms), ("B", 200 * ms, 2000 * ms), ("C", 150 * ms, 250 * ms), ("D", 400 * ms, 500 * ms),
            ("E", 0, 50 * ms), ("C", 1000 * ms + 1, 1200 * ms)]
    got = dlv.stayed_up(rows, down)
    assert got == {"expected": 5, "delivered": 1, "delivery_ratio": 1 / 5, "went_down": 2}
