"""Randomized kill benchmark of the docker backend's teardown: SIGKILL
`testbed up`, `run` or `down` at a seeded random moment, then
`testbed down --all`, and count what is left (containers, networks, volumes,
live network namespaces, state records). The CI test runs 12 tries; this runs
50 by default and prints every try and the totals.

    .venv/bin/python bench/bench_teardown.py [--tries 50] [--seed 17] [--json]

With --readiness-fail N it instead runs --tries runs of N containers in a
row, each made to fail at readiness (tests/readiness_harness.py), and
reports the time to the failure, the teardown's time and what each left:

    .venv/bin/python bench/bench_teardown.py --readiness-fail 250 --tries 2

With --down N it times `testbed down` of a live N-container testbed (brought
up with `testbed up` before each try): the CLI's wall time, its CPU time and
dockerd's CPU time during it, how busy the host's CPUs were (mean busy cores,
seconds with all but 10% of them busy), and what was left; the testbed's network is
an own bridge as root, else a Docker network (TESTBED_DOCKER_NETWORK chooses,
docs/docker.md):

    .venv/bin/python bench/bench_teardown.py --down 10 --tries 5
    TESTBED_DOCKER_NETWORK=docker-network .venv/bin/python bench/bench_teardown.py --down 250 --tries 1

With --endpoints N it measures what one endpoint release costs: N sleeping
containers (docker-init, the router image) on one internal bridge network,
disconnected --workers at a time (default 1, the teardown's rule), then
removed by the testbed's own teardown, which names the network if Docker
lost count of its endpoints (more than one worker did so here at 250: the
network then needs a daemon restart, so run that only on a host of your own):

    .venv/bin/python bench/bench_teardown.py --endpoints 40 --workers 1 --tries 1

Docker is shared with whatever else runs on the host: the durations of the
tries depend on that load; the counts of what is left must not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_runtime_floor import cpu_ticks  # noqa: E402
from orchestrator.images.router import ensure_image  # noqa: E402
from orchestrator.backends.docker.wiring import chosen  # noqa: E402
from tests.kill_harness import TESTBED, host_side, kill_tries, labelled, records  # noqa: E402
from tests.readiness_harness import experiment_text, readiness_tries  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=50)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--json", action="store_true", help="print one JSON document at the end")
    parser.add_argument("--readiness-fail", type=int, metavar="N",
                        help="runs of N containers made to fail at readiness, --tries in a row")
    parser.add_argument("--down", type=int, metavar="N", help="time `testbed down` of a live N-container testbed")
    parser.add_argument("--endpoints", type=int, metavar="N", help="time disconnects of N containers from one network")
    parser.add_argument("--workers", type=int, default=1, help="concurrent disconnects with --endpoints")
    args = parser.parse_args()
    quiet = args.json
    image = ensure_image()
    if args.endpoints:
        return endpoints_bench(image, args.endpoints, args.workers, args.tries)
    if args.readiness_fail:
        return readiness_bench(args.readiness_fail, args.tries, quiet)
    if args.down:
        return down_bench(args.down, args.tries, quiet)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-teardown-") as work:
        results = kill_tries(args.tries, args.seed, Path(work), report=(lambda _l: None) if quiet else print)
    wall = time.monotonic() - t0
    kinds = ("container", "network", "volume", "netns", "records")
    totals = {k: sum(len(r.left[k]) for r in results) for k in kinds}
    summary = {
        "tries": len(results), "seed": args.seed, "wall_s": round(wall, 1),
        "by_command": {c: sum(r.command == c for r in results) for c in ("up", "run", "down")},
        "killed_mid_command": sum(r.killed for r in results),
        "down_all_failed": sum(r.down_rc != 0 for r in results),
        "clean_tries": sum(r.clean for r in results),
        "left": totals,
        "tries_detail": [{"index": r.index, "command": r.command, "kill_at_s": r.kill_at_s, "killed": r.killed,
                          "down_rc": r.down_rc, "left": r.left} for r in results],
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"\n{summary['clean_tries']}/{len(results)} tries left nothing "
              f"({summary['killed_mid_command']} killed mid-command; by command {summary['by_command']}); "
              f"`down --all` failed {summary['down_all_failed']} time(s); left in total: "
              + ", ".join(f"{v} {k}" for k, v in totals.items()) + f"; {wall:.0f} s")
    return 0 if summary["clean_tries"] == len(results) else 1


def readiness_bench(nodes: int, tries: int, quiet: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-teardown-ready-") as work:
        results = readiness_tries(nodes, tries, Path(work), report=(lambda _l: None) if quiet else print)
    summary = {
        "nodes": nodes, "tries": len(results),
        "failed_at_readiness": sum("never came up" in r.error for r in results),
        "clean_tries": sum(r.clean for r in results),
        "up_s": [round(r.up_s, 1) for r in results], "down_s": [round(r.down_s, 1) for r in results],
        "left": [r.left for r in results],
    }
    if quiet:
        print(json.dumps(summary, indent=1))
    else:
        print(f"\n{summary['clean_tries']}/{len(results)} runs of {nodes} containers failed at readiness "
              f"left nothing; down took {summary['down_s']} s")
    ok = summary["clean_tries"] == summary["failed_at_readiness"] == len(results)
    return 0 if ok else 1


class HostBusy:
    """How busy the host's CPUs were while a command ran: /proc/stat every
    SAMPLE_S by a thread. A `down` whose host stays saturated is bound by
    CPU (the engine's per-container teardown, processes too short-lived to
    sample one by one), not by waiting."""

    SAMPLE_S = 0.5

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (seconds, busy cores) per interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-busy", daemon=True)

    def _run(self) -> None:
        busy0, all0 = cpu_ticks()
        while not self._stop.wait(self.SAMPLE_S):
            busy1, all1 = cpu_ticks()
            if all1 > all0:
                cpus = os.cpu_count() or 1
                seconds = (all1 - all0) / cpus / os.sysconf("SC_CLK_TCK")
                self.samples.append((seconds, (busy1 - busy0) / (all1 - all0) * cpus))
            busy0, all0 = busy1, all1

    def __enter__(self) -> HostBusy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        total = sum(s for s, _ in self.samples)
        return round(sum(s * c for s, c in self.samples) / total, 2) if total else None

    def saturated_s(self) -> float:
        cpus = os.cpu_count() or 1
        return round(sum(s for s, c in self.samples if c >= 0.9 * cpus), 1)


def dockerd_pid() -> str | None:
    """The pid of the daemon DOCKER_HOST names (a host may run several), from
    the owner of its listening socket; None where that is not visible."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    out = subprocess.run(["ss", "-Hxlp", "src", host.removeprefix("unix://")], capture_output=True, text=True).stdout
    match = re.search(r'"dockerd",pid=(\d+)', out)
    return match[1] if match else None


