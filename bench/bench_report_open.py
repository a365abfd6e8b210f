"""How long a report takes to open in headless Chromium (issue 36: a report
of 1,000 nodes must open in under 2 s). Each report is opened `--repeat`
times in a fresh headless Chromium with the network off
(tests/report_browser.py); per opening: the navigation's loadEventEnd, the
time by which every chart has been laid out (a probe measures each chart's
box: layout done), and the wall time of the whole Chromium process (start,
load, exit). The load average is printed before and after: the box is
shared, and the times grow with it.

    testbed sim tests/fixtures/report/report-1000.yaml --out /tmp/r1000
    .venv/bin/python bench/bench_report_open.py /tmp/r1000/report.html --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from tests.report_browser import CHROMIUM, open_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if CHROMIUM is None:
        raise SystemExit("no chromium on PATH")
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for report in args.reports:
            runs = [open_report(report, Path(tmp) / f"{report.parent.name}-{i}") for i in range(args.repeat)]
            laid = [o.laid_out_ms for o in runs]
            print(f"{report} ({report.stat().st_size:,} bytes, {len(runs[0].charts)} charts, "
                  f"requests {sorted({u for o in runs for u in o.requests})}):")
            print(f"  loadEventEnd ms {[round(o.load_ms) for o in runs]}")
            print(f"  laid out ms     {[round(x) for x in laid]}  median {statistics.median(laid):.0f}, max {max(laid):.0f}")
            print(f"  chromium wall s {[round(o.wall_s, 2) for o in runs]}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
