"""The gossipsub v1.1/v1.2 figures of the analysis (IDONTWANT sent and
received and the bytes it saved at most, PRUNE and PX counts, mesh churn per
node per minute, score distributions over time) against an independent
count of a small v1.2 simulator run's raw traces and score files
(tests/trace_census.py), and the report's charts of them.

The run: 16 v1.2 nodes on a dense overlay with a small mesh (D 4, D_high 5),
so heartbeats prune and offer PX; 4 KiB messages (above IDONTWANT's 1 KiB
threshold); scoring on (time in mesh, first deliveries), two nodes killed
for 2 s early and one in the second minute, whose return makes its
peers graft it again there; 70 s."""

from __future__ import annotations

import json
import re
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests import trace_census
from tests.cli_helpers import run_cli
from tests.spark_fixtures import requires_java, spark  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

V12 = textwrap.dedent("""\
    name: v12-small
    seed: 5
    nodes:
      count: 16
      router: gossipsub-v1.2
      topics: [t]
      router_params:
        {D: 4, D_low: 3, D_high: 5, D_out: 1, DoPX: true, PrunePeers: 4, TopicWeight: 1.0,
         TimeInMeshWeight: 0.01, TimeInMeshQuantum: 1.0, TimeInMeshCap: 10.0,
         FirstMessageDeliveriesWeight: 1.0, FirstMessageDeliveriesDecay: 0.9, FirstMessageDeliveriesCap: 20.0}
    overlay: {type: random, degree: 7}
    links:
      latency: {model: uniform, min_ms: 10, max_ms: 60}
    workload:
      messages: 20
      interval: 300ms
      size: 4096
      publishers: {nodes: [n0, n1]}
    churn:
      timeline:
        - {at: 3s, action: kill, select: [n5, n6], for: 2s}
        - {at: 61s, action: kill, select: [n7], for: 2s}
    duration: 70s
    linger: 2s
    """)

pytestmark = [requires_java, pytest.mark.spark]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, spark) -> tuple[Path, dict, trace_census.Census]:  # noqa: F811
    from analysis import run_analysis

    base = tmp_path_factory.mktemp("v12")
    (base / "v12.yaml").write_text(V12)
    run = base / "run"
    assert run_cli("sim", str(base / "v12.yaml"), "--out", str(run), "--no-report") == 0
    summary = run_analysis(run)
    return run, summary, trace_census.count(run)


def test_idontwant_sent_received_and_bytes_saved_agree_with_the_traces(analysed):
    run, s, census = analysed
    sizes = trace_census.publish_sizes(run)
    assert sizes == {4096}
    want = {
        "sent": census.control_sent["idontwant"],
        "received": census.control_received["idontwant"],
        "ids_sent": census.control_sent["idontwant_ids"],
        "ids_received": census.control_received["idontwant_ids"],
        "message_bytes": 4096,
        "bytes_saved_max": census.control_received["idontwant_ids"] * 4096,
    }
    assert want["ids_received"] > 0  # the run exercises IDONTWANT
    assert s["idontwant"] == want
    assert s["idontwant_bytes_saved_max"] == want["bytes_saved_max"]  # the flat alias
    ts = pd.read_parquet(run / "metrics" / "timeseries_control.parquet")
    assert int(ts["idontwant"].sum()) == want["sent"]
    assert int(ts["idontwant_ids_received"].sum()) == want["ids_received"]
    nodes = pd.read_parquet(run / "metrics" / "nodes.parquet")
    assert int(nodes["idontwant_ids_sent"].sum()) == want["ids_sent"]


def test_prune_and_px_counts_agree_with_the_traces(analysed):
    _, s, census = analysed
    want = {
        "sent": census.control_sent["prune"],
        "received": census.control_received["prune"],
        "px_peers_sent": census.control_sent["px"],
        "px_peers_received": census.control_received["px"],
    }
    assert want["sent"] > 0 and want["px_peers_received"] > 0
    assert s["prune"] == want


def test_mesh_churn_per_node_per_minute_agrees_with_the_traces(analysed):
    run, s, census = analysed
    table = pd.read_parquet(run / "metrics" / "mesh_churn.parquet")
    got = {}
    for r in table.itertuples():
        if r.grafts:
            got[(r.minute, r.node, trace_census.GRAFT)] = r.grafts
        if r.prunes:
            got[(r.minute, r.node, trace_census.PRUNE)] = r.prunes
    assert got == dict(census.mesh_changes)
    assert {m for m, _, _ in census.mesh_changes} == {0, 1}  # changes in both minutes of the run
    grafts = sum(v for (_, _, t), v in census.mesh_changes.items() if t == trace_census.GRAFT)
    prunes = sum(v for (_, _, t), v in census.mesh_changes.items() if t == trace_census.PRUNE)
    per_node_minute = defaultdict(int)
    for (m, node, _), v in census.mesh_changes.items():
        per_node_minute[(m, node)] += v
    assert s["mesh_churn"] == {
        "grafts": grafts,
        "prunes": prunes,
        "per_node_minute": pytest.approx((grafts + prunes) / (16 * s["duration_s"] / 60)),
        "max_node_minute": max(per_node_minute.values()),
    }


def test_score_distribution_over_time_agrees_with_the_score_files(analysed):
    run, s, _ = analysed
    by_second = trace_census.scores_per_second(run, trace_census.run_t0(run))
    table = pd.read_parquet(run / "metrics" / "scores.parquet").set_index("t_s")
    assert sorted(table.index) == sorted(by_second)
    for t, values in by_second.items():
        row, v = table.loc[t], np.array(values)
        assert row["samples"] == len(v) and row["negative"] == int((v < 0).sum()), t
        for name, q in (("min", 0), ("p10", 10), ("p50", 50), ("p90", 90), ("max", 100)):
            assert row[name] == pytest.approx(np.percentile(v, q)), (t, name)
    everything = np.concatenate([np.array(v) for v in by_second.values()])
    assert everything.max() > 0  # scoring is on: first deliveries earn
    assert s["scores"] == {
        "samples": len(everything), "nodes": 16, "negative": int((everything < 0).sum()),
        "min": pytest.approx(everything.min()), "p50": pytest.approx(np.percentile(everything, 50)),
        "max": pytest.approx(everything.max()),
    }


def test_the_report_shows_scores_idontwant_savings_and_mesh_churn(analysed):
    from analysis import write_report

    run, _, _ = analysed
    html = Path(write_report([run], run / "report.html")).read_text()
    for chart, title in (("r0-scores", "Peer scores over time"), ("r0-idontwant", "IDONTWANT savings per second"),
                         ("r0-churn", "Mesh churn per node per minute")):
        assert f'<svg class="chart" id="{chart}" role="img" aria-label="{title}' in html, chart


def test_every_new_summary_key_is_documented(analysed):
    _, s, _ = analysed
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for group in ("stayed_up", "idontwant", "prune", "mesh_churn", "scores"):
        row = re.search(rf"^\| {group} \{{([^}}]*)\}} \|", doc, re.M)
        assert row, group
        assert sorted(k.strip() for k in row.group(1).split(",")) == sorted(s[group]), group
