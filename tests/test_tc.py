"""tc command generation (exact command lines) and the shape of the netem probe.
No Docker needed."""

from __future__ import annotations

import gzip
import shlex

from node.config import LinkShape
from orchestrator.shaping import tc

# Three destinations with distinct latencies, one with jitter, one with loss,
# one with a rate.
MATRIX = {
    "10.200.0.3": LinkShape(delay_ms=20, jitter_ms=5),
    "10.200.0.2": LinkShape(delay_ms=10, loss=0.01),
    "10.200.0.4": LinkShape(delay_ms=42.5, rate_bps=1_000_000),
}
CLS = "burst 3028 cburst 3028 quantum 1514"
CEIL = "rate 10000000000bit ceil 10000000000bit burst 6250000 cburst 6250000 quantum 1514"


def lines(cmds):
    return [shlex.join(c) for c in cmds]


def test_netem_matrix_exact_commands():
    got = lines(tc.egress_commands(MATRIX, None, exempt=["10.200.0.1"], netem=True))
    assert got == [
        "tc qdisc add dev eth0 root handle 1: htb default 3",
        f"tc class add dev eth0 parent 1: classid 1:1 htb {CEIL}",
        f"tc class add dev eth0 parent 1: classid 1:2 htb {CEIL}",
        f"tc class add dev eth0 parent 1:1 classid 1:3 htb {CEIL}",
        "tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.200.0.1/32 flowid 1:2",
        f"tc class add dev eth0 parent 1:1 classid 1:10 htb {CEIL}",
        "tc qdisc add dev eth0 parent 1:10 handle 10: netem delay 10ms loss 1%",
        "tc filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.200.0.2/32 flowid 1:10",
        f"tc class add dev eth0 parent 1:1 classid 1:11 htb {CEIL}",
        "tc qdisc add dev eth0 parent 1:11 handle 11: netem delay 20ms 5ms",
        "tc filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.200.0.3/32 flowid 1:11",
        f"tc class add dev eth0 parent 1:1 classid 1:12 htb rate 1000000bit ceil 1000000bit {CLS}",
        "tc qdisc add dev eth0 parent 1:12 handle 12: netem delay 42.5ms",
        "tc filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.200.0.4/32 flowid 1:12",
    ]


def test_netem_with_uplink_and_default_shape():
    got = lines(tc.egress_commands(
        {"10.200.0.2": LinkShape(delay_ms=10)}, 5_000_000,
        default=LinkShape(delay_ms=50), exempt=["10.200.0.1"], netem=True, dev="eth1"))
    up = "rate 5000000bit ceil 5000000bit burst 3125 cburst 3125 quantum 1514"
    # Two classes under the uplink: each assured half, each may borrow all of it.
    half = "rate 2500000bit ceil 5000000bit burst 3028 cburst 3125 quantum 1514"
    assert got == [
        "tc qdisc add dev eth1 root handle 1: htb default 3",
        f"tc class add dev eth1 parent 1: classid 1:1 htb {up}",
        f"tc class add dev eth1 parent 1: classid 1:2 htb {CEIL}",
        f"tc class add dev eth1 parent 1:1 classid 1:3 htb {half}",
        "tc qdisc add dev eth1 parent 1:3 handle 3: netem delay 50ms",
        "tc filter add dev eth1 parent 1: protocol ip prio 1 u32 match ip dst 10.200.0.1/32 flowid 1:2",
        f"tc class add dev eth1 parent 1:1 classid 1:10 htb {half}",
        "tc qdisc add dev eth1 parent 1:10 handle 10: netem delay 10ms",
        "tc filter add dev eth1 parent 1: protocol ip prio 2 u32 match ip dst 10.200.0.2/32 flowid 1:10",
    ]


def test_without_netem_only_rates_reach_the_kernel():
    got = lines(tc.egress_commands(MATRIX, None, exempt=["10.200.0.1"], netem=False))
    assert got == [
        "tc qdisc add dev eth0 root handle 1: htb default 3",
        f"tc class add dev eth0 parent 1: classid 1:1 htb {CEIL}",
        f"tc class add dev eth0 parent 1: classid 1:2 htb {CEIL}",
        f"tc class add dev eth0 parent 1:1 classid 1:3 htb {CEIL}",
        "tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.200.0.1/32 flowid 1:2",
        f"tc class add dev eth0 parent 1:1 classid 1:10 htb rate 1000000bit ceil 1000000bit {CLS}",
        "tc filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip dst 10.200.0.4/32 flowid 1:10",
    ]


def test_per_peer_rate_is_capped_by_the_uplink():
    got = lines(tc.egress_commands({"10.0.0.2": LinkShape(rate_bps=8_000_000)}, 2_000_000, netem=False))
    assert "tc class add dev eth0 parent 1:1 classid 1:10 htb rate 1000000bit ceil 2000000bit " \
           "burst 3028 cburst 3028 quantum 1514" in got


