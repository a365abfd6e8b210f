"""The Docker backend's plumbing with a stand-in router (a TCP sink): labels,
addresses, churn verbs, partitions, kernel rate shaping, cleanup after a
crash, two testbeds side by side, on either kind of testbed network (an own
bridge, the default as root, and a Docker network). The real routers are in
test_docker_routers.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from node.config import LinkShape
from orchestrator.backends.api import BackendContext
from orchestrator.backends.docker import own_bridge
from orchestrator.dockerapi.names import LABEL_IP, LABEL_NODE, LABEL_RUN, LABEL_TESTBED
from orchestrator.backends.docker.wiring import DOCKER_NETWORK, OWN_BRIDGE
from orchestrator.records.state import StateStore
from orchestrator.shaping import delayline
from tests.docker_fixtures import (  # noqa: F401 - fixtures
    SEND,
    SINK_ENTRYPOINT,
    docker_backends,
    needs_docker,
    needs_root,
    node_image,
    sink_config,
    tcp_reachable,
    unique_testbed,
    wait_for,
)

pytestmark = [pytest.mark.docker, needs_docker]
# Both kinds of network where the host can make both (an own bridge needs root).
NETWORKS = [DOCKER_NETWORK, pytest.param(OWN_BRIDGE, marks=pytest.mark.skipif(
    own_bridge.unavailable() is not None, reason=f"no own bridge here: {own_bridge.unavailable()}"))]


def _docker_ls(kind: str, testbed: str) -> list[str]:
    cmd = ["docker", kind, "ls", "-q", "--filter", f"label={LABEL_TESTBED}={testbed}"]
    if kind == "container":
        cmd.insert(3, "-a")
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()


def _send(backend, src: str, dst: str, nbytes: int, timeout: float = 20) -> tuple[int, float] | None:
    container = backend._container(src)
    res = container.exec_run(
        ["python3", "-c", SEND, backend.ips[dst], "9000", str(nbytes), str(timeout)])
    words = res.output.decode().split()
    if not words or words[0] == "error":
        return None
    return int(words[0]), float(words[1])


def _networks_of(backend) -> list[str]:
    """The testbed's networks left on the host: Docker networks by label, own bridges by ifalias."""
    return _docker_ls("network", backend.testbed) + [name for name, _ in own_bridge.admitted(backend.testbed, None)]


def _address_of(backend, node: str) -> str:
    """A running container's address, as the host's network says."""
    container = backend._container(node)
    if backend.wiring.kind == DOCKER_NETWORK:
        return container.attrs["NetworkSettings"]["Networks"][backend.network_name]["IPAddress"]
    pid = str(container.attrs["State"]["Pid"])
    shown = subprocess.run(["nsenter", "-t", pid, "-n", "ip", "-4", "-o", "address", "show", "eth0"],
                           capture_output=True, text=True, check=True).stdout.split()
    return shown[shown.index("inet") + 1].split("/")[0]


def _up(backend, nodes, peers=None):
    addresses = backend.prepare(nodes)
    for node in nodes:
        backend.start(sink_config(backend, node, addresses))
    for node in nodes:
        assert wait_for(lambda n=node: tcp_reachable(backend.ips[n], 9000)), f"{node} never listened"
    return addresses


def test_docker_available_answers():
    from orchestrator.backends.docker.backend import docker_available

    ok, why = docker_available()
    assert ok and why.startswith("Docker ")


