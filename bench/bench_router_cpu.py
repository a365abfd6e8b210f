"""What a router costs in CPU: K routers as separate processes (the process
backend, driven by the run controller as `testbed up` does), M messages
published at a steady rate, and every router's CPU time read from
/proc/<pid>/stat before and after.

Prints, for each K: CPU per delivered message and per transmission (an RPC
handed to a peer) with the kernel's share of it (stime over utime + stime:
socket calls; the rest is the routers' Python), the routers' CPU per second
at rest (heartbeats and trace flushes), RSS per router, and what one
router's exit costs: its CPU from SIGTERM (all K at once, as `testbed down`
does) until it is gone, /proc/<pid>/schedstat before and the reaped child's
rusage after. CPU time is what this measures because it is
robust to other load on the machine; the wall-clock rate is only the
workload's pace.

The same harness then runs py-libp2p 0.8.1 gossipsub hosts (the adapter,
adapters/py-libp2p, in .venv-pylibp2p or $PYLIBP2P_VENV; skipped with the
reason where it is missing): the same overlay (each host dials its
lower-numbered neighbours), the same mesh degrees (D 6, D_low 4, D_high 12,
1 s heartbeats) through the adapter's initGossipSub, strict signing, noise +
yamux, the same messages at the same rate through its control endpoint;
deliveries are the first "Received Message" line of each message on its
stdout. It prints py-libp2p's CPU per delivery over ours (py-libp2p does not
count transmissions). The adapter needs first-8-bytes message ids; ours run
the default (from-seqno), which costs them nothing more.

With --rust-libp2p the same harness also runs rust-libp2p 0.57 routers (the
adapter, adapters/rust-libp2p, built by cargo; skipped with the reason where
it cannot be): driven by the same run controller on the process backend as
ours, the same overlay, parameters, messages and rate, first-8-bytes message
ids. It is the native reference: what a compiled gossipsub costs per delivery
on this host through the same kernel, noise, yamux and Ed25519.

Written to compare two versions of the code with one harness: it imports the
project it sits in, so a copy of this file in another worktree measures that
worktree's routers (the `code` line says which).

    .venv/bin/python bench/bench_router_cpu.py                       # K = 10 and 50
    .venv/bin/python bench/bench_router_cpu.py --routers 10 --messages 100 --json
    .venv/bin/python bench/bench_router_cpu.py --no-pylibp2p                 # ours only
    .venv/bin/python bench/bench_router_cpu.py --routers 50 --latency 30     # ours, links shaped in the router
    .venv/bin/python bench/bench_router_cpu.py --routers 50 --no-pylibp2p --rust-libp2p
    .venv/bin/python bench/bench_router_cpu.py --ours gossipsub-v1.2 --no-pylibp2p  # v1.2, scoring on
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import node  # noqa: E402
from node.config import NodeConfig, PeerAddress  # noqa: E402
from node.interop.go_params import go_gossipsub_params  # noqa: E402
from node.libp2p.identity import identity_for_index  # noqa: E402
from node.runtime.client import ControlClient  # noqa: E402
from node.wire.rpc import FIRST_8_BYTES  # noqa: E402
from orchestrator.run.controller import Controller  # noqa: E402
from orchestrator.errors import TestbedError  # noqa: E402
from orchestrator.images.rust import build_rust_adapter  # noqa: E402
from orchestrator.experiment.model import LinkParams, NodeSpec, Publish, ResolvedExperiment  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent
PYLIBP2P_VENV = Path(os.environ.get("PYLIBP2P_VENV", ROOT / ".venv-pylibp2p"))
PYLIBP2P_ADAPTER = ROOT / "adapters" / "py-libp2p" / "adapter.py"
PY_PARAMS = {"D": 6, "D_low": 4, "D_high": 12, "heartbeat_interval": 1.0}
TOPIC = "t"
OURS, RUST = "gossipsub", "rust-libp2p"
OUR_ROUTERS = (OURS, "gossipsub-v1.1", "gossipsub-v1.2")
# --ours gossipsub-v1.1/v1.2 run with these score weights, so that every
# delivery, graft and heartbeat does the scoring work (P1, P2, P3's counters,
# P3b, P4, P7). P3 weighs 0: on loopback through the runtime many duplicates
# from mesh peers arrive outside the 10 ms near-first window, and a negative P3
# weight prunes those peers (measured: 3199 transmissions for 1800 deliveries
# instead of about 9000): that compares another mesh, not the cost of scoring.
SCORING = {
    "TopicWeight": 1.0, "TimeInMeshWeight": 0.01, "TimeInMeshQuantum": 1.0, "TimeInMeshCap": 10.0,
    "FirstMessageDeliveriesWeight": 1.0, "FirstMessageDeliveriesDecay": 0.9, "FirstMessageDeliveriesCap": 20.0,
    "MeshMessageDeliveriesWeight": 0.0, "MeshMessageDeliveriesDecay": 0.9, "MeshMessageDeliveriesThreshold": 1.0,
    "MeshMessageDeliveriesCap": 20.0, "MeshMessageDeliveriesActivation": 5.0, "MeshMessageDeliveryWindow": 0.01,
    "MeshFailurePenaltyWeight": -0.1, "MeshFailurePenaltyDecay": 0.9,
    "InvalidMessageDeliveriesWeight": -10.0, "InvalidMessageDeliveriesDecay": 0.9,
    "BehaviourPenaltyWeight": -1.0, "BehaviourPenaltyDecay": 0.9,
}


def experiment(k: int, degree: int, latency_ms: float = 0.0, router: str = OURS,
               weights: bool = True) -> ResolvedExperiment:
    names = [f"n{i:03d}" for i in range(k)]
    rng = random.Random(1)
    edges: set[tuple[str, str]] = set()
    for i, a in enumerate(names):  # a ring for connectivity, plus random chords
        edges.add(tuple(sorted((a, names[(i + 1) % k]))))
        for b in rng.sample(names, min(k, degree // 2)):
            if b != a:
                edges.add(tuple(sorted((a, b))))
    params = SCORING if weights and router in OUR_ROUTERS[1:] else {}
    nodes = tuple(NodeSpec(name, "default", router, params, (TOPIC,), i) for i, name in enumerate(names))
    return ResolvedExperiment(
        name=f"bench-cpu-{k}", source="bench/bench_router_cpu.py", seed=1, nodes=nodes,
        edges=tuple(sorted(edges)), links={}, default_link=LinkParams(latency_ms), publishes=(), churn=(),
        expectations=(), duration=0.0, linger=0.0,
        message_id=FIRST_8_BYTES if router == RUST else "from-seqno",
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process, in seconds: stime is the kernel's share
    (socket calls; on loopback a send also runs the receiver's TCP input)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid}")


def uss_bytes(pid: int) -> int:
    """Memory only this process holds (private pages): what one more router
    adds, where RSS also counts the libraries every router shares."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    return sum(int(fields[k].split()[0]) * 1024 for k in ("Private_Clean", "Private_Dirty"))


