"""The tree figures of the analysis (summary `tree`, docs/metrics.md "Tree
figures": hops and depth, eager against lazy, GRAFT repairs and their
times, time to repair after each node lost, active-view degree) against an
independent count of a small episub simulator run's raw traces, tree files
and events.jsonl (tests/trace_census.py), and the report's tree section and
side-by-side table.

The run: 24 episub nodes with lazy repair (`eager_repair: false`), so lost
tree links are repaired by IHAVE and GRAFT; two sources; three nodes killed
for 3 s and one more for 2 s; 40 messages over 10 s."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests import trace_census
from tests.cli_helpers import run_cli
from tests.spark_fixtures import requires_java, spark  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

EPISUB = textwrap.dedent("""\
    name: episub-tree
    seed: 3
    nodes:
      count: 24
      router: episub
      topics: [t]
      router_params: {eager_repair: false}
    overlay: {type: random, degree: 4}
    links:
      latency: {model: uniform, min_ms: 5, max_ms: 40}
    workload:
      messages: 40
      interval: 250ms
      size: 256
      publishers: {nodes: [n0, n1]}
    churn:
      timeline:
        - {at: 5s, action: kill, select: [n5, n6, n9], for: 3s}
        - {at: 9s, action: kill, select: [n7], for: 2s}
    duration: 16s
    linger: 2s
    """)

GOSSIPSUB = textwrap.dedent("""\
    name: gossipsub-small
    seed: 3
    nodes: {count: 8, router: gossipsub, topics: [t]}
    overlay: {type: random, degree: 4}
    workload: {messages: 4, interval: 250ms, size: 64, publishers: {nodes: [n0]}}
    duration: 4s
    """)

pytestmark = [requires_java, pytest.mark.spark]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, spark) -> tuple[Path, dict, trace_census.Census]:  # noqa: F811
    from analysis import run_analysis

    base = tmp_path_factory.mktemp("episub-tree")
    (base / "episub.yaml").write_text(EPISUB)
    run = base / "run"
    assert run_cli("sim", str(base / "episub.yaml"), "--out", str(run), "--no-report") == 0
    return run, run_analysis(run), trace_census.count(run)


def test_every_tree_figure_agrees_with_the_raw_tree_files_and_traces(analysed):
    run, s, census = analysed
    want = trace_census.tree_figures(run, census)
    assert s["tree"] == pytest.approx(want)
    # the run exercises what the figures count
    assert want["nodes"] == 24 and want["hops_max"] > 2 and want["lazy_ids"] > 0
    assert want["grafts"] > 0 and want["repaired"] > 0 and want["repair_max_s"] > 0
    assert want["active_near_mean"] > 0 and want["neighbor_downs"] > 0


def _agree_per_loss(got: dict, want: dict) -> None:
    """A per-loss summary group against its count from the traces: the
    totals, and each loss's row, in order."""
    assert {k: v for k, v in got.items() if k != "per_loss"} == pytest.approx(
        {k: v for k, v in want.items() if k != "per_loss"})
    assert got["per_loss"] == [pytest.approx(a) for a in want["per_loss"]]


def test_repair_after_each_node_lost_agrees_with_the_traces_and_the_flat_aliases_match(analysed):
    run, s, census = analysed
    got = s["repair_after_loss"]
    _agree_per_loss(got, trace_census.repair_after_loss(run, census))
    assert sorted(a["node"] for a in got["per_loss"]) == ["n5", "n6", "n7", "n9"]
    assert got["unrepaired"] == 0 and all(a["repair_s"] > 0 for a in got["per_loss"])
    assert s["repair_after_loss_max_s"] == got["max_s"]
    for key in ("hops_p50", "grafts", "active_degree_mean", "eager_per_delivery"):
        assert s[f"tree_{key}"] == s["tree"][key], key


def test_subtree_repair_agrees_with_the_traces(analysed):
    """Per node lost, the nodes it fed and how long they waited for their
    next message, against the census of the raw traces; the run has tree
    nodes among its losses, every child repaired, each after the loss."""
    run, s, census = analysed
    got = s["subtree_repair"]
    _agree_per_loss(got, trace_census.subtree_repair(run, census))
    assert got["losses"] >= 1 and got["children"] >= got["losses"] and got["unrepaired"] == 0
    assert all(a["repair_s"] > 0 for a in got["per_loss"])
    assert s["subtree_repair_max_s"] == got["max_s"]


def test_the_tree_tables_agree_with_the_summary(analysed):
    run, s, _ = analysed
    msgs = pd.read_parquet(run / "metrics" / "tree_messages.parquet")
    assert int(msgs["depth"].max()) == s["tree"]["depth_max"]
    assert int(msgs["deliveries"].sum()) == s["tree"]["deliveries"]
    degree = pd.read_parquet(run / "metrics" / "tree_degree.parquet")
    mean = (degree["mean"] * degree["nodes"]).sum() / degree["nodes"].sum()
    assert mean == pytest.approx(s["tree"]["active_degree_mean"])


def test_every_tree_key_is_documented(analysed):
    _, s, _ = analysed
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for group in ("tree", "repair_after_loss", "subtree_repair"):
        row = re.search(rf"^\| {group} \{{([^}}]*)\}} \|", doc, re.M)
        assert row, group
        assert sorted(k.strip() for k in row.group(1).split(",")) == sorted(s[group]), group


def test_the_report_sets_the_tree_beside_gossipsub_and_draws_the_active_view(analysed, tmp_path):
    from analysis import run_analysis, write_report

    run, _, _ = analysed
    (tmp_path / "g.yaml").write_text(GOSSIPSUB)
    other = tmp_path / "g"
    assert run_cli("sim", str(tmp_path / "g.yaml"), "--out", str(other), "--no-report") == 0
    assert run_analysis(other)["tree"] is None  # no tree files: no tree figures
    assert not (other / "tree").exists()
    html = Path(write_report([run, other], tmp_path / "report.html")).read_text()
    assert '<h3 id="comparison-tree">Broadcast trees, side by side</h3>' in html
    assert "<th>router</th><td>episub</td><td>gossipsub</td>" in html
    assert '<svg class="chart" id="r0-activeview" role="img" aria-label="Active-view degree over time' in html
    assert 'id="r1-activeview"' not in html