@pytest.mark.parametrize("network", NETWORKS)
def test_lifecycle_labels_addresses_and_churn(docker_backends, network):
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT, network=network)
    nodes = ["n0", "n1", "n2"]
    addresses = _up(backend, nodes)

    # Static, distinct addresses on the testbed's subnet, known before start.
    ips = [addresses[n].host for n in nodes]
    assert len(set(ips)) == 3 and all(a.port == 9000 and a.control_port == 4002 for a in addresses.values())
    import ipaddress

    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(backend.subnet) for ip in ips)

    # Labels on every container and the network; configs under run_dir with container paths.
    client = backend._client
    for node in nodes:
        c = backend._container(node)
        assert c.labels[LABEL_TESTBED] == backend.testbed
        assert c.labels[LABEL_RUN] == backend.run_id
        assert c.labels[LABEL_NODE] == node
        hc = c.attrs["HostConfig"]
        assert not hc["Privileged"] and hc["CapDrop"] == ["ALL"] and not hc.get("CapAdd")
        assert hc["Memory"] == 256 * 1024 * 1024
        assert c.labels[LABEL_IP] == _address_of(backend, node) == addresses[node].host
        cfg = json.loads((backend.run_dir / "nodes" / node / "config.json").read_text())
        assert cfg["trace_path"] == "/node/trace.pb"
    if network == DOCKER_NETWORK:
        assert client.networks.get(backend.network_name).attrs["Labels"][LABEL_TESTBED] == backend.testbed
    else:  # no Docker network at all; its own bridge, found by its alias
        assert _docker_ls("network", backend.testbed) == [] and _networks_of(backend) == [backend.wiring.bridge]
        # no Docker sandbox (docker_wiring: none of Docker's network locks at exit); names from our hosts file
        first = backend._container("n0")
        assert first.attrs["Config"]["NetworkDisabled"] and not first.attrs["NetworkSettings"]["SandboxID"]
        hosts = first.exec_run(["cat", "/etc/hosts"]).output.decode().splitlines()
        assert [f"{ip}\tnode{i}" for i, ip in enumerate(ips)] == hosts[1:]
        # a resolver configuration with a nameserver (py-libp2p exits at import without one)
        resolv = first.exec_run(["cat", "/etc/resolv.conf"]).output.decode().splitlines()
        assert "nameserver 127.0.0.1" in resolv
        assert backend.manifest_facts()["network"]["kind"] == OWN_BRIDGE

    # kill -> start
    backend.kill("n0")
    assert not backend.is_running("n0") and not tcp_reachable(ips[0], 9000)
    backend.start(sink_config(backend, "n0", addresses))
    assert wait_for(lambda: tcp_reachable(ips[0], 9000))

    # stop -> start (graceful)
    backend.stop("n1")
    assert backend.status("n1") == "exited"
    backend.start(sink_config(backend, "n1", addresses))
    assert wait_for(lambda: tcp_reachable(ips[1], 9000))
    assert _address_of(backend, "n1") == ips[1]

    # pause: still "running" for the backend, but frozen
    backend.pause("n2")
    assert backend.is_running("n2") and backend.status("n2") == "paused"
    assert _send(backend, "n0", "n2", 10, timeout=1.5) is None
    backend.resume("n2")
    assert wait_for(lambda: _send(backend, "n0", "n2", 10) is not None)

    # full partition: network disconnect, reconnect with the same IP
    backend.disconnect("n2")
    assert not tcp_reachable(ips[2], 9000, timeout=0.5)
    assert backend.is_running("n2")
    backend.reconnect("n2")
    assert wait_for(lambda: tcp_reachable(ips[2], 9000))

    backend.destroy()  # then the one removal, as the controller does
    type(backend).cleanup(backend.testbed, backend.store)
    assert _docker_ls("container", backend.testbed) == []
    assert _networks_of(backend) == []
    assert backend.manifest_facts()["network"]["kind"] == network  # the final manifest still names it
    # destroy keeps the run directory
    assert (backend.run_dir / "nodes" / "n0" / "config.json").exists()


@pytest.mark.parametrize("network", NETWORKS)
def test_stopping_many_gives_every_router_sigterm_and_waits_for_docker(docker_backends, network, monkeypatch):
    """All stopped in one call (an own bridge: SIGTERM to each init from the
    host; a Docker network: held inits, endpoints one at a time): each router
    dies of the SIGTERM (docker-init exits 128 + 15), none needed SIGKILL,
    and Docker lists every container as exited when the call returns."""
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT, network=network)
    nodes = ["a", "b", "c", "d"]
    _up(backend, nodes)
    if network == OWN_BRIDGE:  # no kill call through Docker: the host signals each init itself
        from orchestrator.backends.docker import teardown as docker_teardown

        monkeypatch.setattr(docker_teardown, "_signal", lambda *a: pytest.fail(f"a kill through Docker: {a[1:]}"))
    assert backend.stop_many(nodes) == {}
    for node in nodes:
        state = backend._container(node).attrs["State"]
        assert (state["Status"], state["ExitCode"]) == ("exited", 143), (node, state)