def statuses(ctl: Controller) -> dict[str, dict]:
    def one(name: str):
        return name, ctl.backend.control_client(name).try_call("status", timeout=10.0)

    with ThreadPoolExecutor(8) as pool:
        got = dict(pool.map(one, ctl.nodes))
    missing = sorted(n for n, s in got.items() if not s)
    if missing:
        raise RuntimeError(f"no status from {missing}")
    return got


def received(counters: dict, router: str) -> int:
    """Messages a router delivered that it did not publish: ours counts its
    own publishes as delivered (go's local delivery), rust-libp2p does not."""
    return counters["delivered"] - (counters["published"] if router in OUR_ROUTERS else 0)


def snapshot(ctl: Controller, router: str) -> dict:
    sts = statuses(ctl)
    return {
        "t": time.monotonic(),
        "cpu": {n: cpu_seconds(s["pid"]) for n, s in sts.items()},
        "sys": sum(cpu_split(s["pid"])[1] for s in sts.values()),
        "delivered": sum(received(s["counters"], router) for s in sts.values()),
        "rpcs_out": None if router == RUST else sum(s["counters"]["rpcs_out"] for s in sts.values()),
        "rss": [rss_bytes(s["pid"]) for s in sts.values()],
        "uss": [uss_bytes(s["pid"]) for s in sts.values()],
    }


