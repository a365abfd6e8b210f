"""Docker backend benchmark: N gossipsub routers, one per container.

For each N: time until every container is up and every node has a mesh for
the topic, memory per container (cgroup), event-loop lag p99 (from each
node's status) while a light workload runs, delivery of that workload, and
the shaping path used (an uplink rate is applied in the kernel with htb/tbf).

    .venv/bin/python bench/bench_docker.py --nodes 50 100 [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.config import NodeConfig, PeerAddress  # noqa: E402
from node.libp2p.identity import identity_for_index  # noqa: E402
from node.proto import trace_pb2  # noqa: E402
from node.runtime.client import ControlClient  # noqa: E402
from node.trace.file import read_trace  # noqa: E402
from orchestrator.backends.api import BackendContext  # noqa: E402
from orchestrator.backends.docker.backend import DockerBackend  # noqa: E402
from orchestrator.images.router import ensure_image  # noqa: E402
from orchestrator.records.state import StateStore  # noqa: E402

TOKEN = "bench"


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))]


def bench(n: int, image: str, degree: int, uplink_bps: int, publish_s: float, rate: float) -> dict:
    testbed = f"bench-{n}-{int(time.time())}"
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-docker-{n}-"))
    backend = DockerBackend(BackendContext(testbed, run_dir, StateStore(), options={"image": image}))
    nodes = [f"n{i:03d}" for i in range(n)]
    result: dict = {"nodes": n, "run_dir": str(run_dir)}
    try:
        t0 = time.monotonic()
        addresses = backend.prepare(nodes)
        configs = []
        peer_ids = {node: identity_for_index(i).peer_id_b58 for i, node in enumerate(nodes)}
        for i, node in enumerate(nodes):
            dial = sorted({nodes[(i - k) % n] for k in (1, 2, 5, 11)[:degree]} - {node})
            a = addresses[node]
            configs.append(NodeConfig(
                name=node, index=i, router="gossipsub", seed=i, listen_host=a.host, listen_port=a.port,
                control_host=a.control_host, control_port=a.control_port, token=TOKEN,
                trace_path=str(run_dir / "traces" / f"{node}.pb"), topics=("t",),
                initial_peers=tuple(PeerAddress(p, addresses[p].host, addresses[p].port, peer_ids[p]) for p in dial),
                peer_names={peer_ids[p]: p for p in nodes if p != node},
            ))
        backend.start_many(configs)
        t_started = time.monotonic() - t0
        caps = backend.shaping_capabilities()
        t_shape = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda node: backend.apply_kernel_shaping(node, {}, uplink_bps), nodes))
        shaping_s = time.monotonic() - t_shape
        clients = {node: ControlClient(addresses[node].control_host, addresses[node].control_port, TOKEN, timeout=5)
                   for node in nodes}

        def meshed(node: str) -> bool:
            st = clients[node].try_call("status")
            return bool(st and st.get("mesh", {}).get("t"))

        pending = set(nodes)
        deadline = time.monotonic() + 120 + n
        while pending and time.monotonic() < deadline:
            with ThreadPoolExecutor(16) as pool:
                done = [node for node, ok in zip(sorted(pending), pool.map(meshed, sorted(pending))) if ok]
            pending -= set(done)
            if pending:
                time.sleep(0.5)
        t_meshed = time.monotonic() - t0
        result.update({
            "containers_started_s": round(t_started, 1),
            "all_meshed_s": round(t_meshed, 1) if not pending else None,
            "not_meshed": sorted(pending),
            "kernel_shaping_s": round(shaping_s, 1),
            "shaping_path": caps.path, "shaping_detail": caps.detail,
        })

        # a light workload: `rate` messages/s from rotating publishers
        ids = []
        end = time.monotonic() + publish_s
        k = 0
        while time.monotonic() < end:
            node = nodes[(k * 7) % n]
            reply = clients[node].try_call("publish", topic="t", size=256)
            if reply:
                ids.append((node, reply["message_id"]))
            k += 1
            time.sleep(1 / rate)
        time.sleep(3)

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda node: clients[node].try_call("status"), nodes))
        lags = [s["lag"]["p99_ms"] for s in statuses if s and s["lag"]["p99_ms"] is not None]
        mem = backend.memory_usage()
        mem_mb = [v / 2**20 for v in mem.values()]
        result.update({
            "lag_p99_ms_median_node": round(statistics.median(lags), 1) if lags else None,
            "lag_p99_ms_worst_node": round(max(lags), 1) if lags else None,
            "memory_mb_mean": round(statistics.mean(mem_mb), 1) if mem_mb else None,
            "memory_mb_max": round(max(mem_mb), 1) if mem_mb else None,
            "published": len(ids),
        })

        # graceful stop flushes traces; then count deliveries
        t_stop = time.monotonic()
        stop_failed = backend.stop_many(nodes)
        result.update({"stop_s": round(time.monotonic() - t_stop, 1), "stop_failed": sorted(stop_failed)})
        delivered = {m: 0 for _, m in ids}
        for node in nodes:
            path = run_dir / "traces" / f"{node}.pb"
            if path.exists():
                for ev in read_trace(path):
                    if ev.type == trace_pb2.TraceEvent.DELIVER_MESSAGE:
                        mid = ev.deliverMessage.messageID.hex()
                        if mid in delivered:
                            delivered[mid] += 1
        expected = len(ids) * n  # the publisher traces its own message delivered too
        result["delivery_ratio"] = round(sum(delivered.values()) / expected, 4) if expected else None
    finally:
        t = time.monotonic()
        backend.destroy()
        result["destroy_s"] = round(time.monotonic() - t, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[50, 100])
    ap.add_argument("--degree", type=int, default=4, help="initial dials per node (max 4)")
    ap.add_argument("--uplink-mbit", type=float, default=50.0, help="kernel uplink rate per node")
    ap.add_argument("--publish-seconds", type=float, default=15.0)
    ap.add_argument("--rate", type=float, default=2.0, help="messages per second")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    t = time.monotonic()
    image = ensure_image()
    image_s = time.monotonic() - t
    results = [bench(n, image, args.degree, int(args.uplink_mbit * 1e6), args.publish_seconds, args.rate)
               for n in args.nodes]
    if args.json:
        print(json.dumps({"image": image, "ensure_image_s": round(image_s, 2), "results": results}, indent=1))
    else:
        print(f"image {image} (ensure_image {image_s:.2f}s)")
        for r in results:
            print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
