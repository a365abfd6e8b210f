"""A testbed's own bridge (orchestrator/backends/docker/own_bridge.py), on real network
namespaces where the host gives root: two namespaces wired to it reach each
other and the host, cutting one off (its veth pair deleted) stops that and
wiring it again restores it, nothing is forwarded between the bridge and
the rest of the host, and removing the bridge leaves no interface and no
rule. Plus the parts that need no root: names, and what a teardown admits."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.host import iptables

from orchestrator.backends.docker import own_bridge
from orchestrator.backends.docker.network import host_routes
from orchestrator.errors import TestbedError


def test_interface_names_fit_the_kernels_fifteen_characters():
    tag = iptables.tag_of("a-very-long-testbed-name-" + "x" * 38, "/some/state/dir")
    assert len(own_bridge.bridge_name(tag)) <= 15
    names = {own_bridge.veth_name(tag, f"n{i}") for i in range(1000)}
    assert len(names) == 1000 and all(len(n) <= 15 for n in names)
    assert own_bridge.bridge_name(tag) != own_bridge.bridge_name(iptables.tag_of("a", "/some/state/dir"))


def test_teardown_admits_bridges_by_testbed_and_state(monkeypatch, tmp_path):
    a, b = iptables.tag_of("a", "/s1"), iptables.tag_of("b", "/s2")
    for name, alias in (("gtb1", f"gossip-testbed {a}"), ("gtb2", f"gossip-testbed {b}"),
                        ("br-x", "someone else's"), ("eth0", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ifalias").write_text(alias + "\n")
    monkeypatch.setattr(own_bridge, "SYS_NET", tmp_path)
    assert own_bridge.admitted("a", "/s1") == [("gtb1", a)]
    assert own_bridge.admitted(None, "/s2") == [("gtb2", b)]
    assert own_bridge.admitted(None, None) == [("gtb1", a), ("gtb2", b)]
    assert own_bridge.admitted("a", "/s2") == []


def test_a_bad_network_kind_is_one_error_naming_the_variable_and_starts_nothing(tmp_path):
    """The installed CLI, as a user runs it: exit 2, the variable and the
    kinds named, no traceback, no testbed recorded."""
    state = tmp_path / "state"
    env = {**os.environ, "TESTBED_STATE_DIR": str(state), "TESTBED_DOCKER_NETWORK": "bogus"}
    quick = Path(__file__).resolve().parents[1] / "topologies" / "quick.yaml"
    out = subprocess.run([str(Path(sys.executable).parent / "testbed"), "up", str(quick), "--backend", "docker",
                          "--name", "bogus", "--out", str(tmp_path / "run")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "$TESTBED_DOCKER_NETWORK: 'bogus' is not one of own-bridge, docker-network" in out.stderr
    assert "Traceback" not in out.stderr
    assert not list(state.glob("testbeds/*")) and own_bridge.admitted("bogus", None) == []


needs_root = pytest.mark.skipif(
    own_bridge.unavailable() is not None or shutil.which("unshare") is None or shutil.which("ping") is None,
    reason=f"{own_bridge.unavailable() or 'unshare and ping'} needed to wire real namespaces",
)


def _in(pid: int, *argv: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", "-t", str(pid), "-n", "--", *argv], capture_output=True, text=True,
                          timeout=timeout)


def _pings(pid: int, address: str) -> bool:
    return _in(pid, "ping", "-c", "1", "-W", "1", address).returncode == 0


@pytest.fixture
def namespaces() -> Iterator[list[int]]:
    """Three processes, each in a network namespace of its own."""
    procs = [subprocess.Popen(["unshare", "--net", "sleep", "300"]) for _ in range(3)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture
def tag() -> Iterator[str]:
    tag = iptables.tag_of(f"ownbr-{uuid.uuid4().hex[:6]}", "/test/state")
    yield tag
    own_bridge.remove(own_bridge.bridge_name(tag), tag)


def _free_subnets() -> list[ipaddress.IPv4Network]:
    taken = host_routes()
    return [s for s in ipaddress.IPv4Network("10.231.0.0/16").subnets(new_prefix=24)
            if not any(s.overlaps(t) for t in taken)][:2]


@needs_root
def test_wired_namespaces_reach_each_other_and_the_host_and_nothing_else(namespaces, tag):
    a, b, outsider = namespaces
    first, second = _free_subnets()
    bridge = own_bridge.create(tag, lambda: [first])
    assert own_bridge.lookup(tag) == bridge
    assert (own_bridge.bridge_name(tag), tag) in own_bridge.found()
    assert sorted(r.spec[0] for r in iptables.admitted(iptables.BRIDGE, tag.rpartition(":")[0], None)) == [
        "FORWARD"] * 3
    hosts = list(first.hosts())
    ip_a, ip_b = str(hosts[1]), str(hosts[2])
    own_bridge.wire(bridge, own_bridge.veth_name(tag, "a"), a, ip_a)
    own_bridge.wire(bridge, own_bridge.veth_name(tag, "b"), b, ip_b)
    assert _pings(a, ip_b) and _pings(b, ip_a)
    assert _pings(a, bridge.gateway)
    assert subprocess.run(["ping", "-c", "1", "-W", "1", ip_b], capture_output=True).returncode == 0

    # another bridge on the host (a second testbed): nothing is forwarded between them
    other_tag = iptables.tag_of(tag.rpartition(":")[0] + "-other", "/test/state")
    other = own_bridge.create(other_tag, lambda: [second])
    try:
        ip_out = str(list(second.hosts())[1])
        own_bridge.wire(other, own_bridge.veth_name(other_tag, "x"), outsider, ip_out)
        assert _pings(outsider, other.gateway)
        assert not _pings(a, ip_out) and not _pings(outsider, ip_a)
    finally:
        assert own_bridge.remove(other.name, other.tag) == []

    # cut off: both ends of the pair go; wired again: back with the same address
    veth_a = own_bridge.veth_name(tag, "a")
    own_bridge.unwire(veth_a)
    assert not own_bridge.wired(veth_a) and "eth0" not in _in(a, "ip", "link").stdout
    assert not _pings(b, ip_a)
    own_bridge.wire(bridge, veth_a, a, ip_a)
    assert own_bridge.wired(veth_a) and _pings(b, ip_a)  # at once: the same MAC, so b's neighbour entry holds
    assert own_bridge.mac_of(ip_a) in _in(a, "ip", "link", "show", "eth0").stdout

    with pytest.raises(TestbedError, match="already exists"):
        own_bridge.create(tag, lambda: [first])
    assert own_bridge.remove(bridge.name, bridge.tag) == []
    assert own_bridge.lookup(tag) is None and not os.path.exists(f"/sys/class/net/{bridge.name}")
    assert iptables.admitted(None, tag.rpartition(":")[0], None) == []
    assert not _pings(a, ip_b)


@needs_root
def test_a_bridge_with_no_free_subnet_is_an_error_that_leaves_nothing(tag):
    with pytest.raises(TestbedError, match="no free subnet"):
        own_bridge.create(tag, lambda: [])
    testbed = tag.rpartition(":")[0]
    assert own_bridge.lookup(tag) is None and own_bridge.admitted(testbed, None) == []
    assert iptables.admitted(None, testbed, None) == []