def measure(snap, publish, k: int, messages: int, rate: float, rest_s: float) -> dict:
    """Rest, then `messages` publishes (round robin over the K routers) at
    `rate`, until every delivery is in (or 30 s). `snap()` gives the time,
    every router's CPU, the deliveries to the K - 1 routers that did not
    publish and the transmissions so far, and RSS."""
    time.sleep(3.0)  # let start-up settle (meshes, first heartbeats)
    before_rest = snap()
    time.sleep(rest_s)
    before = snap()
    rest_cpu = sum(before["cpu"].values()) - sum(before_rest["cpu"].values())
    start = time.monotonic()
    for seq in range(messages):
        publish(seq, seq % k, time.monotonic() - start)
        time.sleep(max(0.0, start + (seq + 1) / rate - time.monotonic()))
    deadline = time.monotonic() + 30
    expected = messages * (k - 1)
    while time.monotonic() < deadline:
        after = snap()
        if after["delivered"] - before["delivered"] >= expected:
            break
        time.sleep(0.5)
    time.sleep(1.0)  # the last forwards and IHAVEs
    after = snap()
    load_s = after["t"] - before["t"]
    load_cpu = sum(after["cpu"].values()) - sum(before["cpu"].values())
    load_sys = after["sys"] - before["sys"]
    work_cpu = load_cpu - rest_cpu / (before["t"] - before_rest["t"]) * load_s  # less what rest would cost
    delivered = after["delivered"] - before["delivered"]
    sent = None if after["rpcs_out"] is None else after["rpcs_out"] - before["rpcs_out"]
    return {
        "delivered": delivered, "expected_deliveries": expected, "transmissions": sent,
        "cpu_s_under_load": round(load_cpu, 3),
        "kernel_share_under_load": round(load_sys / load_cpu, 2) if load_cpu else 0.0,
        "load_wall_s": round(load_s, 2),
        "cpu_ms_per_delivery": round(1000 * work_cpu / delivered, 3) if delivered else None,
        "cpu_ms_per_transmission": round(1000 * work_cpu / sent, 3) if sent else None,
        "rest_cpu_ms_per_s_per_router": round(1000 * rest_cpu / (before["t"] - before_rest["t"]) / k, 2),
        "rss_mib_median": round(statistics.median(after["rss"]) / 2**20, 1),
        "rss_mib_max": round(max(after["rss"]) / 2**20, 1),
        "uss_mib_median": round(statistics.median(after["uss"]) / 2**20, 1),
    }


def exit_cost(ctl: Controller) -> dict:
    """SIGTERM every router at once and reap each (they are this process's
    children): the CPU each spent from the signal until it was gone."""
    pids = [s["pid"] for s in statuses(ctl).values()]
    before = {pid: int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9 for pid in pids}
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    spent = []
    for pid in pids:
        _, _, usage = os.wait4(pid, 0)
        spent.append(usage.ru_utime + usage.ru_stime - before[pid])
    return {"exit_cpu_ms_median": round(1000 * statistics.median(spent), 1),
            "exit_cpu_ms_max": round(1000 * max(spent), 1)}


def bench(k: int, degree: int, messages: int, rate: float, size: int, rest_s: float, latency_ms: float,
          router: str = OURS, weights: bool = True) -> dict:
    """K routers of `router` on the process backend, driven as `testbed up` does."""
    resolved = experiment(k, degree, latency_ms, router, weights)
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-cpu-{router}-{k}-"))
    ctl = Controller.create(resolved, None, "process", f"bench-cpu-{k}-{int(time.time())}", run_dir)
    result: dict = {"routers": k, "edges": len(resolved.edges), "messages": messages, "rate": rate, "size": size,
                    "latency_ms": latency_ms}
    names = list(ctl.nodes)

    def publish(seq: int, i: int, at: float) -> None:
        ctl.publish(Publish(seq, at, TOPIC, size, names[i], (names[i],)))

    try:
        ctl.up(ready_timeout=60 + 1.0 * k)
        result.update(measure(lambda: snapshot(ctl, router), publish, k, messages, rate, rest_s))
        result.update(exit_cost(ctl))
    finally:
        ctl.down()
    return result


def rust_missing() -> str | None:
    """Why rust-libp2p routers cannot run here, or None (builds the adapter)."""
    try:
        build_rust_adapter()
    except TestbedError as exc:
        return str(exc)
    return None


# py-libp2p in the same harness


