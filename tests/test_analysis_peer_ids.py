"""Traces in go-libp2p-pubsub's terms (issue 11): peer ids are libp2p peer
ids (multihash bytes) that topology.json maps to names, and a publisher
traces DELIVER_MESSAGE for its own message. The worked example's figures
must not move: delivery ratio and latency count only the other
subscribers; `deliver_events` is the raw DELIVER count go's tracestat reports."""

from __future__ import annotations

import pandas as pd
import pytest

import analysis
from tests.spark_fixtures import M1, M2, M3, M4, M5, requires_java, worked_example
from tests.spark_fixtures import spark  # noqa: F401

approx = pytest.approx
PUBLISHES = ((1000, M1, "A"), (2000, M2, "B"), (3500, M3, "A"), (5000, M4, "A"), (6200, M5, "A"))


@requires_java
@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["pb", "json"])
def test_peer_id_traces_with_publisher_deliveries(tmp_path, spark, fmt):  # noqa: F811
    b = worked_example(tmp_path / "run")
    for t, m, node in PUBLISHES:
        b.deliver(node, t, m, node)  # go: PUBLISH then DELIVER at the publisher
    b.use_peer_ids()
    root = b.write(fmt=fmt)
    raw = (root / "traces" / f"A.{fmt}").read_bytes()
    assert b"12D3KooW" not in raw and b.peer_ids["A"][:6] == b"\x00\x24\x08\x01\x12\x20"
    s = analysis.run_analysis(root)
    assert s["nodes"] == 5
    assert s["expected_deliveries"] == 13
    assert s["deliveries"] == 10
    assert s["unexpected_deliveries"] == 0
    assert s["delivery_ratio"] == approx(10 / 13)
    assert s["latency_ms"] == approx({"p50": 22.5, "p90": 42.0, "p99": 58.2, "max": 60.0, "mean": 26.2})
    assert s["deliver_events"] == 15  # 10 deliveries to subscribers + 5 publishers' own
    assert s["stretch"]["p50"] == approx(1.2916667)
    assert s["trace_integrity"]["damaged_nodes"] == []
    nodes = pd.read_parquet(root / "metrics" / "nodes.parquet").set_index("node")
    assert sorted(nodes.index) == ["A", "B", "C", "D", "E"]
    assert nodes.loc["A", "mesh_grafts"] == 2
    d = pd.read_parquet(root / "metrics" / "deliveries.parquet")
    assert set(d["node"]) <= {"A", "B", "C", "D", "E"}
