"""Process backend benchmark: N gossipsub routers, one OS process each, driven
by the run controller exactly as `testbed up` does.

Prints, for each N: time until every node is up, connected and meshed; the
event-loop lag p99 (median and worst node) at rest and under a 10 msg/s
workload; RSS per router; and the workload's delivery count.

    .venv/bin/python bench/bench_process.py                 # N = 100
    .venv/bin/python bench/bench_process.py --nodes 50 100 --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.run.controller import Controller  # noqa: E402
from orchestrator.progress import RichReporter  # noqa: E402
from orchestrator.experiment.model import LinkParams, NodeSpec, Publish, ResolvedExperiment  # noqa: E402
from orchestrator.records.state import StateStore  # noqa: E402


def experiment(n: int, degree: int, latency_ms: float) -> ResolvedExperiment:
    names = [f"n{i:03d}" for i in range(n)]
    rng = random.Random(1)
    edges: set[tuple[str, str]] = set()
    for i, a in enumerate(names):  # a ring for connectivity, plus random chords
        edges.add(tuple(sorted((a, names[(i + 1) % n]))))
        for b in rng.sample(names, degree // 2):
            if b != a:
                edges.add(tuple(sorted((a, b))))
    nodes = tuple(NodeSpec(name, "default", "gossipsub", {}, ("t",), i) for i, name in enumerate(names))
    return ResolvedExperiment(
        name=f"bench-process-{n}", source="bench/bench_process.py", seed=1, nodes=nodes,
        edges=tuple(sorted(edges)), links={}, default_link=LinkParams(latency_ms), publishes=(), churn=(),
        expectations=(), duration=0.0, linger=0.0,
    )


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def lag_window(ctl: Controller) -> dict:
    """Lag p99 per node since the last reset, and reset it."""
    def one(name: str):
        return ctl.backend.control_client(name).try_call("status", timeout=5.0, reset_lag=True)

    with ThreadPoolExecutor(8) as pool:
        statuses = [s for s in pool.map(one, ctl.nodes) if s]
    p99s = sorted(s["lag"]["p99_ms"] for s in statuses if s["lag"]["p99_ms"] is not None)
    maxes = [s["lag"]["max_ms"] for s in statuses if s["lag"]["max_ms"] is not None]
    return {
        "p99_median_ms": round(statistics.median(p99s), 2) if p99s else None,
        "p99_worst_ms": p99s[-1] if p99s else None,
        "max_ms": max(maxes) if maxes else None,
        "delivered": sum(s["counters"]["delivered"] for s in statuses),
    }


def bench(n: int, degree: int, latency_ms: float, rest_s: float, load_s: float, rate: float, quiet: bool) -> dict:
    from rich.console import Console

    resolved = experiment(n, degree, latency_ms)
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-process-{n}-"))
    reporter = None if quiet else RichReporter(Console(stderr=True))
    ctl = Controller.create(resolved, None, "process", f"bench-{n}-{int(time.time())}", run_dir, reporter=reporter)
    result: dict = {"nodes": n, "edges": len(resolved.edges), "run_dir": str(run_dir)}
    try:
        t0 = time.monotonic()
        ctl.up(ready_timeout=60 + 1.0 * n)
        result["up_and_meshed_s"] = round(time.monotonic() - t0, 2)
        time.sleep(2.0)
        lag_window(ctl)  # discard start-up
        time.sleep(rest_s)
        result["rest"] = lag_window(ctl)
        names = list(ctl.nodes)
        seq = 0
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < load_s:
            publisher = names[seq % n]
            ctl.publish(Publish(seq, elapsed, "t", 256, publisher, (publisher,)))
            seq += 1
            time.sleep(max(0.0, start + seq / rate - time.monotonic()))
        time.sleep(2.0)
        load = lag_window(ctl)
        load["messages"] = seq
        load["expected_deliveries"] = seq * (n - 1)
        result["load"] = load
        record = StateStore().load(ctl.testbed) or {}
        rss = [rss_bytes(e["pid"]) for e in (record.get("nodes") or {}).values() if "pid" in e]
        rss = [r for r in rss if r]
        result["rss_mib_median"] = round(statistics.median(rss) / 2**20, 1) if rss else None
        result["rss_mib_max"] = round(max(rss) / 2**20, 1) if rss else None
    finally:
        ctl.down()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100])
    ap.add_argument("--degree", type=int, default=6, help="average overlay degree (ring + random chords)")
    ap.add_argument("--latency-ms", type=float, default=10.0, help="one-way delay, user-space shaped")
    ap.add_argument("--rest", type=float, default=10.0, help="seconds measured at rest")
    ap.add_argument("--load", type=float, default=10.0, help="seconds measured under the workload")
    ap.add_argument("--rate", type=float, default=10.0, help="messages per second under load")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = [bench(n, args.degree, args.latency_ms, args.rest, args.load, args.rate, args.json) for n in args.nodes]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        print(f"N={r['nodes']} ({r['edges']} overlay edges)")
        print(f"  up, connected and meshed: {r['up_and_meshed_s']} s")
        print(f"  event-loop lag at rest:   p99 median {r['rest']['p99_median_ms']} ms, worst node {r['rest']['p99_worst_ms']} ms, max {r['rest']['max_ms']} ms")
        print(f"  lag under {args.rate:g} msg/s:      p99 median {r['load']['p99_median_ms']} ms, worst node {r['load']['p99_worst_ms']} ms, max {r['load']['max_ms']} ms")
        print(f"  deliveries:               {r['load']['delivered']} of {r['load']['expected_deliveries']} expected ({r['load']['messages']} messages)")
        print(f"  RSS per router:           median {r['rss_mib_median']} MiB, max {r['rss_mib_max']} MiB")
        print(f"  run directory:            {r['run_dir']}")


if __name__ == "__main__":
    main()