def pylibp2p_missing() -> str | None:
    """Why py-libp2p hosts cannot run here, or None."""
    try:
        subprocess.run([str(PYLIBP2P_VENV / "bin" / "python"), "-c", "import libp2p"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return f"no working py-libp2p virtualenv at {PYLIBP2P_VENV} (make it with scripts/pylibp2p-venv.sh)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PyHost:
    """One py-libp2p adapter process (our --config extensions: its control
    endpoint publishes); a thread counts the messages it received, first
    copies only, from its stdout."""

    def __init__(self, index: int, port: int, dial: list[tuple[int, int]], tmp: Path) -> None:
        self.index = index
        self.port = port
        control = free_port()
        cfg = NodeConfig(
            name=f"py{index}", router="py-libp2p", seed=index, listen_host="127.0.0.1", listen_port=port,
            control_host="127.0.0.1", control_port=control, token="bench", trace_path="", index=index,
            topics=(TOPIC,), message_id=FIRST_8_BYTES,
            initial_peers=tuple(PeerAddress(f"py{j}", "127.0.0.1", p, identity_for_index(j).peer_id_b58)
                                for j, p in dial),
        )
        script = [{"type": "initGossipSub", "gossipSubParams": go_gossipsub_params(PY_PARAMS)},
                  {"type": "subscribeToTopic", "topicID": TOPIC},
                  {"type": "connect", "connectTo": [j for j, _ in dial]}]
        (tmp / f"c{index}.json").write_text(cfg.to_json())
        (tmp / f"p{index}.json").write_text(json.dumps({"script": script}))
        with (tmp / f"host{index}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [str(PYLIBP2P_VENV / "bin" / "python"), str(PYLIBP2P_ADAPTER),
                 "--params", str(tmp / f"p{index}.json"), "--config", str(tmp / f"c{index}.json")],
                stdout=subprocess.PIPE, stderr=log, text=True,
            )
        self.client = ControlClient("127.0.0.1", control, "bench", timeout=20)
        self.seen: set[str] = set()
        self.published: set[str] = set()  # its own: a copy coming back is no delivery
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def delivered(self) -> int:
        return len(self.seen - self.published)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event.get("msg") == "Received Message":
                self.seen.add(event["id"])

    def ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.client.try_call("status") is not None:
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.client.try_call("shutdown")
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def bench_pylibp2p(k: int, degree: int, messages: int, rate: float, size: int, rest_s: float) -> dict:
    """The same overlay and workload on py-libp2p hosts, started in index
    order (each dials its lower-numbered neighbours, who are listening)."""
    resolved = experiment(k, degree)
    index = {n.name: i for i, n in enumerate(resolved.nodes)}
    lower: dict[int, list[int]] = {i: [] for i in range(k)}
    for a, b in resolved.edges:
        lo, hi = sorted((index[a], index[b]))
        lower[hi].append(lo)
    logs = Path(tempfile.mkdtemp(prefix=f"bench-cpu-pylibp2p-{k}-"))
    ports = [free_port() for _ in range(k)]
    result: dict = {"routers": k, "edges": len(resolved.edges), "messages": messages, "rate": rate, "size": size}
    hosts: list[PyHost] = []
    try:
        for i in range(k):
            host = PyHost(i, ports[i], [(j, ports[j]) for j in sorted(lower[i])], logs)
            hosts.append(host)
            if not host.ready(120):
                raise RuntimeError(f"py-libp2p host {i} did not start: see {logs / f'host{i}.log'}")

        def snap() -> dict:
            return {
                "t": time.monotonic(),
                "cpu": {h.index: cpu_seconds(h.proc.pid) for h in hosts},
                "sys": sum(cpu_split(h.proc.pid)[1] for h in hosts),
                "delivered": sum(h.delivered for h in hosts),
                "rpcs_out": None,
                "rss": [rss_bytes(h.proc.pid) for h in hosts],
                "uss": [uss_bytes(h.proc.pid) for h in hosts],
            }

        def publish(seq: int, i: int, at: float) -> None:
            hosts[i].published.add(str(seq))
            hosts[i].client.call("publish", topic=TOPIC, size=size, seq=seq)

        result.update(measure(snap, publish, k, messages, rate, rest_s))
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(PyHost.stop, hosts))
    return result


