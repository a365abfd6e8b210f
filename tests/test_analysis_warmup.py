"""The warm-up run `testbed spark start` has a new server analyse
(analysis/warmup.py) goes through every stage of a real analysis: its
figures are the ones its four nodes and one message were built to give."""

from __future__ import annotations

import pytest

import analysis
from analysis.warmup import NODES, warm_up_run
from tests.spark_fixtures import requires_java
from tests.spark_fixtures import spark  # noqa: F401


@requires_java
@pytest.mark.spark
def test_the_warm_up_run_is_a_whole_analysis(tmp_path, spark):  # noqa: F811
    summary = analysis.run_analysis(warm_up_run(tmp_path / "run"))
    assert summary["messages"] == 1
    assert summary["expected_deliveries"] == len(NODES) - 1  # every node but the publisher
    assert summary["delivery_ratio"] == 1.0
    assert summary["duplicates"] == 1  # w3 hears it from w2, then from w1
    assert summary["latency_ms"]["p50"] == pytest.approx(25.0)  # w1 at 15 ms, w2 at 25, w3 at 35
    for table in ("deliveries", "messages", "nodes", "mesh_degree", "timeseries_control"):
        assert (tmp_path / "run" / "metrics" / f"{table}.parquet").is_file(), table


@requires_java
@pytest.mark.spark
def test_the_background_warm_up_run_has_every_message_reach_every_node(tmp_path, spark):  # noqa: F811
    summary = analysis.run_analysis(warm_up_run(tmp_path / "run", messages=6))
    assert summary["messages"] == 6
    assert summary["events"] == 2 * len(NODES) + 13 * 6  # JOIN and GRAFT per node, 13 per message
    assert summary["expected_deliveries"] == 6 * (len(NODES) - 1)
    assert summary["delivery_ratio"] == 1.0
    assert summary["duplicates"] == 6
    assert summary["latency_ms"]["p50"] == pytest.approx(25.0)
