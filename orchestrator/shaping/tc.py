"""Linux traffic control for one container's egress: pure functions that turn a
node's link shapes into tc command lines, and a probe for what the kernel has.

Every node shapes what it *sends*; a link's one-way delay is applied by the
sender, so a symmetric a-b link is shaped once in each direction, by a and by b.

The tree, on the container's eth0 (class ids are hex, as tc reads them):

    1:    htb root, default 3 (unclassified traffic goes through the uplink)
    1:1   the node's uplink: rate = ceil = uplink_bps (or CEILING when unset)
    1:2   exempt (the gateway / host: control endpoint replies): CEILING, unshaped
    1:3   other destinations, under 1:1 (netem leaf with the default shape)
    1:10+ one class per destination with its own shape, under 1:1; a netem
          leaf carries delay/jitter/loss, the class's ceil carries the link rate
    Under an uplink each class under 1:1 is assured an equal share of it
    (rate = uplink / classes, at most its ceil) and borrows up to its ceil.
    htb lets a class send at its own rate without asking its parent, so
    classes whose rates summed above the uplink would bypass it: with rate =
    ceil per destination, a Debian 6.1 kernel sent 14 Mbit/s through an
    8 Mbit/s uplink (tests/test_kvm_netem.py).
    filters: prio 1 `u32 match ip dst <exempt>/32 flowid 1:2`,
             prio 2 `u32 match ip dst <peer>/32 flowid 1:N`

Without netem (path "userspace+htb") the node's user-space shaper does
delay/jitter/loss and only rates go to the kernel: htb classes for peers that
have a rate, or a single tbf at the root when only the uplink is limited.

Precedent: the tc-netem(8)/tc-htb(8) recipes used by Mininet's TCLink and by
Pumba/comcast: htb for rate, netem as the leaf qdisc, u32 on the destination.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from node.config import LinkShape

CEILING_BPS = 10_000_000_000  # "unlimited": 10 Gbit/s, above any veth here
FIRST_PEER_MINOR = 0x10
MTU_BYTES = 1514

Argv = list[str]


def rate(bps: int) -> str:
    """tc rate in bit/s, exact: `1000000bit`."""
    return f"{int(bps)}bit"


def _ms(value: float) -> str:
    return f"{value:g}ms"


def _percent(p: float) -> str:
    return f"{round(p * 100, 6):g}%"


def netem_args(shape: LinkShape) -> list[str]:
    """`delay 20ms 5ms loss 1%` (netem keywords only; rate stays with htb)."""
    args: list[str] = []
    if shape.delay_ms or shape.jitter_ms:
        args += ["delay", _ms(shape.delay_ms)]
        if shape.jitter_ms:
            args.append(_ms(shape.jitter_ms))
    if shape.loss:
        args += ["loss", _percent(shape.loss)]
    return args


def clear_commands(dev: str = "eth0") -> list[Argv]:
    """Remove whatever root qdisc is there (fails harmlessly when none is)."""
    return [["tc", "qdisc", "del", "dev", dev, "root"]]


def tbf_burst_bytes(bps: int) -> int:
    """At least 4 ms at the rate and 2 MTU (tbf needs burst >= rate/HZ)."""
    return max(2 * MTU_BYTES, int(bps) // 8 // 250)


def egress_commands(
    per_dest: Mapping[str, LinkShape],
    uplink_bps: int | None = None,
    *,
    default: LinkShape | None = None,
    exempt: Sequence[str] = (),
    netem: bool = True,
    dev: str = "eth0",
) -> list[Argv]:
    """The tc commands that shape one node's egress. `per_dest` maps destination
    IPv4 addresses to shapes; `default` shapes every other destination (netem
    only); `exempt` addresses (the host/gateway) are never shaped. With
    `netem=False` delay/jitter/loss are ignored (the node does them) and only
    rates are applied. Returns [] when there is nothing for the kernel to do."""
    tc = ["tc"]

    def kernel_part(shape: LinkShape) -> bool:
        return bool(shape.rate_bps) or (netem and bool(netem_args(shape)))

    dests = [(ip, per_dest[ip]) for ip in sorted(per_dest, key=_ip_key) if kernel_part(per_dest[ip])]
    default_netem = netem_args(default) if (netem and default is not None) else []
    if not dests and not default_netem:
        if not uplink_bps:
            return []
        # Only the uplink: one tbf, no classification needed.
        return [tc + ["qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf",
                      "rate", rate(uplink_bps), "burst", str(tbf_burst_bytes(uplink_bps)),
                      "latency", "50ms"]]

    uplink = int(uplink_bps) if uplink_bps else CEILING_BPS
    share = uplink // (1 + len(dests))  # each class's assured part of the uplink
    cmds: list[Argv] = [
        tc + ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "3"],
        _htb_class(dev, "1:", "1:1", uplink, uplink),
        _htb_class(dev, "1:", "1:2", CEILING_BPS, CEILING_BPS),
        _htb_class(dev, "1:1", "1:3", share if uplink_bps else uplink, uplink),
    ]
    if default_netem:
        cmds.append(tc + ["qdisc", "add", "dev", dev, "parent", "1:3", "handle", "3:", "netem"] + default_netem)
    for ip in exempt:
        cmds.append(_u32(dev, 1, ip, "1:2"))
    for index, (ip, shape) in enumerate(dests):
        minor = f"{FIRST_PEER_MINOR + index:x}"
        ceil = min(uplink, int(shape.rate_bps)) if shape.rate_bps else uplink
        cmds.append(_htb_class(dev, "1:1", f"1:{minor}", min(share, ceil) if uplink_bps else ceil, ceil))
        leaf = netem_args(shape) if netem else []
        if leaf:
            cmds.append(tc + ["qdisc", "add", "dev", dev, "parent", f"1:{minor}", "handle", f"{minor}:", "netem"] + leaf)
        cmds.append(_u32(dev, 2, ip, f"1:{minor}"))
    return cmds


def _htb_class(dev: str, parent: str, classid: str, rate_bps: int, ceil_bps: int) -> Argv:
    return ["tc", "class", "add", "dev", dev, "parent", parent, "classid", classid, "htb",
            "rate", rate(rate_bps), "ceil", rate(ceil_bps),
            "burst", str(htb_burst_bytes(rate_bps)), "cburst", str(htb_burst_bytes(ceil_bps)),
            "quantum", str(MTU_BYTES)]


def htb_burst_bytes(bps: int) -> int:
    """5 ms at the rate, at least 2 MTU: tc's own default (rate/HZ + MTU) is
    0 above ~4 Gbit/s and starves fast classes on coarse timers."""
    return max(2 * MTU_BYTES, int(bps) // 8 // 200)


def _u32(dev: str, prio: int, ip: str, flowid: str) -> Argv:
    return ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", str(prio),
            "u32", "match", "ip", "dst", f"{ip}/32", "flowid", flowid]


def _ip_key(ip: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in ip.split("."))
    except ValueError:
        return (1 << 16,)


# ---------------------------------------------------------------- partitions


def partition_commands(peers_ips: Sequence[str], *, add: bool = True) -> list[Argv]:
    """iptables rules (run in the node's network namespace) that drop traffic
    to and from the given addresses: a partial partition. `add=False` removes
    them. Separate from tc so shaping and partitions never disturb each other."""
    op = "-I" if add else "-D"
    cmds: list[Argv] = []
    for ip in sorted(peers_ips, key=_ip_key):
        cmds.append(["iptables", "-w", op, "INPUT", "-s", f"{ip}/32", "-j", "DROP"])
        cmds.append(["iptables", "-w", op, "OUTPUT", "-d", f"{ip}/32", "-j", "DROP"])
    return cmds


# ---------------------------------------------------------------- probe


@dataclass(frozen=True)
class NetemProbe:
    """Whether netem, htb and tbf qdiscs can be created here, and how we know
    (method "netns": tried for real, which needs root; "config": read from the
    kernel config; "none": could not tell)."""

    netem: bool | None  # None: could not tell
    htb: bool | None
    tbf: bool | None
    method: str
    detail: str


def probe_kernel(config_gz: Path = Path("/proc/config.gz")) -> NetemProbe:
    """Try `tc qdisc add dev lo root netem delay 1ms` (and htb, tbf) in a throwaway
    network namespace (`unshare -n`, needs root); fall back to the kernel
    config when that cannot run."""
    unshare, tc = shutil.which("unshare"), shutil.which("tc")
    if unshare and tc:
        try:
            netem = _try_in_netns(unshare, [tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
            htb = _try_in_netns(unshare, [tc, "qdisc", "add", "dev", "lo", "root", "htb", "default", "1"])
            tbf = _try_in_netns(unshare, [tc, "qdisc", "add", "dev", "lo", "root", "tbf",
                                          "rate", "1mbit", "burst", "32kb", "latency", "50ms"])
        except OSError as exc:
            netem = htb = tbf = (None, str(exc))
        if netem[0] is not None and htb[0] is not None and tbf[0] is not None:
            detail = "tc qdisc add ... netem in a throwaway netns: " + (
                "ok" if netem[0] else f"failed ({netem[1]})")
            return NetemProbe(netem[0], htb[0], tbf[0], "netns", detail)
    return _probe_config(config_gz)


def _try_in_netns(unshare: str, argv: list[str]) -> tuple[bool | None, str]:
    result = subprocess.run([unshare, "-n", *argv], capture_output=True, text=True, timeout=10)
    err = (result.stderr or result.stdout).strip()
    if result.returncode == 0:
        return True, ""
    if "unshare" in err and ("Operation not permitted" in err or "permission" in err.lower()):
        return None, err  # not root: cannot tell this way
    return False, err.splitlines()[0] if err else f"exit {result.returncode}"


def _probe_config(config_gz: Path) -> NetemProbe:
    try:
        text = gzip.decompress(config_gz.read_bytes()).decode(errors="replace")
    except OSError as exc:
        return NetemProbe(None, None, None, "none", f"cannot probe: no netns (not root?) and {config_gz}: {exc}")

    def state(option: str) -> bool:
        return f"{option}=y" in text or f"{option}=m" in text

    netem, htb, tbf = state("CONFIG_NET_SCH_NETEM"), state("CONFIG_NET_SCH_HTB"), state("CONFIG_NET_SCH_TBF")
    return NetemProbe(netem, htb, tbf, "config",
                      f"{config_gz}: CONFIG_NET_SCH_NETEM {'set' if netem else 'unset'}")
