"""Benchmark of `testbed analyze`, side by side in one run and on the same
data: a bare Spark start (a new process: SparkSession + one count, with the
session settings a small analysis uses; and, for comparison, with Spark's
own defaults), `testbed
analyze` cold (a new process starting its own JVM), `testbed analyze` warm
through a Spark Connect server (`testbed spark start`, run after the first
size's cold analysis so that its background warm-up never competes with a
cold one; the second of two analyses; when the server's background warm-up
was still running then, that one is "just started" and it is measured again
once the warm-up is done),
and a plain single-process pandas/pyarrow baseline computing the same
headline figures, checked to agree. A time is worth nothing without its
answer: next to each analysis it prints the summary's figures beside an
independent count of the raw traces (tests/trace_census.py: its own
protobuf, nothing from analysis/), and MISMATCH where they differ; the
bench then exits 1. For each size: a synthetic run
directory with N trace events; wall time and peak RSS of the whole process
tree (CLI, JVM, decoding workers; the Connect server's tree too), CPU
seconds of the same trees, and the load average (the box is shared: wall
time is inflated by other jobs, CPU time much less). The bare start, and
the cold analysis of runs up to 100k events, are the median of `--repeat`
runs (default 3): the two vary by about 10% from one run to the next, and
their ratio is a target.

    .venv/bin/python bench/bench_analysis.py                     # 3k, 1M, 10M events
    .venv/bin/python bench/bench_analysis.py --events 3000,1000000

The runs come from analysis/synthetic.py (frames encoded by hand: 10M
events in about 20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.synthetic import generate  # noqa: E402
from tests import trace_census  # noqa: E402

# --------------------------------------------------------------------------- memory


def _tree(pids: list[int]) -> dict[int, tuple[int, float]]:
    """pid -> (RSS bytes, CPU seconds so far) of the processes in these trees."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    stack = list(pids)
    while stack:
        p = stack.pop()
        try:
            rss = 0
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{p}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            out[p] = (rss, (int(stat[11]) + int(stat[12])) / tick)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
            continue
    return out


class PeakRss:
    """Peak RSS of this process's descendants, of this process too when
    `itself` (what runs in it is measured), and of `extra` process trees (e.g.
    a Connect server); and the CPU seconds they spent meanwhile (each
    process's last sample, less what it had spent before), sampled every 100
    ms. A command in a subprocess is measured without this process: the
    baseline's memory, which this process keeps, is not the command's."""

    def __init__(self, extra: list[int] | None = None, itself: bool = True) -> None:
        self.pids = [os.getpid(), *(extra or [])]
        self.skip = set() if itself else {os.getpid()}
        self.peak = 0
        self._before = {p: cpu for p, (_, cpu) in _tree(self.pids).items()}
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @property
    def cpu(self) -> float:
        return sum(c - self._before.get(p, 0.0) for p, c in self._cpu.items())

    def _sample(self) -> None:
        tree = {p: v for p, v in _tree(self.pids).items() if p not in self.skip}
        self.peak = max(self.peak, sum(rss for rss, _ in tree.values()))
        self._cpu.update({p: cpu for p, (_, cpu) in tree.items()})

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.1)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self._sample()


# --------------------------------------------------------------------------- baseline