@needs_root
def test_partial_partition_with_iptables(docker_backends):
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT)
    _up(backend, ["a", "b", "c"])
    assert _send(backend, "a", "b", 100)[0] == 100
    backend.disconnect("a", ["b"])
    assert _send(backend, "a", "b", 100, timeout=1) is None  # a -> b cut
    assert _send(backend, "b", "a", 100, timeout=1) is None  # and b -> a
    assert _send(backend, "a", "c", 100)[0] == 100  # a -> c fine
    # healed from another process (a later CLI call): stateless
    fresh = type(backend)(BackendContext(backend.testbed, backend.run_dir, backend.store, options={"image": backend.image}))
    fresh.reconnect("a", ["b"])
    assert _send(backend, "a", "b", 100)[0] == 100
    # a restarted node comes back un-partitioned (the controller's model)
    backend.disconnect("a", ["c"])
    assert _send(backend, "a", "c", 100, timeout=1) is None
    backend.stop("a")
    backend.start(sink_config(backend, "a", {n: backend.address(n) for n in "abc"}))
    assert wait_for(lambda: tcp_reachable(backend.ips["a"], 9000))
    assert _send(backend, "a", "c", 100)[0] == 100


@pytest.mark.parametrize("network", NETWORKS)
def test_fresh_process_churn_and_restart_while_disconnected(docker_backends, network):
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT, network=network)
    _up(backend, ["a", "b"])
    ip = backend.ips["a"]
    fresh = type(backend)(BackendContext(backend.testbed, backend.run_dir, backend.store))  # knows nothing
    fresh.disconnect("a")
    assert not tcp_reachable(ip, 9000, timeout=0.5)
    fresh.kill("a")
    # started again while disconnected: it comes back on the network, same IP
    again = type(backend)(BackendContext(backend.testbed, backend.run_dir, backend.store))
    again.start(sink_config(backend, "a", {n: backend.address(n) for n in "ab"}))
    assert again.ips["a"] == ip
    assert wait_for(lambda: tcp_reachable(ip, 9000))


@needs_root
def test_kernel_rate_limit_slows_a_transfer(docker_backends):
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT)
    _up(backend, ["a", "b", "c"])
    nbytes = 250_000  # 2 s at 1 mbit/s
    fast = _send(backend, "a", "b", nbytes)
    assert fast is not None and fast[1] < 0.5

    caps = backend.shaping_capabilities()
    assert caps.kernel_rate
    cmds = backend.apply_kernel_shaping("a", {"b": LinkShape(delay_ms=20, rate_bps=1_000_000)}, None)
    assert any("htb" in c for c in cmds)
    shown = backend.netns.qdisc_show("a")
    assert "qdisc htb 1: root" in shown and "class htb 1:10" in shown and "rate 1Mbit" in shown

    slow = _send(backend, "a", "b", nbytes, timeout=30)
    assert slow is not None and slow[0] == nbytes
    assert 1.4 < slow[1] < 5.0, slow
    other = _send(backend, "a", "c", nbytes)  # c is not limited
    assert other is not None and other[1] < 0.5

    # An uplink limit alone is a tbf at the root; it survives a restart.
    backend.apply_kernel_shaping("a", {}, 2_000_000)
    backend.kill("a")
    backend.start(sink_config(backend, "a", {n: backend.address(n) for n in "abc"}))
    assert wait_for(lambda: tcp_reachable(backend.ips["a"], 9000))
    assert "tbf" in backend.netns.qdisc_show("a")
    limited = _send(backend, "a", "c", nbytes, timeout=30)
    assert limited is not None and 0.7 < limited[1] < 3.0, limited


@needs_root
def test_kernel_delay_reaches_the_frames_between_containers(docker_backends):
    """netem where the kernel has it, else the host's delay line: a's frames
    to b wait 30 ms (a request-reply crosses a -> b twice: SYN, then data),
    c's do not; ending the testbed ends the delay line and keeps its figures."""
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT)
    caps = backend.shaping_capabilities()
    if not caps.kernel_delay:
        pytest.skip(f"no kernel delay on this host: {caps.detail}")
    _up(backend, ["a", "b", "c"])
    backend.apply_kernel_shaping("a", {"b": LinkShape(delay_ms=30), "*": LinkShape(delay_ms=0)}, None)
    slow = [_send(backend, "a", "b", 1) for _ in range(3)]
    fast = _send(backend, "a", "c", 1)
    assert all(s is not None and 0.06 <= s[1] < 0.2 for s in slow), slow
    assert fast is not None and fast[1] < 0.03, fast
    backend.destroy()
    type(backend).cleanup(backend.testbed, backend.store)
    facts = backend.netns.host_network_facts()
    assert facts["neighbour_table_overflows"] == 0
    if caps.path == "delayline+htb":
        # The only warning it may give is the one its own figures call for: it was
        # running at the end and the kernel queued every packet, but on a loaded host
        # a packet can leave late, and then the run must say so (2.0 ms at p99 in CI).
        stats = facts["delay_line"]
        assert stats["enobufs"] == 0
        late_p99_us = stats["late_us"]["p99"]
        expected = [] if late_p99_us <= delayline.LATE_WARN_US else [delayline.warning(stats, True)]
        assert backend.shaping_warnings() == expected, stats
        assert stats["shaped"] >= 6 and not stats["running"]
        assert stats["scheduling"] == "SCHED_FIFO 20"
    else:
        assert backend.shaping_warnings() == []
    assert _docker_ls("container", backend.testbed) == []


