"""Simulator benchmark: events per second, wall time against simulated time,
peak memory and trace size at several sizes. Each size runs in its own
process so peak memory is its own.

Two set-ups. The default is the reference simulator's (simsub routers,
N-connect 10, per-pair latency uniform 10-150 ms, each message injected
through 5 random nodes). `--file` takes an experiment file instead, its
groups' counts scaled to each `--nodes` (split evenly): issue 37's scale run
is topologies/scale/gossipsub-100k.yaml. `--trace-sample F` runs at the
sample trace level (docs/simulator.md, "Trace levels"); `--trace-hash`
adds a SHA-256 over the trace files, to show that a change to the simulator
left its output byte-identical; `--pypy` simulates on PyPy as `testbed sim
--pypy` does (peak_rss_mb is then the simulating container's, and
peak_rss_host_mb this process', which resolved the experiment);
`--wall-limit S` stops each run after S seconds of simulating and reports how far it got and at what rate (for a
size that does not finish in the time there is); `--analyse` also
times the analysis and the report of each run; `--extrapolate N` adds a column for N nodes
carried on along the line through the two largest sizes measured, marked as
extrapolated.

    .venv/bin/python bench/bench_sim.py                 # 100, 1000, 10000 nodes
    .venv/bin/python bench/bench_sim.py --nodes 1000 --messages 100 --interval 0.1
    .venv/bin/python bench/bench_sim.py --file topologies/scale/gossipsub-100k.yaml \\
        --nodes 10000 100000 --trace-sample 0.01 --analyse --extrapolate 1000000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from orchestrator.experiment.experiment import Experiment

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
# what scales with the number of nodes, for --extrapolate
PER_NODE = ("events", "sim_wall_s", "analysis_wall_s", "report_wall_s", "peak_rss_mb", "peak_rss_after_analysis_mb",
            "trace_mb", "run_dir_mb", "resolve_s")


def scaled(path: Path, nodes: int) -> str:
    """The experiment file with its groups' counts scaled to `nodes` in all."""
    doc = yaml.safe_load(path.read_text())
    groups = doc.get("groups") or [doc["nodes"]]
    for i, group in enumerate(groups):
        group["count"] = nodes // len(groups) + (1 if i < nodes % len(groups) else 0)
    return yaml.safe_dump(doc, sort_keys=False)


def experiment_of(args: argparse.Namespace, nodes: int) -> Experiment:
    """The experiment a run of `nodes` simulates: --file scaled, else the reference set-up."""
    from orchestrator.experiment.spec import parse_experiment

    text = scaled(args.file, nodes) if args.file else EXPERIMENT.format(
        nodes=nodes, messages=args.messages, interval=args.interval, router=args.router)
    return parse_experiment(text, str(args.file or "bench.yaml"))


def run_one(args: argparse.Namespace, nodes: int) -> dict:
    from orchestrator.experiment.spec import resolved_to_yaml
    from orchestrator.pypy.run import run_simulation_on_pypy
    from orchestrator.sim.run import run_simulation

    experiment = experiment_of(args, nodes)
    t0 = time.perf_counter()
    resolved = experiment.resolve()
    resolve_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        run_dir = Path(tmp) / "run"
        simulate = run_simulation_on_pypy if args.pypy else run_simulation
        result = simulate(resolved, resolved_to_yaml(resolved, experiment), run_dir, **trace_level(args))
        peak_here = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        traces = sorted((run_dir / "traces").glob("*.pb"))
        row = figures(result.summary, nodes, resolve_s, result.peak_rss_mb or peak_here,
                      sum(p.stat().st_size for p in traces))
        if args.pypy:  # the host held the resolved experiment meanwhile
            row["interpreter"] = "PyPy"
            row["peak_rss_host_mb"] = round(peak_here, 1)
        if args.trace_hash:
            row["trace_sha256"] = traces_digest(traces)
        if args.analyse:
            row.update(analyse(run_dir))
        row["run_dir_mb"] = round(sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 1e6, 1)
    return row


