"""A testbed's own Linux bridge, in place of a Docker network, where the
host gives root.

Why: Docker 20.10 loses endpoint-count decrements when endpoints of one
network go concurrently, so a Docker network's containers must leave it one
disconnect at a time (orchestrator/backends/docker/teardown.py): 15-45 s of a `down` of
250 containers. Containers with Docker's networking disabled (no sandbox,
not even network mode "none"'s endpoint: orchestrator/backends/docker/wiring.py),
wired here to a bridge Docker knows nothing of, hold no endpoint: they stop
and go all at once and the bridge goes with one `ip link del` (docs/docker.md,
"Own bridge").

What one bridge is: `gtb<hash of the tag>` with the gateway address, its
ifalias `gossip-testbed <tag>` (so `down`, `down --all` and `gc` find it with
no record), and three iptables rules in filter FORWARD (owner
iptables.BRIDGE): frames from the bridge to itself pass (br_netfilter sends
bridged frames through FORWARD, whose policy Docker sets to DROP), and
nothing is forwarded between the bridge and anything else: internal, as a
Docker network made with `internal=True`. A container is wired after each
start (each start makes a new network namespace): a veth pair whose host end
`gv<hash of tag and node>` is a port of the bridge and whose other end is
created in the container's namespace as `eth0`, given its address and a
default route through the gateway. Cutting a node off is deleting its veth
pair (both ends go, as with Docker's disconnect); wiring it again makes a new
one.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from orchestrator.host import iptables
from orchestrator.errors import TestbedError

ALIAS = "gossip-testbed"  # an own bridge's ifalias: "gossip-testbed <testbed>:<state hash>"
SYS_NET = Path("/sys/class/net")
LOCK = Path("/run/lock/gossip-testbed-subnets.lock")  # one subnet choice at a time on this host
NF_CALL = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
TIMEOUT_S = 30


def unavailable() -> str | None:
    """Why this host cannot give a testbed its own bridge, or None."""
    if os.geteuid() != 0:
        return "an own bridge needs root (ip, nsenter, iptables on the host)"
    missing = [tool for tool in ("ip", "nsenter", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"an own bridge needs {', '.join(missing)} on the host"
    return None


def bridge_name(tag: str) -> str:
    return f"gtb{zlib.crc32(tag.encode()):08x}"


def veth_name(tag: str, node: str) -> str:
    """The host end of `node`'s veth pair (interface names are 15 characters at most)."""
    return f"gv{zlib.crc32(f'{tag}/{node}'.encode()):08x}"


@dataclass(frozen=True)
class Bridge:
    name: str
    subnet: ipaddress.IPv4Network
    gateway: str  # the host's address on it
    tag: str  # iptables.tag_of(testbed, state directory)

    @property
    def testbed(self) -> str:
        return self.tag.rpartition(":")[0]

    def rules(self) -> list[iptables.IptablesRule]:
        comment = iptables.comment(iptables.BRIDGE, self.tag)
        return [iptables.IptablesRule("filter", spec, iptables.BRIDGE, self.tag) for spec in (
            ("FORWARD", "-i", self.name, "-o", self.name, *comment, "-j", "ACCEPT"),
            ("FORWARD", "-i", self.name, *comment, "-j", "DROP"),
            ("FORWARD", "-o", self.name, *comment, "-j", "DROP"),
        )]


def _ip(args: list[str], script: str | None = None, netns_pid: int | None = None, check: bool = True
        ) -> subprocess.CompletedProcess[str]:
    prefix = ["nsenter", "-t", str(netns_pid), "-n", "--"] if netns_pid else []
    argv = prefix + ["ip", *args]
    result = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=TIMEOUT_S)
    if check and result.returncode != 0:
        what = script.strip().replace("\n", "; ") if script else " ".join(args)
        raise TestbedError(f"ip {what}: {result.stderr.strip()}")
    return result


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def create(tag: str, candidates: Callable[[], Iterable[ipaddress.IPv4Network]]) -> Bridge:
    """Make the bridge of `tag` on the first of `candidates()` (free subnets,
    listed under a host-wide lock, so two testbeds never take the same one),
    with its address, alias and rules. Raises TestbedError, leaving nothing,
    when it cannot."""
    name = bridge_name(tag)
    if (SYS_NET / name).exists():
        raise TestbedError(f"bridge {name} of {tag} already exists: `testbed down` first")
    if not NF_CALL.exists():
        subprocess.run(["modprobe", "br_netfilter"], capture_output=True, timeout=TIMEOUT_S)
    with _subnet_lock():
        subnet = next(iter(candidates()), None)
        if subnet is None:
            raise TestbedError(f"no free subnet left for the bridge of {tag}")
        bridge = Bridge(name, subnet, str(next(subnet.hosts())), tag)
        try:
            _ip(["-batch", "-"], f"link add {name} type bridge\nlink set {name} alias '{ALIAS} {tag}'\n"
                                  f"address add {bridge.gateway}/{subnet.prefixlen} dev {name}\nlink set {name} up\n")
            for rule in reversed(bridge.rules()):  # -I 1 each: the first rule ends up first
                iptables.run(rule.table, "-I", (rule.spec[0], "1", *rule.spec[1:]))
        except TestbedError:
            remove(bridge.name, tag)
            raise
    return bridge


