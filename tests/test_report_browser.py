"""The report checked as a person would see it (issue 36): the demo's report,
a 250-node report and a mixed-implementation report opened in headless
Chromium with the network off. Every chart is there, drawn, inside the page's
width; the page scrolls only down and asks the network for nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import analysis
from orchestrator.records.router_cpu import FILE
from tests.report_browser import assert_looks_right, open_report, requires_chromium
from tests.spark_fixtures import requires_java
from tests.spark_fixtures import spark  # noqa: F401
from tests.test_analysis_implementations import mixed_run

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
QUICK = FIXTURES / "analysis_before" / "quick"
CHARTS = {"reach", "tree-median", "tree-slowest", "nodelat", "cdf", "ratio", "lat", "dups", "ctl", "meshd",
          "mesht", "load"}
pytestmark = [requires_java, requires_chromium, pytest.mark.spark, pytest.mark.slow]


def ids(names: set[str], run: int = 0) -> set[str]:
    return {f"r{run}-{n}" for n in names}


def with_router_cpu_and_lag(run: Path) -> None:
    """What a real backend adds to a run directory: router-cpu.json (CPU
    samples at up, workload, down) and each node's event-loop lag."""
    nodes = [f"n{i}" for i in range(16)]
    samples = [("up", 0, {n: 1.0 for n in nodes}), ("workload", 3, {n: 1.01 for n in nodes}),
               ("down", 10, {n: 1.2 + 0.01 * i for i, n in enumerate(nodes)})]
    (run / FILE).write_text(json.dumps({"source": "test", "host_cpus": 2, "samples": [
        {"at": at, "t_ns": round(t * 1e9), "cpu_s": cpu} for at, t, cpu in samples]}))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["event_loop_lag"] = {"per_node": {n: {"p50_ms": 1.0, "p99_ms": 3.0 * i, "max_ms": 5.0 * i}
                                               for i, n in enumerate(nodes)}}
    (run / "manifest.json").write_text(json.dumps(manifest))


def test_the_demo_report(tmp_path, spark):  # noqa: F811
    run = tmp_path / "quick"
    shutil.copytree(QUICK, run, ignore=shutil.ignore_patterns("*.before.json"))
    report = analysis.write_report([run], run / "report.html")
    # the workload's start, after the kill of n7, after its start again
    assert_looks_right(open_report(report, tmp_path / "browser"), ids(CHARTS | {"mesh0", "mesh1", "mesh2"}))
    with_router_cpu_and_lag(run)  # a real backend's run: the lag on the overlay too
    report = analysis.write_report([run], run / "report.html")
    assert_looks_right(open_report(report, tmp_path / "browser-lag"), ids(CHARTS | {"mesh0", "nodelag"}))


def test_a_250_node_report(tmp_path, spark):  # noqa: F811
    run = tmp_path / "r250"
    subprocess.run([str(Path(sys.executable).parent / "testbed"), "sim", str(FIXTURES / "report" / "report-250.yaml"),
                    "--out", str(run), "--no-report"],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    report = analysis.write_report([run], run / "report.html")
    text = report.read_text()
    assert "each group laid out apart" in text and "west" in text  # coloured by group
    opened = open_report(report, tmp_path / "browser")
    assert_looks_right(opened, ids(CHARTS | {"mesh0", "mesh1", "mesh2"}))


def test_a_mixed_implementation_report(tmp_path, spark):  # noqa: F811
    run = mixed_run(tmp_path)
    report = analysis.write_report([run], run / "report.html")
    assert_looks_right(open_report(report, tmp_path / "browser"), ids(CHARTS | {"mesh0", "impl"}))