def traces_digest(traces: list[Path]) -> str:
    """One SHA-256 over every trace file's name and bytes, in name order: two
    builds of the simulator that give the same digest wrote the same traces."""
    digest = hashlib.sha256()
    for path in traces:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class _WallLimit(Exception):
    pass


def probe_one(args: argparse.Namespace, nodes: int) -> dict:
    """A run too long to finish, measured for `--wall-limit` seconds of
    simulating: how far it got, at what rate, with which memory, and the
    rate over each tenth of that time (it changes as the run goes from
    connecting to publishing)."""
    from orchestrator.sim.simulator import WARMUP_S, Simulator

    experiment = experiment_of(args, nodes)
    t0 = time.perf_counter()
    resolved = experiment.resolve()
    resolve_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        t1 = time.perf_counter()
        sim = Simulator(resolved, Path(tmp) / "traces", lambda *a, **k: None, WARMUP_S, **trace_level(args))
        build_s = time.perf_counter() - t1
        rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        marks: list[tuple[float, int, float]] = [(0.0, 0, 0.0)]
        start = time.perf_counter()

        # a timer, not the simulator's progress steps: a million nodes' first
        # step (0.14 simulated seconds) takes longer than a limit of 15 minutes
        def tick(_signum: int, _frame: object) -> None:
            wall = time.perf_counter() - start
            marks.append((wall, sim.stats.events, sim.now / 1e9))
            if wall >= args.wall_limit:
                raise _WallLimit

        signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, args.wall_limit / 10, args.wall_limit / 10)
        try:
            sim.run()
            finished = True
        except _WallLimit:
            finished = False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        wall = time.perf_counter() - start
        if not finished:  # the trace encoder forked on the other core finishes before its directory goes
            sim.sink.close()
    windows = [{"wall_s": round(b[0], 1), "simulated_s": round(b[2], 2),
                "events_per_s": round((b[1] - a[1]) / (b[0] - a[0])) if b[0] > a[0] else None}
               for a, b in zip(marks, marks[1:])]
    return {"nodes": nodes, "resolve_s": round(resolve_s, 2), "build_s": round(build_s, 1),
            "peak_rss_built_mb": round(rss_built, 1), "finished": finished, "sim_wall_s": round(wall, 1),
            "simulated_s": round(sim.now / 1e9, 3), "end_s": round(sim.end_time() / 1e9, 3),
            "events": sim.stats.events, "events_per_s": round(sim.stats.events / wall),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1), "windows": windows}


def trace_level(args: argparse.Namespace) -> dict:
    """run_simulation's trace level: none given (the full level) unless
    --trace-sample, so the bench also runs on code from before the levels."""
    if args.trace_sample is None:
        return {}
    from orchestrator.sim.trace_level import TraceLevel

    return {"trace_level": TraceLevel(args.trace_sample)}


def figures(s: dict, nodes: int, resolve_s: float, peak_mb: float, trace_bytes: int) -> dict:
    return {
        "nodes": nodes, "messages": s["messages"], "resolve_s": round(resolve_s, 2),
        "events": s["events_processed"], "sim_wall_s": s["wall_s"], "simulated_s": s["simulated_s"],
        "events_per_s": s["events_per_s"], "faster_than_real_time": s["wall_s"] < s["simulated_s"],
        "delivery_ratio": s["delivery_ratio"], "latency_p99_ms": s["latency_p99_ms"],
        "trace_mb": round(trace_bytes / 1e6, 1), "peak_rss_mb": round(peak_mb, 1),
    }


