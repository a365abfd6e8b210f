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
