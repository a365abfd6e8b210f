"""Measurement for issue #13 (`down` of 250 containers in <= 10 s): what it
costs when the testbed wires its own Linux bridge instead of a Docker
network, so that Docker's libnetwork holds no endpoint of ours on a network
we must later remove.

Why: today `down` disconnects 250 containers from the testbed's Docker
network one at a time (docs/docker.md, "Removing hundreds of containers"),
because Docker 20.10 loses endpoint-count decrements when endpoints of one
network are deleted concurrently. Containers on network "none" hold only a
null-driver endpoint on a network nobody removes, so they might be removed
all at once. This script measures that, and whether anything is left.

One repetition, N sleeping containers of the router image (docker-init,
`sleep infinity`, network none, the testbed's labels):

1. create and start them, --workers at a time;
2. wire them: one `ip -batch` on the host makes the bridge, gives it the
   gateway address and makes one veth pair per container, its peer created
   directly in the container's namespace as eth0; then one
   `nsenter -t <pid> -n ip -batch -` per container (address, up, default
   route), --workers at a time; an iptables rule lets the bridge forward to
   itself (br_netfilter sends bridged frames through FORWARD, whose policy
   Docker sets to DROP);
3. check: ping between two containers over the bridge, and an htb qdisc
   with one class on a container's eth0;
4. remove them all, --workers at a time: `rm -f` (mode rm-f), or SIGKILL
   all then `rm` (mode kill-rm), or SIGKILL every container's init from the
   host, wait until Docker lists none running, then `rm` (mode sigkill-rm);
   then delete the bridge and the iptables rule; dockerd's CPU time over
   all of it is shown too. For comparison, mode docker-net does what the
   project does today in place of steps 2 and 4: an internal Docker network,
   a static address each, and the project's own teardown
   (orchestrator/backends/docker/teardown.py: disconnects one at a time, removal 8 at
   a time, the network);
5. count what is left: labelled containers, endpoints of network "none",
   veths on the host, mounted namespaces under /var/run/docker/netns, our
   bridge, our iptables rule; and how long until the veth count is back.

    flock /work/heavy.lock .venv/bin/python bench/bench_own_bridge.py \\
        [--nodes 250] [--workers 16] [--modes rm-f,kill-rm,rm-f]

Prints one line per phase and a table at the end; exit 1 if anything was
left or a check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_teardown import dockerd_cpu_s  # noqa: E402
from orchestrator.backends.docker.network import candidate_subnets, create_network  # noqa: E402
from orchestrator.backends.docker.teardown import Scope, bounded, teardown  # noqa: E402
from orchestrator.dockerapi.client import LABEL, LABEL_STATE, LABEL_TESTBED  # noqa: E402
from orchestrator.images.router import ensure_image  # noqa: E402

NETNS_DIR = Path("/var/run/docker/netns")
DOCKER_NET = "docker-net"
TODAY = "teardown (today's)"
DOWN_PHASES = (TODAY, "rm -f", "kill", "SIGKILL inits from host", "wait exited", "rm", "delete bridge + rule")
SETTLE_S = 10.0  # how long to wait for the kernel to destroy dead namespaces' veths
MODES = ("rm-f", "kill-rm", "sigkill-rm", DOCKER_NET)


@dataclass(frozen=True)
class Left:
    """What one repetition left behind, by kind."""

    containers: int
    none_endpoints: int
    veths: int
    netns_mounted: int
    bridge: bool  # our bridge, or in mode docker-net the Docker network
    iptables_rule: bool

    def total(self) -> int:
        return (self.containers + self.none_endpoints + self.veths + self.netns_mounted
                + int(self.bridge) + int(self.iptables_rule))


@dataclass
class Rep:
    """The figures of one repetition."""

    mode: str
    phases: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    checks_ok: bool = False
    left: Left | None = None  # right after down
    settled: Left | None = None  # after the veths were given SETTLE_S to go
    none_count: tuple[str, str] = ("?", "?")  # network none's stored endpoint count before, after
    veth_settle_s: float | None = None


def sh(argv: list[str], stdin: str | None = None) -> str:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)
    if result.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[:1000]}")
    return result.stdout


def veth_count() -> int:
    return len(sh(["ip", "-o", "link", "show", "type", "veth"]).splitlines())


def netns_mounted() -> int:
    """Mounted namespace files under NETNS_DIR (an unmounted file is Docker's
    bookkeeping, which its garbage collector removes later)."""
    prefix = f"{NETNS_DIR}/"
    return sum(len(f) > 1 and f[1].startswith(prefix)
               for f in (line.split(" ") for line in Path("/proc/mounts").read_text().splitlines()))


def none_endpoints(client: Any) -> int:
    return len(client.api.inspect_network("none").get("Containers") or {})


def none_store_count(client: Any) -> str:
    """The endpoint count libnetwork keeps for network "none" in its bolt
    store (what `network rm` would check; "none" itself is never removed),
    read from the file's bytes (libkv puts an 8-byte index before the
    value): every copy found, stale pages included."""
    path = Path(client.info()["DockerRootDir"]) / "network/files/local-kv.db"
    net_id = client.api.inspect_network("none")["Id"]
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    found = re.findall(rb"endpoint_count/" + net_id.encode() + rb'/.{8}\{"Count":(\d+)\}', raw, re.DOTALL)
    return "/".join(n.decode() for n in found) or "none found"


def rule_argv(bridge: str, op: str) -> list[str]:
    return ["iptables", "-w", op, "DOCKER-USER", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]


def rule_present(bridge: str) -> bool:
    return subprocess.run(rule_argv(bridge, "-C"), capture_output=True).returncode == 0


def bridge_present(bridge: str) -> bool:
    return subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0


def timed(rep: Rep, phase: str, fn: Callable[[], Any]) -> Any:
    t0 = time.monotonic()
    out = fn()
    rep.phases[phase] = time.monotonic() - t0
    print(f"  {phase}: {rep.phases[phase]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    return out


def one_rep(client: Any, image: str, nodes: int, workers: int, mode: str, index: int, state: str) -> Rep:
    rep = Rep(mode)
    base = (none_endpoints(client), veth_count(), netns_mounted())
    count_before = none_store_count(client)
    testbed = f"ownbr{index}-{os.getpid()}"
    tag = f"{zlib.crc32(testbed.encode()):08x}"[:6]
    bridge = f"gtb{tag}"
    labels = {LABEL: "1", LABEL_TESTBED: testbed, LABEL_STATE: state}
    subnet = next(iter(candidate_subnets(client, min(24, 32 - (nodes + 2).bit_length()), testbed)))
    hosts = subnet.hosts()
    gateway = next(hosts)
    ips = [next(hosts) for _ in range(nodes)]
    where = f"Docker network gtb-{testbed}" if mode == DOCKER_NET else f"{bridge} {subnet}"
    print(f"rep {index} ({mode}): {nodes} containers on {where}", flush=True)
    try:
        if mode == DOCKER_NET:
            ids, pids, ips, gateway = docker_net_setup(client, rep, image, testbed, labels, nodes, workers)
        else:
            ids, pids = own_bridge_setup(client, rep, image, testbed, labels, bridge, tag, subnet, ips, workers)
            rep.phases["wire per container (serial)"] = serial_wire_cost(pids[0], ips[0], gateway, subnet)
        rep.checks_ok = timed(rep, "checks", lambda: checks(rep, pids, ips))
        dockerd0 = dockerd_cpu_s()
        if mode == DOCKER_NET:
            report = timed(rep, TODAY, lambda: teardown(client, Scope(testbed, state)))
            rep.notes.extend(f"teardown left: {lf.line()}" for lf in report.left)
        else:
            removal(client, rep, ids, pids, workers, mode)
            timed(rep, "delete bridge + rule", lambda: (sh(["ip", "link", "del", bridge]),
                                                        sh(rule_argv(bridge, "-D"))))
        dockerd1 = dockerd_cpu_s()
        rep.phases["down total"] = sum(v for k, v in rep.phases.items() if k in DOWN_PHASES)
        if dockerd0 is not None and dockerd1 is not None:
            rep.phases["dockerd CPU during down"] = dockerd1 - dockerd0
        rep.phases["load1 after down"] = os.getloadavg()[0]
        settle(rep, client, state, base, bridge)
        rep.none_count = (count_before, none_store_count(client))
        if mode == DOCKER_NET and rep.left is not None:
            rep.left = dataclasses.replace(rep.left, bridge=network_present(client, testbed))
    finally:
        leftovers = [c["Id"] for c in client.api.containers(all=True, filters={"label": f"{LABEL_TESTBED}={testbed}"})]
        for cid in leftovers:
            client.api.remove_container(cid, force=True)
        if leftovers:
            rep.notes.append(f"{len(leftovers)} containers removed by the cleanup")
        if mode == DOCKER_NET and network_present(client, testbed):
            rep.notes.append(f"network gtb-{testbed} left")
        for present, argv in ((bridge_present, ["ip", "link", "del", bridge]), (rule_present, rule_argv(bridge, "-D"))):
            if present(bridge):
                subprocess.run(argv, capture_output=True)
                rep.notes.append(f"cleanup: {' '.join(argv)}")
    return rep


def own_bridge_setup(client: Any, rep: Rep, image: str, testbed: str, labels: dict[str, str], bridge: str,
                     tag: str, subnet: ipaddress.IPv4Network, ips: list[ipaddress.IPv4Address], workers: int
                     ) -> tuple[list[str], list[int]]:
    """Steps 1 and 2 of the module docstring: (container ids, init pids)."""
    gateway = next(subnet.hosts())
    ids = timed(rep, "create", lambda: bounded(lambda i: client.api.create_container(
        image, entrypoint=["sleep", "infinity"], name=f"gtb-{testbed}-n{i}", labels=labels,
        host_config=client.api.create_host_config(init=True, network_mode="none"))["Id"],
        list(range(len(ips))), workers))
    timed(rep, "start", lambda: bounded(client.api.start, ids, workers))
    pids = timed(rep, "inspect pids", lambda: bounded(
        lambda cid: int(client.api.inspect_container(cid)["State"]["Pid"]), ids, workers))
    host_batch = [f"link add {bridge} type bridge", f"addr add {gateway}/{subnet.prefixlen} dev {bridge}",
                  f"link set {bridge} up"]
    for i, pid in enumerate(pids):
        host_batch += [f"link add gv{tag}{i} type veth peer name eth0 netns {pid}",
                       f"link set gv{tag}{i} master {bridge} up"]
    timed(rep, "wire host (1 ip -batch)", lambda: sh(["ip", "-batch", "-"], "\n".join(host_batch) + "\n"))
    timed(rep, "iptables rule", lambda: sh(rule_argv(bridge, "-I")))
    timed(rep, "wire netns (nsenter ip -batch each)", lambda: bounded(lambda pair: sh(
        ["nsenter", "-t", str(pair[0]), "-n", "ip", "-batch", "-"],
        f"addr add {pair[1]}/{subnet.prefixlen} dev eth0\nlink set eth0 up\n"
        f"route add default via {gateway}\n"), list(zip(pids, ips, strict=True)), workers))
    return ids, pids


def docker_net_setup(client: Any, rep: Rep, image: str, testbed: str, labels: dict[str, str], nodes: int,
                     workers: int) -> tuple[list[str], list[int], list[ipaddress.IPv4Address], ipaddress.IPv4Address]:
    """What the project does today, for comparison: an internal Docker bridge
    network and a static address per container. (ids, pids, ips, gateway)"""
    network, subnet, gateway = timed(rep, "create network", lambda: create_network(
        client, f"gtb-{testbed}", nodes, testbed, labels))
    hosts = subnet.hosts()
    next(hosts)
    ips = [next(hosts) for _ in range(nodes)]
    api = client.api
    ids = timed(rep, "create", lambda: bounded(lambda i: api.create_container(
        image, entrypoint=["sleep", "infinity"], name=f"gtb-{testbed}-n{i}", labels=labels,
        host_config=api.create_host_config(init=True, network_mode=network.name),
        networking_config=api.create_networking_config({network.name: api.create_endpoint_config(
            ipv4_address=str(ips[i]))}))["Id"], list(range(nodes)), workers))
    timed(rep, "start", lambda: bounded(api.start, ids, workers))
    pids = timed(rep, "inspect pids", lambda: bounded(
        lambda cid: int(api.inspect_container(cid)["State"]["Pid"]), ids, workers))
    return ids, pids, ips, ipaddress.IPv4Address(gateway)


def network_present(client: Any, testbed: str) -> bool:
    return bool(client.api.networks(names=[f"gtb-{testbed}"]))


def serial_wire_cost(pid: int, ip: ipaddress.IPv4Address, gateway: ipaddress.IPv4Address,
                     subnet: ipaddress.IPv4Network) -> float:
    """Wall time of one container's nsenter + ip -batch, alone (idempotent
    commands: `replace`), the mean of 10."""
    script = f"addr replace {ip}/{subnet.prefixlen} dev eth0\nlink set eth0 up\nroute replace default via {gateway}\n"
    t0 = time.monotonic()
    for _ in range(10):
        sh(["nsenter", "-t", str(pid), "-n", "ip", "-batch", "-"], script)
    return (time.monotonic() - t0) / 10


def checks(rep: Rep, pids: list[int], ips: list[ipaddress.IPv4Address]) -> bool:
    ok = True
    for a, b in ((0, 1), (0, len(pids) - 1)):
        ping = subprocess.run(["nsenter", "-t", str(pids[a]), "-n", "ping", "-c", "2", "-i", "0.2", "-W", "1",
                               str(ips[b])], capture_output=True, text=True)
        if ping.returncode:
            rep.notes.append(f"ping n{a} -> n{b} failed: {ping.stdout.strip().splitlines()[-2:]}")
            ok = False
    tc = ["nsenter", "-t", str(pids[0]), "-n", "tc", "-batch", "-"]
    sh(tc, "qdisc add dev eth0 root handle 1: htb default 10\n"
           "class add dev eth0 parent 1: classid 1:10 htb rate 10mbit\n")
    shown = sh(["nsenter", "-t", str(pids[0]), "-n", "tc", "class", "show", "dev", "eth0"])
    if "htb 1:10" not in shown:
        rep.notes.append(f"htb class not shown: {shown.strip()}")
        ok = False
    ping = subprocess.run(["nsenter", "-t", str(pids[0]), "-n", "ping", "-c", "1", "-W", "1", str(ips[1])],
                          capture_output=True)
    if ping.returncode:
        rep.notes.append("ping through htb failed")
        ok = False
    return ok


def wait_exited(client: Any, ids: list[str]) -> None:
    """Until Docker lists none of `ids` as running: one listing per poll."""
    want = set(ids)
    while any(c["Id"] in want for c in client.api.containers(filters={"status": "running"})):
        time.sleep(0.05)


def removal(client: Any, rep: Rep, ids: list[str], pids: list[int], workers: int, mode: str) -> None:
    if mode == "rm-f":
        timed(rep, "rm -f", lambda: bounded(lambda cid: client.api.remove_container(cid, force=True), ids, workers))
    elif mode == "sigkill-rm":
        timed(rep, "SIGKILL inits from host", lambda: [os.kill(pid, signal.SIGKILL) for pid in pids])
        timed(rep, "wait exited", lambda: wait_exited(client, ids))
        timed(rep, "rm", lambda: bounded(client.api.remove_container, ids, workers))
    elif mode == "kill-rm":
        timed(rep, "kill", lambda: bounded(lambda cid: client.api.kill(cid), ids, workers))
        timed(rep, "wait exited", lambda: bounded(lambda cid: client.api.wait(cid, timeout=60), ids, workers))
        timed(rep, "rm", lambda: bounded(client.api.remove_container, ids, workers))
    else:
        raise ValueError(mode)


def leftover(client: Any, state: str, base: tuple[int, int, int], bridge: str) -> Left:
    return Left(
        containers=len(client.api.containers(all=True, filters={"label": f"{LABEL_STATE}={state}"})),
        none_endpoints=max(0, none_endpoints(client) - base[0]),
        veths=max(0, veth_count() - base[1]),
        netns_mounted=max(0, netns_mounted() - base[2]),
        bridge=bridge_present(bridge),
        iptables_rule=rule_present(bridge),
    )


def settle(rep: Rep, client: Any, state: str, base: tuple[int, int, int], bridge: str) -> None:
    """The leftovers right after removal, then how long until the veths
    (destroyed with their namespaces, asynchronously) are back to the base."""
    rep.left = leftover(client, state, base, bridge)
    t0 = time.monotonic()
    while veth_count() > base[1] and time.monotonic() - t0 < SETTLE_S:
        time.sleep(0.05)
    if veth_count() <= base[1]:
        rep.veth_settle_s = time.monotonic() - t0
    rep.settled = leftover(client, state, base, bridge)


def main() -> int:
    import docker  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--modes", default="rm-f,kill-rm,rm-f", help="one repetition per mode, back to back")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("error: wiring veths into containers' namespaces needs root", file=sys.stderr)
        return 2
    modes = args.modes.split(",")
    if args.nodes < 2 or args.workers < 1 or any(m not in MODES for m in modes):
        print("error: --nodes >= 2, --workers >= 1, --modes of " + ", ".join(MODES), file=sys.stderr)
        return 2
    image, client = ensure_image(), docker.from_env(timeout=300)
    reps = []
    with tempfile.TemporaryDirectory(prefix="bench-own-bridge-") as state:
        for index, mode in enumerate(modes):
            rep = one_rep(client, image, args.nodes, args.workers, mode, index, state)
            reps.append(rep)
            print(f"  left: {rep.left}; after {SETTLE_S:g} s at most: {rep.settled}; veths gone after "
                  f"{rep.veth_settle_s} s; checks "
                  f"{'ok' if rep.checks_ok else 'FAILED'}" + "".join(f"\n  note: {n}" for n in rep.notes), flush=True)
    print_table(reps, args.nodes, args.workers)
    clean = all(r.checks_ok and r.settled is not None and r.settled.total() == 0 for r in reps)
    return 0 if clean else 1


def print_table(reps: list[Rep], nodes: int, workers: int) -> None:
    phases = list(dict.fromkeys(k for r in reps for k in r.phases))
    width = max(len(p) for p in phases + ["veths gone after (s)"])
    print(f"\n{nodes} containers, {workers} workers, a column per repetition; seconds")
    print(f"{'phase':<{width}} " + " ".join(f"{f'{i}:{r.mode}':>10}" for i, r in enumerate(reps)))
    for phase in phases:
        cells = [f"{r.phases[phase]:.3f}" if phase in r.phases else "-" for r in reps]
        print(f"{phase:<{width}} " + " ".join(f"{c:>10}" for c in cells))
    print(f"{'veths gone after (s)':<{width}} " + " ".join(
        f"{(f'{r.veth_settle_s:.2f}' if r.veth_settle_s is not None else 'never'):>10}" for r in reps))
    print(f"{'none endpoint_count before':<{width}} " + " ".join(f"{r.none_count[0]:>10}" for r in reps))
    print(f"{'none endpoint_count after':<{width}} " + " ".join(f"{r.none_count[1]:>10}" for r in reps))
    for title, attr in (("left right after down", "left"), ("left after settling", "settled")):
        print(f"{title:<{width}} " + " ".join(
            f"{(getattr(r, attr).total() if getattr(r, attr) else '?'):>10}" for r in reps))


if __name__ == "__main__":
    sys.exit(main())