def report(title: str, r: dict) -> None:
    print(f"{title}: K={r['routers']} ({r['edges']} overlay edges), {r['messages']} messages of {r['size']} B "
          f"at {r['rate']:g}/s" + (f", {r['latency_ms']:g} ms links" if r.get("latency_ms") else ""))
    sent = "" if r["transmissions"] is None else f", {r['transmissions']} transmissions"
    print(f"  deliveries:            {r['delivered']} of {r['expected_deliveries']}{sent}")
    print(f"  CPU per delivery:      {r['cpu_ms_per_delivery']} ms (all routers' CPU, less rest; "
          f"{r['kernel_share_under_load']:.0%} of it in the kernel)")
    if r["transmissions"] is not None:
        print(f"  CPU per transmission:  {r['cpu_ms_per_transmission']} ms")
    print(f"  CPU at rest:           {r['rest_cpu_ms_per_s_per_router']} ms/s per router")
    print(f"  RSS per router:        median {r['rss_mib_median']} MiB, max {r['rss_mib_max']} MiB "
          f"(USS, its own pages: median {r['uss_mib_median']} MiB)")
    if "exit_cpu_ms_median" in r:
        print(f"  CPU of one exit:       median {r['exit_cpu_ms_median']} ms, max {r['exit_cpu_ms_max']} ms "
              "(SIGTERM to gone, all at once)")


def progress(who: str, result: dict) -> dict:
    """Each result on stderr as it is measured (a long run keeps what it has)."""
    print(json.dumps({who: result}), file=sys.stderr, flush=True)
    return result


def ratio(ours: dict, theirs: dict) -> float | None:
    """Their CPU per delivery over ours (higher: we are cheaper)."""
    a, b = ours["cpu_ms_per_delivery"], theirs["cpu_ms_per_delivery"]
    return round(b / a, 1) if a and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routers", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--degree", type=int, default=6, help="average overlay degree (ring + random chords)")
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rate", type=float, default=10.0, help="messages per second")
    ap.add_argument("--size", type=int, default=256, help="bytes of data per message")
    ap.add_argument("--rest", type=float, default=10.0, help="seconds measured at rest")
    ap.add_argument("--latency", type=float, default=0.0, metavar="MS",
                    help="one-way latency of every link, applied by our routers' user-space shaper as on a "
                         "host without netem (py-libp2p cannot be shaped here, so it is skipped)")
    ap.add_argument("--ours", choices=OUR_ROUTERS, default=OURS,
                    help="which of our routers (v1.1 and v1.2 with score weights set: SCORING)")
    ap.add_argument("--no-weights", action="store_true",
                    help="v1.1/v1.2 with every score weight 0: the scoring machinery runs, the scores stay 0")
    ap.add_argument("--no-pylibp2p", action="store_true", help="do not measure py-libp2p")
    ap.add_argument("--rust-libp2p", action="store_true",
                    help="also measure rust-libp2p routers in the same harness "
                         "(the native reference; not with --latency)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    code = str(Path(node.__file__).resolve().parent.parent)
    work = (args.degree, args.messages, args.rate, args.size, args.rest)
    results = [progress("ours", bench(k, *work, args.latency, args.ours, not args.no_weights)) for k in args.routers]
    skipped = ("--no-pylibp2p" if args.no_pylibp2p else
               "--latency: py-libp2p's links cannot be shaped on the process backend" if args.latency else
               pylibp2p_missing())
    theirs = [] if skipped else [progress("py-libp2p", bench_pylibp2p(k, *work)) for k in args.routers]
    for ours, other in zip(results, theirs):
        ours["pylibp2p_over_ours"] = ratio(ours, other)
    rust_skipped = ("not asked (--rust-libp2p)" if not args.rust_libp2p else
                    "--latency: rust-libp2p's links cannot be shaped on the process backend" if args.latency else
                    rust_missing())
    rust = [] if rust_skipped else [progress(RUST, bench(k, *work, args.latency, RUST)) for k in args.routers]
    for ours, other in zip(results, rust):
        ours["rust_libp2p_over_ours"] = ratio(ours, other)
    if args.json:
        doc = {"code": code, "results": results, "pylibp2p": theirs, "pylibp2p_skipped": skipped,
               "rust_libp2p": rust, "rust_libp2p_skipped": rust_skipped}
        print(json.dumps(doc, indent=1))
        return
    print(f"code: {code}")
    for r in results:
        report("ours", r)
    if skipped:
        print(f"py-libp2p: skipped ({skipped})")
    for ours, other in zip(results, theirs):
        report("py-libp2p", other)
        print(f"  py-libp2p CPU per delivery / ours: {ours['pylibp2p_over_ours']}x")
    if rust_skipped:
        print(f"rust-libp2p: skipped ({rust_skipped})")
    for ours, other in zip(results, rust):
        report(RUST, other)
        print(f"  rust-libp2p CPU per delivery / ours: {ours['rust_libp2p_over_ours']}x")


if __name__ == "__main__":
    main()