def test_cleanup_after_a_crash_from_a_fresh_process(docker_backends):
    backend = docker_backends(entrypoint=SINK_ENTRYPOINT)
    _up(backend, ["x", "y"])
    name = backend.testbed
    del backend  # the Python objects are gone, as if the CLI was killed
    assert len(_docker_ls("container", name)) == 2
    code = (
        "import json,sys; from orchestrator.backends.docker.backend import DockerBackend; "
        "from orchestrator.records.state import StateStore; "
        f"print(json.dumps(DockerBackend.cleanup({name!r}, StateStore())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = json.loads(out.stdout)
    assert sum("container" in line for line in lines) == 2
    assert any(("network" in line or "bridge" in line) and name in line for line in lines)
    assert _docker_ls("container", name) == [] and _docker_ls("network", name) == []
    assert own_bridge.admitted(name, None) == []
    # idempotent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_two_testbeds_side_by_side(docker_backends):
    first = docker_backends(unique_testbed("left"), entrypoint=SINK_ENTRYPOINT)
    second = docker_backends(unique_testbed("right"), entrypoint=SINK_ENTRYPOINT)
    _up(first, ["n0", "n1"])
    _up(second, ["n0", "n1"])  # same node names, other testbed
    assert first.subnet != second.subnet
    import ipaddress

    assert not ipaddress.ip_network(first.subnet).overlaps(ipaddress.ip_network(second.subnet))
    type(first).cleanup(first.testbed, first.store)
    assert _docker_ls("container", first.testbed) == []
    assert len(_docker_ls("container", second.testbed)) == 2
    assert all(wait_for(lambda ip=ip: tcp_reachable(ip, 9000)) for ip in second.ips.values())


def test_prepare_refuses_a_live_testbed_of_the_same_name(docker_backends):
    from orchestrator.errors import TestbedError

    name = unique_testbed()
    first = docker_backends(name, entrypoint=SINK_ENTRYPOINT)
    first.prepare(["n0"])
    with pytest.raises(TestbedError, match="already exists"):
        docker_backends(name, entrypoint=SINK_ENTRYPOINT).prepare(["n0"])


def test_unreachable_daemon_is_one_clear_error(monkeypatch, tmp_path):
    from orchestrator.backends.docker.backend import DockerBackend
    from orchestrator.dockerapi.client import docker_available
    from orchestrator.errors import BackendUnavailable

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    ok, why = docker_available()
    assert not ok and "/nonexistent/docker.sock" in why
    with pytest.raises(BackendUnavailable, match="no Docker daemon"):
        DockerBackend(BackendContext("x", Path("/tmp/x"), StateStore(tmp_path)))


def test_capabilities_shape():
    from orchestrator.backends.docker.netns import kernel_capabilities as _capabilities

    caps = _capabilities()
    assert caps.path in ("netem", "delayline+htb", "userspace+htb", "userspace")
    assert caps.kernel_delay == (caps.path in ("netem", "delayline+htb"))
    assert caps.detail


def test_cleanup_all_is_scoped_to_the_state_dir(docker_backends, tmp_path, monkeypatch):
    from orchestrator.backends.docker.backend import DockerBackend

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state-a"))
    mine = docker_backends(unique_testbed("mine"), entrypoint=SINK_ENTRYPOINT)
    mine.prepare(["n0"])
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state-b"))
    other = docker_backends(unique_testbed("other"), entrypoint=SINK_ENTRYPOINT)
    other.prepare(["n0"])
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state-a"))
    lines = DockerBackend.cleanup(None, StateStore())  # `testbed down --all` under state-a
    assert any(mine.testbed in line for line in lines)
    assert not any(other.testbed in line for line in lines)
    assert _networks_of(other) != []
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state-b"))
    assert any(other.testbed in line for line in DockerBackend.cleanup(None, StateStore()))
    assert _networks_of(mine) == _networks_of(other) == []
