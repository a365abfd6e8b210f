"""`testbed down` when Docker cannot be asked, through the console script:
a daemon that accepts connections but never answers (a stuck Docker 20.10,
moby/moby#46661) or no daemon at all. A testbed whose record names Docker
keeps its record and `down` exits 1 naming what was not checked, instead of
claiming success; a host with no daemon and nothing recorded on Docker has
nothing to clean up (exit 0); the host's side (own bridge, rules) goes all
the same. No Docker is needed: DOCKER_HOST points at a socket of the test's
own. The deadlock proper (a daemon that answers, then leaves one call
unanswered for the SDK's 120 s) is checked on the cleanup function itself."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests.exceptions

from orchestrator.host import iptables

from orchestrator.backends.docker import own_bridge
from orchestrator.backends.docker.network import host_routes
from orchestrator.records.state import StateStore

TESTBED = str(Path(sys.executable).with_name("testbed"))
PING_BOUND_S = 60  # a stuck daemon is given up on in seconds, not the SDK's 120 s per call


@pytest.fixture
def mute_daemon(tmp_path):
    """A unix socket that accepts every connection and never answers."""
    path = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"unix://{path}"
    server.close()
    for conn in accepted:
        conn.close()


def env_for(tmp_path: Path, docker_host: str) -> dict[str, str]:
    return {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state"), "DOCKER_HOST": docker_host}


def record_docker_testbed(tmp_path: Path, name: str) -> StateStore:
    store = StateStore(tmp_path / "state")
    store.create({"name": name, "backend": "docker", "status": "up", "run_dir": str(tmp_path / "run"), "nodes": {}})
    return store


def down(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    done = subprocess.run([TESTBED, "down", *args], env=env, capture_output=True, text=True, timeout=300)
    return done, time.monotonic() - t0


def test_a_stuck_daemon_keeps_the_docker_record_and_down_exits_1(tmp_path, mute_daemon):
    store = record_docker_testbed(tmp_path, "tb1")
    done, took = down(env_for(tmp_path, mute_daemon), "tb1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not answer" in done.stderr and "restart docker" in done.stderr
    assert "tb1" in done.stderr and "Traceback" not in done.stderr
    assert store.exists("tb1"), "the record must stay so that a later `down` retries"
    assert took < PING_BOUND_S


def test_down_all_with_a_stuck_daemon_says_docker_was_not_checked(tmp_path, mute_daemon):
    done, took = down(env_for(tmp_path, mute_daemon), "--all")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not answer" in done.stderr and "every testbed" in done.stderr
    assert "Traceback" not in done.stderr
    assert took < PING_BOUND_S


def test_no_daemon_keeps_the_docker_record_and_down_exits_1(tmp_path):
    store = record_docker_testbed(tmp_path, "tb2")
    done, _ = down(env_for(tmp_path, f"unix://{tmp_path}/no-such.sock"), "tb2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no Docker daemon answers" in done.stderr and "tb2" in done.stderr
    assert "Traceback" not in done.stderr
    assert store.exists("tb2")


def test_no_daemon_and_nothing_recorded_on_docker_is_nothing_to_clean(tmp_path):
    done, _ = down(env_for(tmp_path, f"unix://{tmp_path}/no-such.sock"), "--all")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "down: every testbed" in done.stdout


@pytest.mark.skipif(own_bridge.unavailable() is not None, reason=f"{own_bridge.unavailable()}: no own bridge here")
def test_without_a_daemon_the_hosts_side_is_removed_all_the_same(tmp_path):
    """The own bridge and its rules need no Docker to go: they go, and only
    what Docker holds is reported as not checked."""
    store = record_docker_testbed(tmp_path, "tb4")
    tag = iptables.tag_of("tb4", str((tmp_path / "state").resolve()))
    taken = host_routes()
    subnet = next(s for s in ipaddress.IPv4Network("10.232.0.0/16").subnets(new_prefix=24)
                  if not any(s.overlaps(t) for t in taken))
    bridge = own_bridge.create(tag, lambda: [subnet])
    try:
        assert any(rule.tag == tag for rule in iptables.our_rules())
        done, _ = down(env_for(tmp_path, f"unix://{tmp_path}/no-such.sock"), "tb4")
        assert done.returncode == 1, done.stdout + done.stderr
        assert not Path(f"/sys/class/net/{bridge.name}").exists()
        assert not any(rule.tag == tag for rule in iptables.our_rules())
        assert "everything Docker holds for testbed tb4" in done.stderr and store.exists("tb4")
    finally:
        own_bridge.remove(bridge.name, tag)


class HangingNetworks:
    """A client of a deadlocked daemon: the container listing answers, the
    network listing times out (the SDK's requests timeout), as moby/moby#46661
    left Docker 20.10 here."""

    def __init__(self, error: Exception) -> None:
        self.error, self.closed = error, False
        self.containers = type("Containers", (), {"list": staticmethod(lambda **kw: [])})()
        self.networks = type("Networks", (), {"list": staticmethod(self._hang)})()

    def _hang(self, **kw):
        raise self.error

    def close(self) -> None:
        self.closed = True


def test_a_call_the_daemon_never_answers_ends_the_cleanup_as_teardown_incomplete(monkeypatch, tmp_path):
    from orchestrator.backends.docker import teardown as docker_teardown
    from orchestrator.errors import TeardownIncomplete

    timeout = requests.exceptions.ReadTimeout("UnixHTTPConnectionPool(host='localhost'): Read timed out.")
    client = HangingNetworks(timeout)
    monkeypatch.setattr(docker_teardown, "docker_client", lambda: client)
    with pytest.raises(TeardownIncomplete) as caught:
        docker_teardown.cleanup(docker_teardown.Scope("tb6", str(tmp_path)), recorded=True)
    (line,) = caught.value.left
    assert "answered, then did not answer" in line and "systemctl restart docker, then testbed down tb6" in line
    assert client.closed
    other = HangingNetworks(ValueError("a bug, not the daemon"))
    monkeypatch.setattr(docker_teardown, "docker_client", lambda: other)
    with pytest.raises(ValueError):
        docker_teardown.cleanup(docker_teardown.Scope("tb6", str(tmp_path)), recorded=True)
