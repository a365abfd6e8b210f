"""Simulator benchmark: events per second, wall time against simulated time,
and peak memory for the reference simulator's set-up (simsub routers,
N-connect 10, per-pair latency uniform 10-150 ms, each message injected through
5 random nodes) at several sizes. Each size runs in its own process so peak
memory is its own.

    .venv/bin/python bench/bench_sim.py                 # 100, 1000, 10000 nodes
    .venv/bin/python bench/bench_sim.py --nodes 1000 --messages 100 --interval 0.1
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXPERIMENT = """
name: bench-simsub-{nodes}
seed: 1
nodes: {{count: {nodes}, router: {router}, topics: [simsub]}}
overlay: {{type: random, degree: 10}}
links: {{latency: {{model: uniform, min_ms: 10, max_ms: 150}}}}
workload: {{messages: {messages}, interval: {interval}s, size: 64, inject: 5}}
linger: 5s
"""


def run_one(nodes: int, messages: int, interval: float, router: str) -> dict:
    from orchestrator.experiment.spec import parse_experiment, resolved_to_yaml
    from orchestrator.sim.run import run_simulation

    experiment = parse_experiment(
        EXPERIMENT.format(nodes=nodes, messages=messages, interval=interval, router=router), "bench.yaml"
    )
    t0 = time.perf_counter()
    resolved = experiment.resolve()
    resolve_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        result = run_simulation(resolved, resolved_to_yaml(resolved, experiment), Path(tmp) / "run")
        trace_bytes = sum(p.stat().st_size for p in (Path(tmp) / "run" / "traces").glob("*.pb"))
    s = result.summary
    return {
        "nodes": nodes, "messages": messages, "resolve_s": round(resolve_s, 2),
        "events": s["events_processed"], "wall_s": s["wall_s"], "simulated_s": s["simulated_s"],
        "events_per_s": s["events_per_s"], "faster_than_real_time": s["wall_s"] < s["simulated_s"],
        "delivery_ratio": s["delivery_ratio"], "latency_p99_ms": s["latency_p99_ms"],
        "trace_mb": round(trace_bytes / 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--router", default="simsub")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.nodes[0], args.messages, args.interval, args.router)))
        return
    from rich.console import Console
    from rich.table import Table

    rows = []
    for n in args.nodes:
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--nodes", str(n), "--messages", str(args.messages),
             "--interval", str(args.interval), "--router", args.router],
            capture_output=True, text=True, check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = Table(title=f"simulator: {args.router}, {args.messages} messages every {args.interval}s")
    table.add_column("metric", style="bold")
    for row in rows:
        table.add_column(f"{row['nodes']} nodes", justify="right")
    for key in rows[0]:
        table.add_row(key, *(str(row[key]) for row in rows))
    Console().print(table)


if __name__ == "__main__":
    main()
