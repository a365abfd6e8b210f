"""Per-implementation figures (issue 12 item 3): a mixed run's summary.json
breaks delivery, latency, duplicates and RPCs down by implementation, and a
figure an implementation's traces cannot supply is null / "unavailable",
never 0. The fixture is the committed quick sim run with half its nodes
turned into a bare gossipsub-interop image: their traces cut down to
PUBLISH, DELIVER and DUPLICATE, as the contract's stdout gives them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis.implementations import declared, per_implementation
from analysis.ingest import iter_events
from analysis.report.tables import fmt, implementations as implementation_rows
from node.wire.codec import encode_uvarint
from node.trace.vocab import DELIVER, DUPLICATE, PUBLISH
from tests import trace_census
from tests.spark_fixtures import requires_java
from tests.spark_fixtures import spark  # noqa: F401

QUICK = Path(__file__).parent / "fixtures" / "analysis_before" / "quick"
CONTRACT_EVENTS = ["DELIVER_MESSAGE", "DUPLICATE_MESSAGE", "PUBLISH_MESSAGE"]
STAND_IN = "image:stand-in"


def mixed_run(tmp_path: Path) -> Path:
    run = tmp_path / "mixed"
    shutil.copytree(QUICK, run, ignore=shutil.ignore_patterns("*.before.json"))
    topo = json.loads((run / "topology.json").read_text())
    for i, node in enumerate(topo["nodes"]):
        foreign = i >= len(topo["nodes"]) // 2
        node["implementation"] = STAND_IN if foreign else "gossip-testbed"
        node["trace_events"] = CONTRACT_EVENTS if foreign else None
        if foreign:
            path = run / "traces" / f"{node['name']}.pb"
            kept = [ev.SerializeToString() for ev in iter_events(path) if ev.type in (PUBLISH, DELIVER, DUPLICATE)]
            path.write_bytes(b"".join(encode_uvarint(len(raw)) + raw for raw in kept))
    (run / "topology.json").write_text(json.dumps(topo))
    return run


def test_old_runs_declare_no_implementations():
    assert not declared(json.loads((QUICK / "topology.json").read_text())["nodes"])


def test_unavailable_metrics_are_null_not_zero():
    topo = [
        {"name": "a", "implementation": "gossip-testbed", "trace_events": None},
        {"name": "b", "implementation": STAND_IN, "trace_events": CONTRACT_EVENTS},
        {"name": "c", "implementation": STAND_IN, "trace_events": CONTRACT_EVENTS},
    ]
    nodes = pd.DataFrame({"node": ["a", "b", "c"], "expected": [4, 4, 4], "delivered_expected": [4, 3, 4],
                          "duplicated": [8, 2, 5], "rpcs_sent": [20, 0, 0]})
    per_node = pd.DataFrame({"node": ["a", "b", "c"], "bytes_sent": [900.0, None, None]})
    dl = pd.DataFrame({"node": ["a"] * 4 + ["b"] * 4 + ["c"] * 4, "msg": ["m0", "m1", "m2", "m3"] * 3,
                       "delivered": [True] * 4 + [True, True, True, False] + [True] * 4,
                       "latency_ms": [1.0, 2, 3, 4, 10, 20, 30, None, 10, 20, 30, 40]})
    dl["deliver_ts"] = (dl["latency_ms"].fillna(0) * 1e6).astype("int64")
    out = per_implementation(topo, nodes, per_node, dl)
    ours, theirs = out["gossip-testbed"], out[STAND_IN]
    assert ours["unavailable"] == [] and ours["rpcs_sent"] == 20 and ours["bytes_sent"] == 900
    assert ours["trace_events"] is None and ours["latency_p50_ms"] == 2.5
    assert theirs["nodes"] == 2 and theirs["trace_events"] == CONTRACT_EVENTS
    assert theirs["unavailable"] == ["bytes_sent", "rpcs_sent"]
    assert theirs["rpcs_sent"] is None and theirs["bytes_sent"] is None
    assert theirs["delivery_ratio"] == 7 / 8 and theirs["duplicates_per_delivery"] == 1.0
    assert theirs["latency_p50_ms"] == 20.0
    # test-plans' figures: from each message's first delivery anywhere (a's)
    # to b and c's upper median, averaged over m0..m3: (9 + 18 + 27 + 36) / 4
    assert theirs["dissemination_p50_ms"] == 22.5 and ours["dissemination_p50_ms"] == 0.0
    assert (theirs["reach"], theirs["reach_min"]) == (0.875, 0.5) and ours["reach"] == 1.0
    assert theirs["duplicates_per_node"] == 7 / 8 and ours["duplicates_per_node"] == 2.0
    names, rows = implementation_rows({"implementations": out})
    assert STAND_IN in names and sum(cells.count("unavailable") for _, cells in rows) == 2
    # one implementation: its own column, test-plans' figures included
    names, rows = implementation_rows({"implementations": {"gossip-testbed": ours}})
    assert names == ["gossip-testbed"]
    assert dict(rows)["test-plans: p50 to disseminate ms"] == ["0"]
    assert dict(rows)["test-plans: duplicates per node per message"] == ["2"]
    assert dict(rows)["test-plans: reach (mean, worst message)"] == ["1 (1)"]
    assert implementation_rows({}) == ([], [])


@requires_java
@pytest.mark.spark
def test_mixed_run_breakdown_and_report(tmp_path, spark):  # noqa: F811
    run = mixed_run(tmp_path)
    summary = analysis.run_analysis(run)
    impls = summary["implementations"]
    assert set(impls) == {"gossip-testbed", STAND_IN}
    ours, theirs = impls["gossip-testbed"], impls[STAND_IN]
    assert ours["nodes"] == theirs["nodes"] == 8
    assert ours["unavailable"] == [] and ours["rpcs_sent"] > 0 and ours["bytes_sent"] > 0
    assert theirs["unavailable"] == ["bytes_sent", "rpcs_sent"]
    assert theirs["rpcs_sent"] is None and theirs["bytes_sent"] is None
    for fig in (ours, theirs):
        assert fig["delivery_ratio"] > 0.9 and fig["latency_p50_ms"] > 0 and fig["duplicates_per_delivery"] > 0
    census = trace_census.count(run)
    topo = json.loads((run / "topology.json").read_text())["nodes"]
    for impl, fig in impls.items():
        counted = census.test_plans({n["name"] for n in topo if n["implementation"] == impl})
        assert counted["dissemination_p50_ms"] > 0 and counted["reach"] > 0.9, counted
        for key, want in counted.items():
            assert fig[key] == pytest.approx(want, abs=1e-6), (impl, key)
    on_disk = json.loads((run / "summary.json").read_text())["implementations"][STAND_IN]
    assert on_disk["rpcs_sent"] is None
    html = analysis.write_report([run], tmp_path / "report.html").read_text()
    assert "<h3>Implementations</h3>" in html and "unavailable" in html
    assert 'id="r0-impl"' in html  # the latency CDF panels, one per implementation


@requires_java
@pytest.mark.spark
def test_one_implementation_gets_the_table_too(tmp_path, spark):  # noqa: F811
    """test-plans reports its three figures for every run, so a run of our
    routers alone gets the implementations table with its one column, and
    the figures agree with the census."""
    run = tmp_path / "ours"
    shutil.copytree(QUICK, run, ignore=shutil.ignore_patterns("*.before.json"))
    topo = json.loads((run / "topology.json").read_text())
    for node in topo["nodes"]:
        node["implementation"], node["trace_events"] = "gossip-testbed", None
    (run / "topology.json").write_text(json.dumps(topo))
    fig = analysis.run_analysis(run)["implementations"]["gossip-testbed"]
    counted = trace_census.count(run).test_plans({n["name"] for n in topo["nodes"]})
    for key, want in counted.items():
        assert fig[key] == pytest.approx(want, abs=1e-6), key
    html = analysis.write_report([run], tmp_path / "report.html").read_text()
    table = html[html.index("<h3>Implementations</h3>"):]
    table = table[: table.index("</table>")]
    assert "<th>gossip-testbed</th>" in table and "test-plans: p50 to disseminate ms" in table
    assert f"<td>{fmt(fig['dissemination_p50_ms'])}</td>" in table