def lookup(tag: str) -> Bridge | None:
    """The bridge of `tag` on this host (a later CLI process), or None."""
    name = bridge_name(tag)
    try:
        if (SYS_NET / name / "ifalias").read_text().strip() != f"{ALIAS} {tag}":
            return None
    except OSError:
        return None
    shown = json.loads(_ip(["-j", "-4", "address", "show", "dev", name]).stdout or "[]")
    for info in (shown[0].get("addr_info") if shown else []) or []:
        iface = ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}")
        return Bridge(name, iface.network, str(iface.ip), tag)  # type: ignore[arg-type]
    return None


def found() -> list[tuple[str, str]]:
    """(name, tag) of every own bridge on this host, any testbed's."""
    out = []
    for link in SYS_NET.iterdir() if SYS_NET.exists() else ():
        with contextlib.suppress(OSError):
            owner, _, tag = (link / "ifalias").read_text().strip().partition(" ")
            if owner == ALIAS and tag:
                out.append((link.name, tag))
    return sorted(out)


def admitted(testbed: str | None, state: str | None) -> list[tuple[str, str]]:
    """The bridges of `testbed` (None: every testbed) made under the state
    directory `state` (None: any), as a teardown Scope says."""
    return [(name, tag) for name, tag in found() if iptables.admits(tag, testbed, state)]


def remove(name: str, tag: str) -> list[str]:
    """The bridge `name` of `tag` and its rules: what could not be removed.
    (Teardown removes the rules it listed itself, then `delete_link`.)"""
    left = [f"{rule.describe()}: {why}" for rule in iptables.our_rules()
            if rule.owner == iptables.BRIDGE and rule.tag == tag and (why := iptables.remove(rule))]
    why = delete_link(name)
    return left + ([f"bridge {name}: {why}"] if why else [])


def delete_link(name: str) -> str | None:
    """Delete an interface (a bridge: its ports come loose, their pairs go
    with their containers' namespaces; a veth: both ends); None when it is
    gone (or was not there), else why not."""
    if not (SYS_NET / name).exists():
        return None
    result = _ip(["link", "del", name], check=False)
    if not (SYS_NET / name).exists():
        return None
    return result.stderr.strip() or f"ip exited {result.returncode}"


def wire(bridge: Bridge, veth: str, pid: int, ip: str) -> None:
    """Give the namespace of `pid` an `eth0` on the bridge with address
    `ip` and a default route through the gateway, its MAC address made from
    `ip` as Docker does (so peers' neighbour entries stay right when a node
    is wired again). A host end left by the
    node's previous namespace (the kernel removes a dead namespace's pair
    asynchronously) is deleted first."""
    unwire(veth)
    _ip(["-batch", "-"], f"link add {veth} type veth peer name eth0 address {mac_of(ip)} netns {pid}\n"
                         f"link set {veth} master {bridge.name} up\n")
    _ip(["-batch", "-"], f"address add {ip}/{bridge.subnet.prefixlen} dev eth0\nlink set eth0 up\n"
                         f"route add default via {bridge.gateway}\n", netns_pid=pid)


def mac_of(ip: str) -> str:
    """02:42 and the four bytes of the address: Docker's own rule."""
    return "02:42:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(ip).packed)


def unwire(veth: str) -> None:
    """Delete a veth pair by its host end (both ends go); none is fine."""
    why = delete_link(veth)
    if why:
        raise TestbedError(f"ip link del {veth}: {why}")


def wired(veth: str) -> bool:
    return (SYS_NET / veth).exists()
