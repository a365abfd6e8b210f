"""What a router costs in CPU: K routers as separate processes (the process
backend, driven by the run controller as `testbed up` does), M messages
published at a steady rate, and every router's CPU time read from
/proc/<pid>/stat before and after.

Prints, for each K: CPU per delivered message and per transmission (an RPC
handed to a peer), the routers' CPU per second at rest (heartbeats, the lag
ticker, trace flushes), and RSS per router. CPU time is what this measures
because it is robust to other load on the machine; the wall-clock rate is
only the workload's pace.

Written to compare two versions of the code with one harness: it imports the
project it sits in, so a copy of this file in another worktree measures that
worktree's routers (the `code` line says which).

    .venv/bin/python bench/bench_router_cpu.py                       # K = 10 and 50
    .venv/bin/python bench/bench_router_cpu.py --routers 10 --messages 100 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import node  # noqa: E402
from orchestrator.controller import Controller  # noqa: E402
from orchestrator.experiment.model import LinkParams, NodeSpec, Publish, ResolvedExperiment  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def experiment(k: int, degree: int) -> ResolvedExperiment:
    names = [f"n{i:03d}" for i in range(k)]
    rng = random.Random(1)
    edges: set[tuple[str, str]] = set()
    for i, a in enumerate(names):  # a ring for connectivity, plus random chords
        edges.add(tuple(sorted((a, names[(i + 1) % k]))))
        for b in rng.sample(names, min(k, degree // 2)):
            if b != a:
                edges.add(tuple(sorted((a, b))))
    nodes = tuple(NodeSpec(name, "default", "gossipsub", {}, ("t",), i) for i, name in enumerate(names))
    return ResolvedExperiment(
        name=f"bench-cpu-{k}", source="bench/bench_router_cpu.py", seed=1, nodes=nodes,
        edges=tuple(sorted(edges)), links={}, default_link=LinkParams(0.0), publishes=(), churn=(),
        expectations=(), duration=0.0, linger=0.0,
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid}")


def statuses(ctl: Controller) -> dict[str, dict]:
    def one(name: str):
        return name, ctl.backend.control_client(name).try_call("status", timeout=10.0)

    with ThreadPoolExecutor(8) as pool:
        got = dict(pool.map(one, ctl.nodes))
    missing = sorted(n for n, s in got.items() if not s)
    if missing:
        raise RuntimeError(f"no status from {missing}")
    return got


def snapshot(ctl: Controller) -> dict:
    sts = statuses(ctl)
    return {
        "t": time.monotonic(),
        "cpu": {n: cpu_seconds(s["pid"]) for n, s in sts.items()},
        "delivered": sum(s["counters"]["delivered"] for s in sts.values()),
        "rpcs_out": sum(s["counters"]["rpcs_out"] for s in sts.values()),
        "rss": [rss_bytes(s["pid"]) for s in sts.values()],
    }


def bench(k: int, degree: int, messages: int, rate: float, size: int, rest_s: float) -> dict:
    resolved = experiment(k, degree)
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-cpu-{k}-"))
    ctl = Controller.create(resolved, None, "process", f"bench-cpu-{k}-{int(time.time())}", run_dir)
    result: dict = {"routers": k, "edges": len(resolved.edges), "messages": messages, "rate": rate, "size": size}
    try:
        ctl.up(ready_timeout=60 + 1.0 * k)
        time.sleep(3.0)  # let start-up settle (meshes, first heartbeats)
        before_rest = snapshot(ctl)
        time.sleep(rest_s)
        before = snapshot(ctl)
        rest_cpu = sum(before["cpu"].values()) - sum(before_rest["cpu"].values())
        names = list(ctl.nodes)
        start = time.monotonic()
        for seq in range(messages):
            publisher = names[seq % k]
            ctl.publish(Publish(seq, time.monotonic() - start, "t", size, publisher, (publisher,)))
            time.sleep(max(0.0, start + (seq + 1) / rate - time.monotonic()))
        deadline = time.monotonic() + 30
        expected = messages * (k - 1)
        while time.monotonic() < deadline:  # until every delivery is in (or 30 s)
            after = snapshot(ctl)
            if after["delivered"] - before["delivered"] >= expected:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # the last forwards and IHAVEs
        after = snapshot(ctl)
        load_s = after["t"] - before["t"]
        load_cpu = sum(after["cpu"].values()) - sum(before["cpu"].values())
        work_cpu = load_cpu - rest_cpu / (before["t"] - before_rest["t"]) * load_s  # less what rest would cost
        delivered = after["delivered"] - before["delivered"]
        sent = after["rpcs_out"] - before["rpcs_out"]
        result.update({
            "delivered": delivered, "expected_deliveries": expected, "transmissions": sent,
            "cpu_s_under_load": round(load_cpu, 3), "load_wall_s": round(load_s, 2),
            "cpu_ms_per_delivery": round(1000 * work_cpu / delivered, 3) if delivered else None,
            "cpu_ms_per_transmission": round(1000 * work_cpu / sent, 3) if sent else None,
            "rest_cpu_ms_per_s_per_router": round(1000 * rest_cpu / (before["t"] - before_rest["t"]) / k, 2),
            "rss_mib_median": round(statistics.median(after["rss"]) / 2**20, 1),
            "rss_mib_max": round(max(after["rss"]) / 2**20, 1),
        })
    finally:
        ctl.down()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routers", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--degree", type=int, default=6, help="average overlay degree (ring + random chords)")
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0, help="messages per second")
    ap.add_argument("--size", type=int, default=256, help="bytes of data per message")
    ap.add_argument("--rest", type=float, default=10.0, help="seconds measured at rest")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    code = str(Path(node.__file__).resolve().parent.parent)
    results = [bench(k, args.degree, args.messages, args.rate, args.size, args.rest) for k in args.routers]
    if args.json:
        print(json.dumps({"code": code, "results": results}, indent=1))
        return
    print(f"code: {code}")
    for r in results:
        print(f"K={r['routers']} routers ({r['edges']} overlay edges), {r['messages']} messages of {r['size']} B "
              f"at {r['rate']:g}/s")
        print(f"  deliveries:            {r['delivered']} of {r['expected_deliveries']}, "
              f"{r['transmissions']} transmissions")
        print(f"  CPU per delivery:      {r['cpu_ms_per_delivery']} ms (all routers' CPU, less rest)")
        print(f"  CPU per transmission:  {r['cpu_ms_per_transmission']} ms")
        print(f"  CPU at rest:           {r['rest_cpu_ms_per_s_per_router']} ms/s per router")
        print(f"  RSS per router:        median {r['rss_mib_median']} MiB, max {r['rss_mib_max']} MiB")


if __name__ == "__main__":
    main()
