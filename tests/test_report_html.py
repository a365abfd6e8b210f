"""The HTML report: self-contained (no external URL), renders in headless
Chromium with the network off, runs its script without errors and shows its
charts; several runs give a comparison section."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import analysis
from tests.spark_fixtures import requires_java, worked_example
from tests.spark_fixtures import spark  # noqa: F401

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
requires_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless checks need chromium and none is on PATH")
CHARTS_PER_RUN = 8


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


def dump_dom(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
         "--proxy-bypass-list=<-loopback>", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120,
    )


def assert_self_contained(text: str) -> None:
    urls = re.findall(r"""(?:src|href)\s*=\s*["']?([^"' >]+)""", text)
    assert not [u for u in urls if not u.startswith("#")], urls
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text
    assert "@import" not in text and "url(" not in text


@requires_java
@pytest.mark.spark
def test_single_run_report_is_self_contained_with_banners(two_runs, tmp_path):
    ra, _ = two_runs
    out = analysis.write_report([ra], ra / "report.html")  # analyses first: no summary yet
    text = out.read_text()
    assert (ra / "summary.json").exists()
    assert_self_contained(text)
    assert text.count('<svg class="chart"') == CHARTS_PER_RUN
    assert "shaped in user space" in text and "Event-loop lag" in text
    for label in ("Latency CDF", "Delivery ratio by publish second", "Duplicates per message",
                  "Control messages sent per second", "Mesh degree distribution", "Per-node load"):
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
    res = dump_dom(out, tmp_path)
    dom = res.stdout
    m = re.search(r'data-report-ready="(\d+)"', dom)
    assert m, "the report's script did not run to the end\n" + res.stderr[-2000:]
    assert int(m.group(1)) == 3 + 2 * CHARTS_PER_RUN
    assert dom.count('class="chart"') == 3 + 2 * CHARTS_PER_RUN
    errors = [line for line in res.stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "error" in line)]
    assert not errors, errors
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
         f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1300,2400", f"--screenshot={shot}",
         out.as_uri()],
        capture_output=True, timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 20_000


def test_the_delay_line_row_says_what_it_held_and_how_late():
    from analysis.report import _delay_line

    assert _delay_line(None) is None  # not the delay line's path: no row
    assert _delay_line({"shaped": 1234, "dropped_loss": 5, "late_us": {"p50": 2, "p99": 300, "max": 4000}}) == (
        "1,234 packets delayed, 5 dropped for loss; released late by 2 us (p50), 300 us (p99), 4000 us (max)")