def analyse(run_dir: Path) -> dict:
    """What `testbed sim` does after simulating, timed: the analysis, then
    the report; the analysis' figures beside the simulator's."""
    from analysis import run_analysis, write_report

    t0 = time.perf_counter()
    summary = run_analysis(run_dir)
    t1 = time.perf_counter()
    write_report([run_dir], run_dir / "report.html")
    return {
        "analysis_wall_s": round(t1 - t0, 1),
        "report_wall_s": round(time.perf_counter() - t1, 1),
        "analysed_delivery_ratio": summary.get("delivery_ratio"),
        "trace_level": (summary.get("trace_level") or {}).get("level"),
        "peak_rss_after_analysis_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def extrapolated(rows: list[dict], nodes: int) -> dict:
    """The measured rows carried on to `nodes`, not a measurement: along the
    line through the two largest sizes (what grows per node, over a fixed
    base), or in proportion to the one size measured."""
    last = rows[-1]
    first = rows[-2] if len(rows) > 1 else {key: 0 for key in last}
    span = last["nodes"] - (first["nodes"] or 0)

    def carried(key: str) -> float:
        slope = (last[key] - (first[key] or 0)) / span
        return round(last[key] + slope * (nodes - last["nodes"]), 1)

    out = {key: "-" for key in last}
    out.update({key: carried(key) for key in PER_NODE if isinstance(last.get(key), (int, float))})
    out["events_per_s"] = round(out["events"] / out["sim_wall_s"]) if out.get("sim_wall_s") else "-"
    out.update(nodes=f"{nodes} (extrapolated from {', '.join(str(r['nodes']) for r in rows[-2:])})",
               simulated_s=last["simulated_s"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--router", default="simsub")
    parser.add_argument("--file", type=Path, help="an experiment file, its groups scaled to each --nodes")
    parser.add_argument("--trace-sample", type=float, help="trace this fraction of the nodes (default: all)")
    parser.add_argument("--analyse", action="store_true", help="also time the analysis of each run")
    parser.add_argument("--wall-limit", type=float,
                        help="stop simulating after this many seconds and report how far the run got")
    parser.add_argument("--trace-hash", action="store_true", help="add a SHA-256 over every trace file")
    parser.add_argument("--pypy", action="store_true",
                        help="simulate on PyPy (testbed sim --pypy; the experiment is resolved here)")
    parser.add_argument("--extrapolate", type=int, help="add a column for this many nodes, extrapolated")
    parser.add_argument("--tmp", default=os.environ.get("TMPDIR"), help="where the run directories go")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.wall_limit and args.extrapolate:
        parser.error("--extrapolate carries finished runs on; --wall-limit stops them before the end")
    if args.wall_limit and args.pypy:
        parser.error("--wall-limit probes the simulator in this process; --pypy runs it in a container")
    if args.child:
        print(json.dumps((probe_one if args.wall_limit else run_one)(args, args.nodes[0])))
        return
    rows = []
    for n in args.nodes:
        child = [a for a in sys.argv[1:] if a not in ("--json",)]
        at = child.index("--nodes") if "--nodes" in child else None
        if at is not None:  # drop the list of sizes, run this one
            end = at + 1
            while end < len(child) and not child[end].startswith("--"):
                end += 1
            child[at:end] = []
        out = subprocess.run([sys.executable, __file__, *child, "--child", "--nodes", str(n)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.extrapolate:
        rows.append(extrapolated(rows, args.extrapolate))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    setup = args.file or f"{args.router}, {args.messages} messages every {args.interval}s"
    level = f"sample {args.trace_sample}" if args.trace_sample else "full"
    print_rows(f"simulator: {setup}, trace {level}", rows)


def print_rows(title: str, rows: list[dict]) -> None:
    """The rows as a table, a column per size and a line per figure; below
    it, on lines of their own, a digest (which a user compares or copies
    whole) and a probe's windows."""
    from rich.console import Console
    from rich.table import Table

    below = ("trace_sha256", "windows")
    table = Table(title=title)
    table.add_column("metric", style="bold")
    for row in rows:
        table.add_column(f"{row['nodes']} nodes", justify="right")
    for key in rows[0]:
        if key not in below:
            table.add_row(key, *(str(row.get(key, "-")) for row in rows))
    Console().print(table)
    for row in rows:
        if "trace_sha256" in row:
            print(f"trace_sha256, {row['nodes']} nodes: {row['trace_sha256']}")
        for window in row.get("windows", ()):
            print(f"{row['nodes']} nodes, to {window['wall_s']} s of wall time ({window['simulated_s']} s simulated): "
                  f"{window['events_per_s']} events/s")


if __name__ == "__main__":
    main()
