"""What Docker itself costs to start, stop and remove N containers on this
host, with no testbed code and no router in them: the floor under `testbed
up` and `testbed down` (docs/docker.md, "Where `up` and `down` of 250 spend
their time").

Each try: N containers of the router image running `sleep infinity` under
docker-init, created and started 8 at a time (as `up` does), then SIGTERM to
every init from the host at once (as `down` does on an own bridge), Docker's
`die` event awaited for each, then removal 16 at a time. It prints the wall
time of each phase and the CPU time the host was busy in the stop and the
removal (all cores, /proc/stat): on an otherwise idle host, Docker's own
cost, which no router can spend.

    .venv/bin/python bench/bench_runtime_floor.py [--nodes 250] [--tries 3] [--network disabled|none] [--json]

`--network disabled` (the default) is how the testbed's own bridge creates
its containers: no Docker networking at all. `--network none` gives each
container a libnetwork sandbox with an endpoint on Docker's `none` network,
as the own bridge did before; Docker 20.10 can deadlock when many of those
are released together (moby/moby#46661). A try whose `die` events stop
coming for 60 s is reported as a stuck daemon and ends the bench: only a
daemon restart frees its containers, so run that only on a host of your own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STUCK_S = 60.0
LABEL = "gossip-testbed.bench-floor"


def one_try(client, image: str, nodes: int, network: str, index: int) -> dict:
    api = client.api
    host = api.create_host_config(init=True, network_mode="none")

    def create(i: int) -> str:
        cid = api.create_container(image, entrypoint=["sleep"], command=["infinity"], labels={LABEL: str(os.getpid())},
                                   name=f"bench-floor-{os.getpid()}-{index}-{i}", host_config=host,
                                   network_disabled=network == "disabled")["Id"]
        api.start(cid)
        return cid

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(create, range(nodes)))
    started = time.monotonic() - t0
    inits = [api.inspect_container(cid)["State"]["Pid"] for cid in ids]
    events = api.events(filters={"label": f"{LABEL}={os.getpid()}", "event": "die"}, decode=True)
    dead: set[str] = set()
    all_dead = threading.Event()

    def watch() -> None:
        for event in events:
            dead.add(event["id"])
            if dead >= set(ids):
                all_dead.set()
                return

    threading.Thread(target=watch, daemon=True).start()
    t0, busy0 = time.monotonic(), host_busy_s()
    for pid in inits:
        os.kill(pid, signal.SIGTERM)
    gone_s = None
    while not all_dead.wait(0.02):
        if gone_s is None and not any(Path(f"/proc/{pid}").exists() for pid in inits):
            gone_s = time.monotonic() - t0
        if time.monotonic() - t0 > STUCK_S:
            return {"try": index, "start_s": round(started, 1), "stuck": len(set(ids) - dead)}
    died, stop_cpu = time.monotonic() - t0, host_busy_s() - busy0
    t0, busy0 = time.monotonic(), host_busy_s()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(api.remove_container, ids))
    removed, remove_cpu = time.monotonic() - t0, host_busy_s() - busy0
    events.close()
    return {"try": index, "start_s": round(started, 1), "inits_gone_s": round(gone_s or died, 1),
            "die_events_s": round(died, 1), "remove_s": round(removed, 1),
            "stop_and_remove_s": round(died + removed, 1), "stop_host_cpu_s": round(stop_cpu, 1),
            "remove_host_cpu_s": round(remove_cpu, 1)}


def cpu_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of every core so far, from /proc/stat's first
    line (idle and iowait are not busy)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def host_busy_s() -> float:
    """CPU seconds the whole host has been busy so far (all cores): with
    nothing else running, what Docker and the kernel spend on the
    containers (runc, the shims, containerd, dockerd, the storage driver)."""
    return cpu_ticks()[0] / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--network", choices=("disabled", "none"), default="disabled")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import docker  # noqa: PLC0415

    from orchestrator.images.router import ensure_image  # noqa: PLC0415

    if os.geteuid() != 0:
        print("bench_runtime_floor: needs root (it signals the containers' inits from the host)", file=sys.stderr)
        return 2
    client = docker.from_env(timeout=300)
    image = ensure_image()
    rows = []
    for index in range(args.tries):
        rows.append(one_try(client, image, args.nodes, args.network, index))
        if not args.json:
            row = rows[-1]
            print(f"try {index}: {args.nodes} containers, network {args.network}: start {row['start_s']} s; " + (
                f"DAEMON STUCK: {row['stuck']} die events missing after {STUCK_S:g} s (restart dockerd)"
                if "stuck" in row else
                f"SIGTERM to inits gone {row['inits_gone_s']} s, to every die event {row['die_events_s']} s; "
                f"removal {row['remove_s']} s; stop and removal {row['stop_and_remove_s']} s; host CPU busy "
                f"{row['stop_host_cpu_s']} s in the stop, {row['remove_host_cpu_s']} s in the removal"))
        if "stuck" in rows[-1]:
            break
    done = [r for r in rows if "stuck" not in r]
    summary = {"nodes": args.nodes, "network": args.network, "tries": rows, "median": {
        k: statistics.median(r[k] for r in done)
        for k in ("start_s", "die_events_s", "remove_s", "stop_and_remove_s", "stop_host_cpu_s", "remove_host_cpu_s")
    } if done else {}}
    if args.json:
        print(json.dumps(summary, indent=1))
    elif done:
        print(f"median of {len(done)}: " + ", ".join(f"{k} {v}" for k, v in summary["median"].items()))
    return 1 if len(done) < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
