"""The HTML report: self-contained (no external URL, no script), renders in
headless Chromium with the network off and shows its charts drawn and
within the page; several runs give a comparison section."""

from __future__ import annotations

import re

import pytest

import analysis
from tests.report_browser import assert_looks_right, open_report, requires_chromium
from tests.spark_fixtures import requires_java, worked_example
from tests.spark_fixtures import spark  # noqa: F401

# charts every run's section has (ids r<run>-<name>); the worked example's churn adds mesh pictures
RUN_CHARTS = ("mesh0", "mesh1", "nodelat", "reach", "tree-median", "cdf", "ratio", "lat", "dups", "ctl", "meshd",
              "mesht", "load")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, spark):  # noqa: F811
    a = worked_example(tmp_path_factory.mktemp("run-a"))
    a.manifest["shaping"] = {"path": "userspace", "netem_available": False, "detail": "sch_netem missing"}
    a.manifest["warnings"] = ["event-loop lag up to 180 ms on n3"]
    ra = a.write()
    b = worked_example(tmp_path_factory.mktemp("run-b"))
    b.manifest["name"] = "worked-floodsub"
    rb = b.write()
    return ra, rb


def assert_self_contained(text: str) -> None:
    """No reference to anything outside the file: links point within it
    (#...), images are in it (data: URIs: a colour bar, a picture's dense
    lines), and the only URLs are the XML namespaces of the SVG."""
    urls = re.findall(r"""(?:src|href)\s*=\s*["']?([^"' >]+)""", text)
    assert not [u for u in urls if not u.startswith(("#", "data:image/png;base64,"))], urls
    bare = re.sub(r'xmlns(:\w+)?="[^"]*"', "", text)
    assert "http://" not in bare and "https://" not in bare
    assert "@import" not in text and not re.search(r"url\((?!#)", text)


@requires_java
@pytest.mark.spark
def test_single_run_report_is_self_contained_with_banners(two_runs, tmp_path):
    ra, _ = two_runs
    out = analysis.write_report([ra], ra / "report.html")  # analyses first: no summary yet
    text = out.read_text()
    assert (ra / "summary.json").exists()
    assert_self_contained(text)
    assert {f"r0-{c}" for c in RUN_CHARTS} <= set(re.findall(r'<svg class="chart" id="([^"]+)"', text))
    assert "<script" not in text  # reads the same with JavaScript off
    assert "shaped in user space" in text and "Event-loop lag" in text
    for label in ("Latency CDF", "Delivery ratio by publish second", "Duplicates per message",
                  "Control entries sent per second", "Mesh degree distribution", "Per-node load"):
        assert label in text
    assert "kill D" in text  # churn marker


@requires_java
@requires_chromium
@pytest.mark.spark
def test_report_renders_offline_in_chromium(two_runs, tmp_path):
    ra, rb = two_runs
    out = analysis.write_report([ra, rb], tmp_path / "compare.html")
    text = out.read_text()
    assert_self_contained(text)
    assert "Comparison" in text and "worked-floodsub" in text
    opened = open_report(out, tmp_path / "browser")
    assert_looks_right(opened, {"cmp-cdf", "cmp-ratio", "cmp-mesh", "cmp-reach"} | {f"r{i}-{c}" for i in (0, 1) for c in RUN_CHARTS})


def test_the_delay_line_row_says_what_it_held_and_how_late():
    from analysis.report.tables import delay_line as _delay_line

    assert _delay_line(None) is None  # not the delay line's path: no row
    assert _delay_line({"shaped": 1234, "dropped_loss": 5, "late_us": {"p50": 2, "p99": 300, "max": 4000}}) == (
        "1,234 packets delayed, 5 dropped for loss; released late by 2 us (p50), 300 us (p99), 4000 us (max)")


def test_figures_counted_from_rpcs_read_unavailable_when_an_implementation_traces_none():
    """A run with rust-libp2p nodes (their traces hold no SEND_RPC): the
    whole-run figures counted from RPCs are the others' only, so the cards,
    the summary table and the comparison say unavailable, not the count;
    figures from deliveries stay numbers. A run of ours alone shows them."""
    from analysis.report import tables

    mixed = {"amplification": 0.0, "transmissions": 0, "rpcs_sent": 27119, "delivery_ratio": 1.0,
             "duplicates_per_message": 180.85, "implementations": {
                 "gossip-testbed": {"unavailable": []},
                 "rust-libp2p": {"unavailable": ["bytes_sent", "rpcs_sent"]}}}
    cards = {label: value for value, label in tables.cards(mixed)}
    assert cards["amplification"] == "unavailable (rust-libp2p: no RPCs traced)"
    assert cards["delivery ratio"] == "100%" and cards["duplicates / msg"] == tables.fmt(180.85)
    rows = dict(tables.summary(mixed)[0] + tables.summary(mixed)[1])
    assert rows["transmissions"] == rows["RPCs sent"] == "unavailable (rust-libp2p: no RPCs traced)"
    assert rows["duplicates per message"] == tables.fmt(180.85)
    ours = {**mixed, "implementations": {"gossip-testbed": {"unavailable": []}}}
    assert {label: value for value, label in tables.cards(ours)}["amplification"] == tables.fmt(0.0)
    assert dict(tables.summary(ours)[0] + tables.summary(ours)[1])["RPCs sent"] == tables.fmt(27119)
