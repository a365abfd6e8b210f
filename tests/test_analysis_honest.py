"""Honest-node figures (analysis/honest.py): sybils' deliveries are left
out, and without sybils the figures are the overall ones."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.honest import honest_summary

NODES = [{"name": "h0", "adversary": None}, {"name": "h1", "adversary": None},
         {"name": "s0", "adversary": {"censor": True, "eclipse": ["h1"]}}]


def table(rows: list[tuple[str, str, bool, float | None]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["msg", "node", "delivered", "latency_ms"])


def test_sybils_deliveries_do_not_count() -> None:
    d = table([("m1", "h0", True, 10.0), ("m1", "h1", False, None), ("m1", "s0", True, 900.0),
               ("m2", "h0", True, 30.0), ("m2", "h1", True, 20.0), ("m2", "s0", True, 1000.0)])
    s = honest_summary(NODES, d)
    assert s["sybils"] == 1
    assert (s["honest_expected_deliveries"], s["honest_deliveries"]) == (4, 3)
    assert s["honest_delivery_ratio"] == pytest.approx(0.75)
    assert s["honest_latency_p50_ms"] == pytest.approx(20.0)
    assert s["honest_latency_p99_ms"] == pytest.approx(29.8)  # 20 + 0.98 * (30 - 20)
    assert s["victims"] == 1 and s["victim_delivery_ratio"] == pytest.approx(0.5)
    assert s["victim_latency_p99_ms"] == pytest.approx(20.0)


def test_without_sybils_every_node_is_honest() -> None:
    d = table([("m1", "h0", True, 10.0), ("m1", "s0", False, None)])
    s = honest_summary([{"name": "h0"}, {"name": "s0", "adversary": None}], d)
    assert s["sybils"] == 0 and s["honest_delivery_ratio"] == pytest.approx(0.5)
    assert s["victims"] == 0 and s["victim_delivery_ratio"] is None


def test_nothing_delivered_gives_null_latency() -> None:
    s = honest_summary(NODES, table([("m1", "h0", False, None)]))
    assert s["honest_delivery_ratio"] == 0 and s["honest_latency_p99_ms"] is None
