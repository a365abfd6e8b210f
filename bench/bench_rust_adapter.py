"""What the rust-libp2p adapter costs: two adapter processes on 127.0.0.x
(tests/test_rust_adapter.py runs them the same way), one publishing M messages
through its control endpoint, the other receiving them. Prints the receiver's
CPU time per delivered message, the publisher's per published message, both
at rest (CPU per second with nothing to do: heartbeats), and their peak RSS.
CPU time comes from /proc/<pid>/stat, so it is robust to other load on the
machine; wall-clock figures are only the workload's pace.

    .venv/bin/python bench/bench_rust_adapter.py
    .venv/bin/python bench/bench_rust_adapter.py --messages 2000 --size 1024 --json
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.libp2p.identity import identity_for_index  # noqa: E402
from node.runtime.client import ControlClient  # noqa: E402
from orchestrator.images.rust import build_rust_adapter  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TOKEN = "bench"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start(binary: Path, workdir: Path, index: int, host: str,
          dial: list[tuple[int, str, int]]) -> tuple[subprocess.Popen, ControlClient, int]:
    """Adapter `index` listening on `host`, dialling (index, host, port) peers."""
    port, control = free_port(host), free_port(host)
    peers = [{"name": f"a{i}", "host": h, "port": p, "peer_id": identity_for_index(i).peer_id_b58}
             for i, h, p in dial]
    config = {"name": f"a{index}", "index": index, "listen_host": host, "listen_port": port,
              "control_host": host, "control_port": control, "token": TOKEN, "initial_peers": peers,
              "message_id": "first-8-bytes",
              "peer_names": {identity_for_index(i).peer_id_b58: f"a{i}" for i in (0, 1)}}
    script = [{"type": "initGossipSub", "gossipSubParams": {"HeartbeatInterval": 700_000_000}},
              {"type": "subscribeToTopic", "topicID": "t"},
              {"type": "connect", "connectTo": [i for i, _, _ in dial]}]
    (workdir / f"a{index}.config.json").write_text(json.dumps(config))
    (workdir / f"a{index}.params.json").write_text(json.dumps({"script": script}))
    proc = subprocess.Popen(
        [str(binary), "--params", str(workdir / f"a{index}.params.json"),
         "--config", str(workdir / f"a{index}.config.json")],
        stdout=subprocess.DEVNULL, stderr=(workdir / f"a{index}.stderr").open("wb"))
    return proc, ControlClient(host, control, TOKEN), port


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def measure(args: argparse.Namespace, binary: Path, receiver: subprocess.Popen, rc: ControlClient,
            publisher: subprocess.Popen, pc: ControlClient) -> dict:
    wait_for(lambda: pc.try_call("status") is not None
             and pc.call("status")["mesh"].get("t") == ["a1"], 30, "the mesh")
    cpu0 = {p.pid: cpu_seconds(p.pid) for p in (receiver, publisher)}
    time.sleep(args.idle)
    idle = {pid: (cpu_seconds(pid) - c) / args.idle for pid, c in cpu0.items()}
    cpu1 = {p.pid: cpu_seconds(p.pid) for p in (receiver, publisher)}
    began = time.monotonic()
    for seq in range(1, args.messages + 1):
        pc.call("publish", topic="t", size=args.size, seq=seq)
        time.sleep(max(0.0, began + seq / args.rate - time.monotonic()))
    wait_for(lambda: rc.call("status")["counters"]["delivered"] >= args.messages, 60, "every delivery")
    wall = time.monotonic() - began
    used = {pid: cpu_seconds(pid) - c - idle[pid] * wall for pid, c in cpu1.items()}
    return {
        "messages": args.messages, "size": args.size, "wall_s": round(wall, 2),
        "receiver_cpu_us_per_delivered": round(used[receiver.pid] / args.messages * 1e6, 1),
        "publisher_cpu_us_per_published": round(used[publisher.pid] / args.messages * 1e6, 1),
        "idle_cpu_ms_per_s": {"receiver": round(idle[receiver.pid] * 1e3, 3),
                              "publisher": round(idle[publisher.pid] * 1e3, 3)},
        "peak_rss_kib": {"receiver": peak_rss_kib(receiver.pid), "publisher": peak_rss_kib(publisher.pid)},
        "binary_bytes": binary.stat().st_size,
        "load_avg_1m": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--rate", type=float, default=200.0, help="messages per second")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds measured at rest")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    binary = build_rust_adapter()
    with tempfile.TemporaryDirectory(prefix="bench-rust-") as tmp:
        work = Path(tmp)
        procs: list[subprocess.Popen] = []
        try:
            receiver, rc, port = start(binary, work, 1, "127.0.0.71", [])
            procs.append(receiver)
            wait_for(lambda: rc.try_call("status") is not None, 30, "the receiver")
            publisher, pc, _ = start(binary, work, 0, "127.0.0.70", [(1, "127.0.0.71", port)])
            procs.append(publisher)
            result = measure(args, binary, receiver, rc, publisher, pc)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:34} {value}")


if __name__ == "__main__":
    main()
