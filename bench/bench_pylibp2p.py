"""What a py-libp2p adapter (adapters/py-libp2p) costs: K adapters in a ring
on the process backend's addresses, a steady workload through their control
endpoints, and per adapter its RSS and its CPU time per delivered message
(user+system from /proc, so a loaded box inflates wall time but not this).
With --image, also the py-libp2p image: its size and how long
build_pylibp2p_image took (a no-op when the tag exists).

    .venv/bin/python bench/bench_pylibp2p.py                      # 4 adapters, 200 messages at 20/s
    .venv/bin/python bench/bench_pylibp2p.py --nodes 6 --messages 500 --rate 50 --image --json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node.runtime.client import ControlClient  # noqa: E402

PY = ROOT / ".venv-pylibp2p" / "bin" / "python"
ADAPTER = ROOT / "adapters" / "py-libp2p" / "adapter.py"
TOKEN = "bench"
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.2)


def start_ring(k: int, tmp: Path) -> list[tuple[subprocess.Popen, ControlClient]]:
    """Adapter i dials adapter i+1 (its address and peer id from its config)."""
    ports = [(free_port(), free_port()) for _ in range(k)]
    peer_ids = subprocess.run(
        [str(PY), "-c", "import sys; sys.path.insert(0, sys.argv[1]); from adapter import peer_id_for; "
         "print(' '.join(peer_id_for(i).to_base58() for i in range(int(sys.argv[2]))))", str(ADAPTER.parent), str(k)],
        capture_output=True, text=True, check=True).stdout.split()
    nodes = []
    for i in range(k):
        nxt = (i + 1) % k
        config = {"index": i, "name": f"py{i}", "listen_host": "127.0.0.1", "listen_port": ports[i][0],
                  "control_host": "127.0.0.1", "control_port": ports[i][1], "token": TOKEN,
                  "message_id": "first-8-bytes", "initial_peers": [
                      {"name": f"py{nxt}", "host": "127.0.0.1", "port": ports[nxt][0], "peer_id": peer_ids[nxt]}]}
        script = [{"type": "initGossipSub", "gossipSubParams": {"D": 2, "Dlo": 2, "Dhi": 3}},
                  {"type": "subscribeToTopic", "topicID": "t"},
                  {"type": "connect", "connectTo": [nxt]}]
        (tmp / f"c{i}.json").write_text(json.dumps(config))
        (tmp / f"p{i}.json").write_text(json.dumps({"script": script}))
        proc = subprocess.Popen([str(PY), str(ADAPTER), "--params", str(tmp / f"p{i}.json"),
                                 "--config", str(tmp / f"c{i}.json")],
                                stdout=(tmp / f"out{i}.ndjson").open("wb"), stderr=(tmp / f"err{i}.log").open("wb"))
        nodes.append((proc, ControlClient("127.0.0.1", ports[i][1], TOKEN, timeout=20)))
    return nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second, all publishers together")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--image", action="store_true", help="also build (or find) the image and report its size")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not PY.exists():
        raise SystemExit(f"bench: no {PY} (scripts/pylibp2p-venv.sh)")
    result: dict = {"nodes": args.nodes, "messages": args.messages, "rate": args.rate, "size": args.size,
                    "load_avg_1m": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-pylibp2p-") as tmp:
        nodes = start_ring(args.nodes, Path(tmp))
        try:
            started = time.monotonic()
            wait(lambda: all(c.try_call("status") for _, c in nodes), 300, "the adapters to answer")
            wait(lambda: all(len(c.call("status")["mesh"].get("t", [])) >= 2 for _, c in nodes), 120, "meshes")
            result["ready_s"] = round(time.monotonic() - started, 1)
            pids = [p.pid for p, _ in nodes]
            result["rss_idle_mib"] = [round(rss_mib(pid), 1) for pid in pids]
            cpu0 = [cpu_s(pid) for pid in pids]
            t0 = time.monotonic()
            for seq in range(args.messages):
                nodes[seq % args.nodes][1].call("publish", topic="t", size=args.size, seq=seq + 1)
                time.sleep(max(0.0, t0 + (seq + 1) / args.rate - time.monotonic()))
            expected = [args.messages - len(range(i, args.messages, args.nodes)) for i in range(args.nodes)]
            wait(lambda: all(c.call("status")["counters"]["delivered"] >= e for (_, c), e in zip(nodes, expected)),
                 120, "every message at every adapter")
            counters = [c.call("status")["counters"] for _, c in nodes]
            cpu = [cpu_s(pid) - c0 for pid, c0 in zip(pids, cpu0)]
            delivered = sum(x["delivered"] for x in counters)
            result.update({
                "workload_wall_s": round(time.monotonic() - t0, 1),
                "delivered": delivered, "duplicates": sum(x["duplicates"] for x in counters),
                "cpu_s": [round(x, 2) for x in cpu],
                "cpu_ms_per_delivered": round(1000 * sum(cpu) / delivered, 2),
                "rss_after_mib": [round(rss_mib(pid), 1) for pid in pids],
            })
        finally:
            for proc, client in nodes:
                client.try_call("shutdown")
            for proc, _ in nodes:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    if args.image:
        from orchestrator.dockerapi.client import docker_client
        from orchestrator.images.pylibp2p import build_pylibp2p_image
        from orchestrator.progress import Reporter

        client = docker_client(timeout=1800)
        t0 = time.monotonic()
        tag = build_pylibp2p_image(client, Reporter())
        result["image"] = {"tag": tag, "seconds": round(time.monotonic() - t0, 1),
                           "size_mib": round(client.images.get(tag).attrs["Size"] / 2**20, 1)}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