def baseline(root: Path) -> dict:
    """Single process: decode every trace file in turn (the same decoder) and
    compute the headline figures with pandas. No churn in the bench run, so
    the expected recipients are every node that JOINed, minus the publishers."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    from analysis.ingest import decode_file, trace_files

    tmp = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    try:
        frames = []
        for i, p in enumerate(trace_files(root / "traces")):
            out = tmp / f"{i}.parquet"
            decode_file(p, out, p.stem)
            frames.append(pq.read_table(out, columns=["node", "type", "ts", "msg"]).to_pandas())
        e = pd.concat(frames, ignore_index=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    joined = set(e.loc[e["type"] == 9, "node"])
    pubs = e[e["type"] == 0].groupby("msg").agg(publish_ts=("ts", "min"), publishers=("node", lambda s: set(s)))
    expected = int(sum(len(joined - p) for p in pubs["publishers"]))
    d = e[e["type"] == 3].groupby(["msg", "node"], as_index=False)["ts"].min()
    d = d.merge(pubs[["publish_ts"]], left_on="msg", right_index=True)
    lat = ((d["ts"] - d["publish_ts"]) / 1e6).to_numpy()
    return {
        "messages": len(pubs),
        "delivery_ratio": len(d) / expected if expected else None,
        "latency_p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "latency_p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
        "duplicates": int((e["type"] == 2).sum()),
    }


REPO = Path(__file__).resolve().parent.parent
TESTBED = Path(sys.executable).parent / "testbed"
HEADLINE = ("messages", "delivery_ratio", "latency_p50_ms", "latency_p99_ms", "duplicates")
BARE_START = (
    "from analysis.spark import get_spark; s = get_spark(small=True); s.range(1).count()"
)
DEFAULT_START = (
    "from pyspark.sql import SparkSession; s = SparkSession.builder.master('local[*]').getOrCreate(); s.range(1).count()"
)
REPEATED_MAX_EVENTS = 100_000  # cold analyses up to this size are repeated


def median_of(runs: int, argv: list[str], env: dict[str, str]) -> Timing:
    """The run with the median wall time of `runs` runs of one command."""
    timings = sorted((timed(argv, env) for _ in range(max(1, runs))), key=lambda t: t.wall)
    return timings[len(timings) // 2]


@dataclass(frozen=True)
class Timing:
    """One measured command: wall and CPU seconds (its process tree, and the
    Connect server's when it worked for it), peak RSS, the 1-minute load
    average when it ended (the box is shared: wall time is inflated)."""

    wall: float
    cpu: float
    rss: int
    load: float
    stdout: str = ""


def timed(argv: list[str], env: dict[str, str], server: int | None = None) -> Timing:
    """Run one command; its Timing (the Connect server's tree counted too when given)."""
    with PeakRss([server] if server else None, itself=False) as mem:
        t = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
        wall = time.monotonic() - t
    if out.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return Timing(wall, mem.cpu, mem.peak, os.getloadavg()[0], out.stdout)


def timed_here(fn) -> tuple[Timing, object]:
    """Run `fn()` in this process; its Timing and result."""
    with PeakRss() as mem:
        t = time.monotonic()
        result = fn()
        wall = time.monotonic() - t
    return Timing(wall, mem.cpu, mem.peak, os.getloadavg()[0]), result


def agree(a: dict, b: dict) -> bool:
    ok = True
    for key in HEADLINE:
        x, y = a.get(key), b.get(key)
        same = x == y if isinstance(x, int) else (
            x is not None and y is not None and abs(x - y) <= 1e-6 * max(1, abs(y)))
        ok &= bool(same)
    return ok


SHOWN = ("events", "deliveries", "expected_deliveries", "delivery_ratio", "duplicates", "latency_p50_ms")


def checked(what: str, summary: dict, census: trace_census.Census) -> bool:
    """Print the summary's figures beside the census's; False on a mismatch."""
    wrong = trace_census.differences(summary, census)
    mine = trace_census.figures(census)
    shown = "  ".join(f"{k} {summary_value(summary, k)}" for k in SHOWN)
    print(f"    {what}: {shown}")
    if not wrong:
        print(f"    {'':<{len(what)}}  = the independent count of the traces")
        return True
    for key, (got, want) in wrong.items():
        print(f"    MISMATCH {key}: summary {got}, independent count {want}")
    print(f"    (independent count: {', '.join(f'{k} {mine[k]}' for k in SHOWN)})")
    return False


def summary_value(summary: dict, key: str):
    return summary["latency_ms"]["p50"] if key == "latency_p50_ms" else summary[key]


def load() -> str:
    return "load average " + " / ".join(f"{v:.1f}" for v in os.getloadavg()) + f" on {os.cpu_count()} cores"


def warmed_up(env: dict[str, str]) -> bool:
    """Whether the Connect server's background warm-up (analysis/warming.py) is over."""
    out = subprocess.run([str(TESTBED), "spark", "status", "--json"], capture_output=True, text=True, env=env)
    warming = json.loads(out.stdout or "{}").get("warm_up")
    return not warming or warming["done"]


def wait_warmed(env: dict[str, str], timeout_s: float = 600.0) -> float:
    """Wait until the server's background warm-up is over; the seconds waited."""
    began = time.monotonic()
    while not warmed_up(env) and time.monotonic() - began < timeout_s:
        time.sleep(1.0)
    return time.monotonic() - began


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", default="3000,1000000,10000000", help="comma-separated sizes")
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the bare starts and of small cold analyses")
    args = ap.parse_args()
    sizes = [int(x) for x in args.events.split(",") if x]

    work = Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    cold_env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE",)}
    cold_env["TESTBED_STATE_DIR"] = str(work / "state-cold")  # no Connect server there
    warm_env = dict(cold_env, TESTBED_STATE_DIR=str(work / "state-warm"))
    print(f"host: {load()} (other jobs share this machine)")
    try:
        bare = median_of(args.repeat, [sys.executable, "-c", BARE_START], cold_env)
        default = median_of(args.repeat, [sys.executable, "-c", DEFAULT_START], cold_env)
        for what, tm in (("our small-run settings", bare), ("Spark's defaults", default)):
            print(f"bare Spark start (new process, session + one count), {what}: {tm.wall:.1f} s wall, "
                  f"{tm.cpu:.1f} s CPU, peak RSS {tm.rss / 2**30:.2f} GiB, load {tm.load:.1f}")
        server: dict | None = None
        rows: list[tuple[int, str, Timing]] = [(0, "bare Spark start", bare), (0, "bare, Spark defaults", default)]
        for n in sizes:
            root = work / f"run-{n}"
            t = time.monotonic()
            gen = generate(root, n, args.nodes)
            size = sum(p.stat().st_size for p in (root / "traces").iterdir())
            print(f"\n{gen['events']:,} events ({gen['messages']:,} messages, {gen['nodes']} nodes, "
                  f"{size / 2**20:.0f} MiB of traces) generated in {time.monotonic() - t:.1f} s; {load()}")
            t = time.monotonic()
            census = trace_census.count(root)
            print(f"  independent count of the traces: {census.records:,} records, {census.deliveries:,} deliveries "
                  f"in {time.monotonic() - t:.1f} s")
            b = None
            first = len(rows)
            if not args.skip_baseline:
                timing, b = timed_here(lambda: baseline(root))
                rows.append((n, "pandas baseline", timing))
            cold = median_of(args.repeat if n <= REPEATED_MAX_EVENTS else 1,
                             [str(TESTBED), "analyze", str(root), "--json"], cold_env)
            rows.append((n, "analyze cold", cold))
            if server is None:  # started after the first cold analysis: its background warm-up never competes with one
                started = timed([str(TESTBED), "spark", "start", "--json"], warm_env)
                server = json.loads(started.stdout)
                print(f"  testbed spark start: {started.wall:.1f} s ({server['url']})")
            timed([str(TESTBED), "analyze", str(root), "--json"], warm_env, server["pid"])
            warm = timed([str(TESTBED), "analyze", str(root), "--json"], warm_env, server["pid"])
            if not warmed_up(warm_env):
                rows.append((n, "analyze warm, just started", warm))
                waited = wait_warmed(warm_env)
                print(f"  background warm-up done {waited:.1f} s later ({load()})")
                warm = timed([str(TESTBED), "analyze", str(root), "--json"], warm_env, server["pid"])
            rows.append((n, "analyze warm (Connect)", warm))
            cold_s, warm_s = json.loads(cold.stdout), json.loads(warm.stdout)
            same = agree(warm_s, cold_s) and (b is None or agree(cold_s, b))
            for _, what, tm in rows[first:]:
                print(f"  {what:<24}{tm.wall:8.1f} s wall {tm.cpu:8.1f} s CPU   peak RSS {tm.rss / 2**30:5.2f} GiB"
                      f"   load {tm.load:.1f}")
                if what.startswith("analyze"):
                    same &= checked(what, json.loads(tm.stdout), census)
            print(f"  cold / bare start = {cold.wall / bare.wall:.2f} ({cold.wall / default.wall:.2f} against Spark's "
                  f"defaults); headline figures "
                  + ("agree" if same else "DISAGREE"))
            shutil.rmtree(root, ignore_errors=True)
            if not same:
                return 1
        print(f"\n{'events':>12}  {'what':<24}{'wall s':>8}{'CPU s':>8}{'peak GiB':>10}{'load':>7}")
        for n, what, tm in rows:
            print(f"{n:>12,}  {what:<24}{tm.wall:8.1f}{tm.cpu:8.1f}{tm.rss / 2**30:10.2f}{tm.load:7.1f}")
    finally:
        subprocess.run([str(TESTBED), "spark", "stop"], env=warm_env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