def test_classes_under_an_uplink_are_assured_no_more_than_it():
    """htb lets a class send at its own rate without asking its parent, so the
    rates under 1:1 must sum to at most the uplink, or the uplink leaks."""
    shapes = {f"10.0.0.{i}": LinkShape(delay_ms=i, rate_bps=3_000_000) for i in range(2, 6)}
    cmds = tc.egress_commands(shapes, 8_000_000, default=LinkShape(delay_ms=5), netem=True)
    under_uplink = [c for c in cmds if c[:3] == ["tc", "class", "add"] and c[c.index("parent") + 1] == "1:1"]
    rates = [int(c[c.index("rate") + 1].removesuffix("bit")) for c in under_uplink]
    ceils = [int(c[c.index("ceil") + 1].removesuffix("bit")) for c in under_uplink]
    assert len(under_uplink) == 5 and sum(rates) <= 8_000_000
    assert ceils == [8_000_000] + [3_000_000] * 4


def test_uplink_only_is_a_tbf():
    assert lines(tc.egress_commands({}, 1_000_000, netem=False)) == [
        "tc qdisc add dev eth0 root handle 1: tbf rate 1000000bit burst 3028 latency 50ms"]
    # delay-only shapes without netem: nothing for the kernel beyond the uplink
    assert lines(tc.egress_commands({"10.0.0.2": LinkShape(delay_ms=5)}, 1_000_000, netem=False)) == [
        "tc qdisc add dev eth0 root handle 1: tbf rate 1000000bit burst 3028 latency 50ms"]


def test_nothing_to_do():
    assert tc.egress_commands({}, None) == []
    assert tc.egress_commands({"10.0.0.2": LinkShape()}, None) == []
    assert tc.egress_commands({"10.0.0.2": LinkShape(delay_ms=5)}, None, netem=False) == []


def test_classes_follow_numeric_ip_order_and_are_hex():
    dests = {f"10.0.0.{i}": LinkShape(delay_ms=1) for i in range(2, 30)}
    got = lines(tc.egress_commands(dests, None))
    filters = [g for g in got if "prio 2" in g]
    assert filters[0].endswith("10.0.0.2/32 flowid 1:10")
    assert filters[8].endswith("10.0.0.10/32 flowid 1:18")
    assert filters[-1].endswith("10.0.0.29/32 flowid 1:2b")


def test_netem_args_formatting():
    assert tc.netem_args(LinkShape(delay_ms=0.5, jitter_ms=0.25, loss=0.0005)) == [
        "delay", "0.5ms", "0.25ms", "loss", "0.05%"]
    assert tc.netem_args(LinkShape(loss=0.2)) == ["loss", "20%"]
    assert tc.netem_args(LinkShape(rate_bps=5)) == []


def test_clear_and_partition_commands():
    assert lines(tc.clear_commands("eth0")) == ["tc qdisc del dev eth0 root"]
    assert lines(tc.partition_commands(["10.0.0.9", "10.0.0.10"])) == [
        "iptables -w -I INPUT -s 10.0.0.9/32 -j DROP",
        "iptables -w -I OUTPUT -d 10.0.0.9/32 -j DROP",
        "iptables -w -I INPUT -s 10.0.0.10/32 -j DROP",
        "iptables -w -I OUTPUT -d 10.0.0.10/32 -j DROP",
    ]
    assert lines(tc.partition_commands(["10.0.0.9"], add=False)) == [
        "iptables -w -D INPUT -s 10.0.0.9/32 -j DROP",
        "iptables -w -D OUTPUT -d 10.0.0.9/32 -j DROP",
    ]


def test_probe_result_shape():
    probe = tc.probe_kernel()
    assert probe.netem in (True, False, None)
    assert probe.htb in (True, False, None)
    assert probe.tbf in (True, False, None)
    assert probe.method in ("netns", "config", "none")
    assert probe.detail


def test_probe_from_kernel_config(tmp_path):
    cfg = tmp_path / "config.gz"
    cfg.write_bytes(gzip.compress(b"CONFIG_NET_SCH_HTB=y\n# CONFIG_NET_SCH_NETEM is not set\nCONFIG_NET_SCH_TBF=m\n"))
    probe = tc._probe_config(cfg)
    assert (probe.netem, probe.htb, probe.tbf, probe.method) == (False, True, True, "config")
    assert "unset" in probe.detail
    cfg.write_bytes(gzip.compress(b"CONFIG_NET_SCH_HTB=y\nCONFIG_NET_SCH_NETEM=m\n"))
    assert tc._probe_config(cfg).netem is True
    missing = tc._probe_config(tmp_path / "nope.gz")
    assert missing.netem is None and missing.method == "none"
