"""Opening a report as a person would, in headless Chromium with the network
off: a copy of the report with a probe script appended (the report itself
has no script) measures every chart's box and contents, the page's width
and the time it took to load; Chromium's net log lists every request the
page made."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
requires_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless checks need chromium and none is on PATH")
WINDOW = (1300, 900)

PROBE = """<script>
window.addEventListener('load', function () { setTimeout(function () {
  var nav = performance.getEntriesByType('navigation')[0];
  var charts = Array.prototype.map.call(document.querySelectorAll('svg.chart'), function (s) {
    var r = s.getBoundingClientRect();
    return {id: s.id, left: r.left, right: r.right, width: r.width, height: r.height,
            drawn: s.querySelectorAll('path, use, text, rect, circle, line, polyline').length};
  });
  var out = document.createElement('pre'); out.id = 'probe';
  out.textContent = JSON.stringify({charts: charts, client_width: document.documentElement.clientWidth,
    scroll_width: document.documentElement.scrollWidth, load_ms: nav.loadEventEnd || nav.duration,
    dom_ms: nav.domContentLoadedEventEnd, laid_out_ms: performance.now()});
  document.body.appendChild(out);
}, 0); });
</script>"""


@dataclass(frozen=True)
class Opened:
    charts: list[dict]
    client_width: float
    scroll_width: float
    load_ms: float
    dom_ms: float
    laid_out_ms: float  # every chart's box measured (layout done), from the navigation's start
    wall_s: float
    requests: list[str]  # URLs the page asked for, other than its own file


def open_report(report: Path, workdir: Path) -> Opened:
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / report.name
    copy.write_text(report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    netlog = workdir / "netlog.json"
    started = time.monotonic()
    res = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
         "--proxy-bypass-list=<-loopback>", "--disable-background-networking", "--disable-component-update",
         f"--user-data-dir={workdir / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
         f"--log-net-log={netlog}", "--dump-dom", copy.as_uri()],
        capture_output=True, text=True, timeout=300,
    )
    wall = time.monotonic() - started
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.S)
    assert m, "the probe did not run\n" + res.stderr[-2000:]
    got = json.loads(html.unescape(m.group(1)))
    return Opened(got["charts"], got["client_width"], got["scroll_width"], got["load_ms"], got["dom_ms"],
                  got["laid_out_ms"], wall, page_requests(netlog))


def page_requests(netlog: Path) -> list[str]:
    """The network requests the page made: URL_REQUEST_START_JOB events
    keyed to the file:// page (Chromium's own background requests, to its
    update and time servers, carry no page in their isolation key)."""
    log = json.loads(netlog.read_text(errors="replace"))
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return sorted({e["params"]["url"] for e in log["events"] if e["type"] == start
                   and "file://" in str(e.get("params", {}).get("network_isolation_key", ""))})


def screenshot(report: Path, out: Path, workdir: Path, height: int) -> None:
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
         "--hide-scrollbars", f"--user-data-dir={workdir / 'profile-shot'}", f"--window-size={WINDOW[0]},{height}",
         f"--screenshot={out}", report.as_uri()],
        capture_output=True, timeout=300, check=True,
    )


def assert_looks_right(opened: Opened, chart_ids: set[str]) -> None:
    """Every expected chart is there, drawn (not empty) and inside the page's
    width; the page does not scroll sideways and asked for nothing."""
    ids = {c["id"] for c in opened.charts}
    assert chart_ids <= ids, f"missing charts: {sorted(chart_ids - ids)}"
    for c in opened.charts:
        assert c["width"] > 200 and c["height"] > 100, c
        assert c["drawn"] > 10, c  # axes, ticks, labels and the data: more than an empty frame
        assert c["left"] >= 0 and c["right"] <= opened.client_width + 0.5, c
    assert opened.scroll_width <= opened.client_width, (opened.scroll_width, opened.client_width)
    assert opened.requests == [], opened.requests
