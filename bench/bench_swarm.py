"""Swarm against docker on one experiment file: the same run on both
backends, one after the other, then the analysis of each; prints delivery
ratio, latency p50/p99, CPU time of the CLI and the event-loop lag each
manifest recorded, and whether they agree (same delivery ratio, p50 within
15%).

Readiness gets a generous bound (--ready-timeout) so that a loaded host
slows the run rather than failing it; wall-clock figures from a loaded host
say so (the manifests' event_loop_lag).

    .venv/bin/python bench/bench_swarm.py [topologies/quick.yaml] [--ready-timeout 600] [--json]

Needs an active swarm on the engine in use (`docker swarm init
--advertise-addr 127.0.0.1`).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.experiment.spec import load_experiment  # noqa: E402
from orchestrator.run.runs import run_experiment  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def one(file: Path, backend: str, out: Path, ready_timeout: float) -> dict:
    started, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    run_experiment(load_experiment(file).resolve(), None, backend, out, ready_timeout=ready_timeout)
    after = resource.getrusage(resource.RUSAGE_SELF)
    analysed = subprocess.run([str(ROOT / ".venv" / "bin" / "testbed"), "analyze", str(out), "--json"],
                              capture_output=True, text=True)
    if analysed.returncode not in (0, 1):
        raise SystemExit(f"analyze {out} failed: {analysed.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        "backend": backend, "run_dir": str(out), "wall_s": round(time.monotonic() - started, 1),
        "cli_cpu_s": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 2),
        "delivery_ratio": summary["delivery_ratio"], "latency_p50_ms": summary["latency_p50_ms"],
        "latency_p99_ms": summary["latency_p99_ms"], "shaping": manifest["shaping"]["path"],
        "event_loop_lag": manifest.get("event_loop_lag"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=str(ROOT / "topologies" / "quick.yaml"))
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-swarm-") as tmp:
        rows = [one(Path(args.file), b, Path(tmp) / b, args.ready_timeout) for b in ("swarm", "docker")]
    s, d = rows
    agree = {"same_delivery_ratio": s["delivery_ratio"] == d["delivery_ratio"],
             "p50_within_15pct": abs(s["latency_p50_ms"] - d["latency_p50_ms"]) <= 0.15 * d["latency_p50_ms"]}
    if args.json:
        print(json.dumps({"runs": rows, "agree": agree}, indent=1))
        return
    for r in rows:
        print(f"{r['backend']:7} delivery {r['delivery_ratio']:.4f}  p50 {r['latency_p50_ms']:.1f} ms  "
              f"p99 {r['latency_p99_ms']:.1f} ms  shaping {r['shaping']}  wall {r['wall_s']} s  "
              f"CLI CPU {r['cli_cpu_s']} s  lag {r['event_loop_lag']}")
    print("agree:", agree)


if __name__ == "__main__":
    main()
