"""Honest-node figures (analysis/honest.py): sybils' deliveries are left
out, without sybils the figures are the overall ones, and the censored
publishers' messages are counted apart."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.honest import honest_summary

NODES = [{"name": "h0", "adversary": None}, {"name": "h1", "adversary": None},
         {"name": "s0", "adversary": {"censor": True, "eclipse": ["h1"]}}]
PUBLISHERS = {"m1": ["h1"], "m2": ["h0"]}


def table(rows: list[tuple[str, str, bool, float | None]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["msg", "node", "delivered", "latency_ms"])


def test_sybils_deliveries_do_not_count() -> None:
    d = table([("m1", "h0", True, 10.0), ("m1", "h1", False, None), ("m1", "s0", True, 900.0),
               ("m2", "h0", True, 30.0), ("m2", "h1", True, 20.0), ("m2", "s0", True, 1000.0)])
    s = honest_summary(NODES, d, PUBLISHERS)
    assert s["sybils"] == 1
    assert (s["honest_expected_deliveries"], s["honest_deliveries"]) == (4, 3)
    assert s["honest_delivery_ratio"] == pytest.approx(0.75)
    assert s["honest_latency_p50_ms"] == pytest.approx(20.0)
    assert s["honest_latency_p99_ms"] == pytest.approx(29.8)  # 20 + 0.98 * (30 - 20)
    assert s["victims"] == 1 and s["victim_delivery_ratio"] == pytest.approx(0.5)
    assert s["victim_latency_p99_ms"] == pytest.approx(20.0)


def test_without_sybils_every_node_is_honest() -> None:
    d = table([("m1", "h0", True, 10.0), ("m1", "s0", False, None)])
    s = honest_summary([{"name": "h0"}, {"name": "s0", "adversary": None}], d, PUBLISHERS)
    assert s["sybils"] == 0 and s["honest_delivery_ratio"] == pytest.approx(0.5)
    assert s["victims"] == 0 and s["victim_delivery_ratio"] is None
    assert s["censored_publishers"] == 0 and s["censored_delivery_ratio"] is None


def test_nothing_delivered_gives_null_latency() -> None:
    s = honest_summary(NODES, table([("m1", "h0", False, None)]), PUBLISHERS)
    assert s["honest_delivery_ratio"] == 0 and s["honest_latency_p99_ms"] is None


def test_a_censored_publishers_messages_to_honest_nodes() -> None:
    """censored_*: the deliveries of h2's messages (m1, m3) to honest
    recipients; the sybil's copy and h2's own m2 do not count."""
    nodes = [{"name": "h0"}, {"name": "h1"}, {"name": "h2"},
             {"name": "s0", "adversary": {"eclipse": ["h2"], "censor_publishers": ["h2"]}}]
    d = table([("m1", "h0", True, 200.0), ("m1", "h1", False, None), ("m1", "s0", True, 30.0),
               ("m2", "h0", True, 40.0), ("m2", "h2", True, 50.0),
               ("m3", "h0", True, 100.0), ("m3", "h1", True, 300.0)])
    s = honest_summary(nodes, d, {"m1": ["h2"], "m2": ["h1"], "m3": ["h2"]})
    assert s["censored_publishers"] == 1
    assert (s["censored_expected_deliveries"], s["censored_deliveries"]) == (4, 3)
    assert s["censored_delivery_ratio"] == pytest.approx(0.75)
    assert s["censored_latency_p50_ms"] == pytest.approx(200.0)
    assert s["censored_latency_p99_ms"] == pytest.approx(298.0)  # 200 + 0.98 * (300 - 200)
    assert s["victim_delivery_ratio"] == pytest.approx(1.0)  # deliveries to h2