def dockerd_cpu_s() -> float | None:
    """dockerd's user+system CPU seconds so far (None: not visible from here)."""
    try:
        fields = Path(f"/proc/{dockerd_pid()}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def storage_driver() -> str:
    """The daemon's storage driver (overlay2, fuse-overlayfs, ...): on a
    user-space one every container's exit also ends a filesystem daemon."""
    out = subprocess.run(["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def down_bench(nodes: int, tries: int, quiet: bool) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-teardown-down-") as work_dir:
        work = Path(work_dir)
        exp = work / "down.yaml"
        exp.write_text(experiment_text("down", nodes, messages=5))
        for index in range(tries):
            state = work / f"state-{index}"
            env = {**os.environ, "TESTBED_STATE_DIR": str(state)}
            name = f"down{nodes}-{index}"
            up_t0 = time.monotonic()
            up = subprocess.run([str(TESTBED), "up", str(exp), "--backend", "docker", "--name", name, "--out",
                                 str(work / name)], env=env, capture_output=True, text=True, timeout=600)
            if up.returncode:
                subprocess.run([str(TESTBED), "down", "--all"], env=env, capture_output=True, timeout=600)
                print(f"try {index}: `testbed up` failed (exit {up.returncode}):\n{up.stderr}", file=sys.stderr)
                return 1
            up_s = time.monotonic() - up_t0
            cpu0, dockerd0, t0 = _children_cpu_s(), dockerd_cpu_s(), time.monotonic()
            with HostBusy() as busy:
                down = subprocess.run([str(TESTBED), "down", name], env=env, capture_output=True, text=True,
                                      timeout=600)
            wall, cpu, dockerd1 = time.monotonic() - t0, _children_cpu_s() - cpu0, dockerd_cpu_s()
            left = {**labelled(state), "records": records(state), **host_side(state)}
            row = {"try": index, "network": chosen(None), "storage": storage_driver(), "rc": down.returncode,
                   "up_s": round(up_s, 1), "wall_s": round(wall, 2), "cli_cpu_s": round(cpu, 2),
                   "dockerd_cpu_s": round(dockerd1 - dockerd0, 2) if dockerd0 is not None and dockerd1 else None,
                   "load1": round(os.getloadavg()[0], 1), "host_cores": os.cpu_count(),
                   "host_busy_cores_mean": busy.mean(), "host_saturated_s": busy.saturated_s(), "left": left}
            rows.append(row)
            if not quiet:
                print(f"try {index}: down of {nodes} containers on {row['network']} ({row['storage']}): "
                      f"exit {down.returncode}, {row['wall_s']} s wall (`up` took {row['up_s']} s), "
                      f"CLI CPU {row['cli_cpu_s']} s, dockerd CPU {row['dockerd_cpu_s']} s, load {row['load1']}, "
                      f"host busy {row['host_busy_cores_mean']} of {row['host_cores']} cores on average, "
                      f"all but 10% of them for {row['host_saturated_s']} s; "
                      f"left {sum(len(v) for v in left.values())}" + (f"\n{down.stderr}" if down.returncode else ""))
    summary = {"nodes": nodes, "tries": len(rows),
               "median": {k: statistics.median(r[k] for r in rows) for k in ("wall_s", "cli_cpu_s")},
               "tries_detail": rows}
    if all(r["dockerd_cpu_s"] is not None for r in rows):
        summary["median"]["dockerd_cpu_s"] = statistics.median(r["dockerd_cpu_s"] for r in rows)
    if quiet:
        print(json.dumps(summary, indent=1))
    else:
        print(f"\n`testbed down` of {nodes} containers, median of {len(rows)}: "
              + ", ".join(f"{k} {v:.2f}" for k, v in summary["median"].items()))
    clean = all(r["rc"] == 0 and not any(r["left"].values()) for r in rows)
    return 0 if clean else 1


def endpoints_bench(image: str, nodes: int, workers: int, tries: int) -> int:
    import docker  # noqa: PLC0415

    from orchestrator.backends.docker.teardown import Scope, bounded, teardown  # noqa: PLC0415
    from orchestrator.dockerapi.client import LABEL, LABEL_STATE, LABEL_TESTBED  # noqa: PLC0415

    client, clean = docker.from_env(timeout=300), 0
    with tempfile.TemporaryDirectory(prefix="bench-teardown-endpoints-") as state:
        for index in range(tries):
            testbed = f"endpoints{nodes}-{index}-{os.getpid()}"
            labels = {LABEL: "1", LABEL_TESTBED: testbed, LABEL_STATE: state}
            net = client.networks.create(f"gtb-{testbed}", driver="bridge", internal=True, labels=labels)
            ids = bounded(lambda i: client.api.create_container(
                image, entrypoint=["sleep", "infinity"], name=f"gtb-{testbed}-n{i}", labels=labels,
                host_config=client.api.create_host_config(init=True, network_mode=net.name))["Id"], list(range(nodes)))
            bounded(client.api.start, ids)
            cpu0, t0 = dockerd_cpu_s(), time.monotonic()
            bounded(lambda cid: client.api.disconnect_container_from_network(cid, net.id), ids, workers)
            wall, dockerd1 = time.monotonic() - t0, dockerd_cpu_s()
            net.reload()
            listed = len(net.attrs.get("Containers") or {})
            left = teardown(client, Scope(testbed, state)).left
            clean += not left
            cpu = f"{(dockerd1 - cpu0) / nodes * 1000:.0f} ms" if cpu0 is not None and dockerd1 else "unknown"
            print(f"try {index}: {nodes} disconnects, {workers} at a time: {wall:.2f} s, {wall / nodes * 1000:.0f} ms "
                  f"each, dockerd CPU {cpu} each, load {os.getloadavg()[0]:.1f}; endpoints listed after: {listed}; "
                  + ("; ".join(lf.line() for lf in left) or "network removed"))
    return 0 if clean == tries else 1


if __name__ == "__main__":
    sys.exit(main())
