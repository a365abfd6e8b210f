"""Benchmark of `testbed analyze`: a synthetic run directory with N trace
events (default 1M), the Spark analysis' wall time and peak memory (driver +
JVM + workers: the whole process tree), and the same headline metrics from a
plain single-process pandas/pyarrow baseline, checked to agree.

    .venv/bin/python bench/bench_analysis.py --events 1000000
    .venv/bin/python bench/bench_analysis.py --events 10000000 --keep /tmp/bench10m

Frames are encoded by hand (the TraceEvent wire format is small), so
generating 10M events takes about a minute, not ten.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.codec import encode_uvarint  # noqa: E402

TOPIC = b"blocks"
MS = 1_000_000


def _f(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + encode_uvarint(len(payload)) + payload


def _v(tag: int, value: int) -> bytes:
    return bytes([tag]) + encode_uvarint(value)


SIZE_TAG = encode_uvarint(100 << 3)  # the gossip-testbed size extension, field 100


def ev(type_: int, peer: bytes, ts: int, body: bytes = b"") -> bytes:
    payload = _v(0x08, type_) + _f(0x12, peer) + _v(0x18, ts) + body
    return encode_uvarint(len(payload)) + payload


def meta_msgs(ids: list[bytes]) -> bytes:
    return b"".join(_f(0x0A, _f(0x0A, i) + _f(0x12, TOPIC)) for i in ids)


def rpc_body(field_tag: int, peer: bytes, meta: bytes, size: int) -> bytes:
    return _f(field_tag, _f(0x0A, peer) + _f(0x12, meta) + SIZE_TAG + encode_uvarint(size))


def generate(root: Path, events: int, nodes: int = 200, seed: int = 1) -> dict:
    """A gossipsub-like run: every message reaches ~98% of the nodes over a
    random overlay, with duplicates, IHAVE/IWANT gossip and mesh GRAFTs."""
    rng = random.Random(seed)
    names = [f"n{i}".encode() for i in range(nodes)]
    per_msg = nodes * 9  # about 9 events per node per message (see below)
    n_msgs = max(1, events // per_msg)
    traces = root / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    out: dict[bytes, list[bytes]] = {n: [] for n in names}
    count = 0
    for n in names:
        out[n].append(ev(9, n, 0, _f(0x6A, _f(0x0A, TOPIC))))
        for p in rng.sample(names, 6):
            if p != n:
                out[n].append(ev(11, n, 100 * MS, _f(0x7A, _f(0x0A, p) + _f(0x12, TOPIC))))
                count += 1
        count += 1
    for k in range(n_msgs):
        pub = names[k % nodes]
        mid = pub + k.to_bytes(8, "big")
        t_pub = 1_000 * MS + k * 20 * MS
        out[pub].append(ev(0, pub, t_pub, _f(0x22, _f(0x0A, mid) + _f(0x12, TOPIC))))
        meta = meta_msgs([mid])
        count += 1
        for n in names:
            if n == pub or rng.random() < 0.02:  # ~2% never get it
                continue
            t = t_pub + int(rng.lognormvariate(4.0, 0.4) * MS)
            frm = names[rng.randrange(nodes)]
            out[frm].append(ev(7, frm, t - 5 * MS, rpc_body(0x5A, n, meta, 180)))
            out[n].append(ev(6, n, t, rpc_body(0x52, frm, meta, 180)))
            out[n].append(ev(3, n, t, _f(0x3A, _f(0x0A, mid) + _f(0x12, TOPIC) + _f(0x1A, frm))))
            count += 3
            for _ in range(2):  # two duplicates on average
                d = t + int(rng.expovariate(1 / 20) * MS)
                out[frm].append(ev(7, frm, d - 5 * MS, rpc_body(0x5A, n, meta, 180)))
                out[n].append(ev(6, n, d, rpc_body(0x52, frm, meta, 180)))
                out[n].append(ev(2, n, d, _f(0x32, _f(0x0A, mid) + _f(0x12, frm) + _f(0x1A, TOPIC))))
                count += 3
        if k % 10 == 0:  # gossip: an IHAVE from the publisher to a few peers
            for p in rng.sample(names, 3):
                ctl = _f(0x1A, _f(0x0A, _f(0x0A, TOPIC) + _f(0x12, mid)))
                out[pub].append(ev(7, pub, t_pub + 900 * MS, rpc_body(0x5A, p, ctl, 60)))
                count += 1
    for n, frames in out.items():
        (traces / f"{n.decode()}.pb").write_bytes(b"".join(frames))
    (root / "manifest.json").write_text(json.dumps({
        "tool": "gossip-testbed", "backend": "sim", "name": f"bench-{events}", "clock": "virtual", "t0_ns": 0,
        "shaping": {"path": "virtual"}, "nodes": nodes, "warnings": [],
    }))
    (root / "events.jsonl").write_text(
        json.dumps({"t_ns": 0, "kind": "run_start"}) + "\n"
        + json.dumps({"t_ns": 1_000 * MS + n_msgs * 20 * MS + 2_000 * MS, "kind": "run_end"}) + "\n"
    )
    return {"events": count, "messages": n_msgs, "nodes": nodes}


# --------------------------------------------------------------------------- memory


def _tree_rss(pid: int) -> int:
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


class PeakRss:
    """Peak RSS of this process and all its descendants, sampled every 100 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_rss(os.getpid()))
            self._stop.wait(0.1)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _tree_rss(os.getpid()))


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    ap.add_argument("--spark-master", default=None)
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()

    import analysis

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-run-"))
    if root.exists() and args.keep:
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    gen = generate(root, args.events, args.nodes)
    gen_s = time.monotonic() - t
    size = sum(p.stat().st_size for p in (root / "traces").iterdir())
    print(f"generated {gen['events']:,} events ({gen['messages']:,} messages, {gen['nodes']} nodes, "
          f"{size / 2**20:.0f} MiB of traces) in {gen_s:.1f} s")

    b = None
    if not args.skip_baseline:  # first, so no JVM is in the process tree yet
        with PeakRss() as bmem:
            t = time.monotonic()
            b = baseline(root)
            base_s = time.monotonic() - t
        print(f"pandas baseline: {base_s:.1f} s wall, peak RSS {bmem.peak / 2**30:.2f} GiB")

    stages: dict[str, float] = {}
    last = [time.monotonic(), "start"]

    def progress(stage: str, frac) -> None:
        if stage != last[1]:
            now = time.monotonic()
            stages[last[1]] = stages.get(last[1], 0.0) + now - last[0]
            last[0], last[1] = now, stage

    with PeakRss() as mem:
        t = time.monotonic()
        s = analysis.run_analysis(root, spark_master=args.spark_master, progress=progress)
        spark_s = time.monotonic() - t
    print(f"spark analysis: {spark_s:.1f} s wall, peak RSS (driver + JVM + workers) {mem.peak / 2**30:.2f} GiB")
    for k, v in stages.items():
        if k not in ("start",):
            print(f"    {k:<34} {v:7.1f} s")

    ok = True
    if b is not None:
        print(f"{'metric':<18}{'spark':>14}{'baseline':>14}")
        for key in ("messages", "delivery_ratio", "latency_p50_ms", "latency_p99_ms", "duplicates"):
            a, c = s.get(key), b.get(key)
            if isinstance(a, int):
                same = a == c
            else:
                same = a is not None and c is not None and abs(a - c) <= 1e-6 * max(1, abs(c))
            ok &= bool(same)
            print(f"{key:<18}{a!s:>14.10}{c!s:>14.10}  {'ok' if same else 'DIFFERENT'}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print("agree" if ok else "DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
