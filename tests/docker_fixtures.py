"""Shared by the Docker tests: skip with the reason when there is no daemon,
build the router image once per session, hand out backends on unique testbed
names and clean them up whatever happens.

Import the fixtures into a test module with
`from tests.docker_fixtures import *  # noqa: F403`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.dockerapi.client import docker_available

_OK, _WHY = docker_available()
needs_docker = pytest.mark.skipif(not _OK, reason=f"no Docker daemon: {_WHY}")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="nsenter/tc in container namespaces needs root")

# A stand-in router for plumbing tests: listens on the config's listen port,
# reads each connection to EOF and answers with the byte count. argv: config, log.
SINK = r"""
import json, socket, sys, threading
cfg = json.load(open(sys.argv[1]))
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", cfg["listen_port"])); srv.listen(64)
def serve(conn):
    n = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        n += len(chunk)
    conn.sendall(str(n).encode()); conn.close()
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

# Run inside a container with exec: send N bytes to ip:port, wait for the
# answer, print "<bytes> <seconds>" (or "error <why>").
SEND = r"""
import socket, sys, time
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    t = time.monotonic()
    s = socket.create_connection((ip, port), timeout=float(sys.argv[4]) if len(sys.argv) > 4 else 20)
    s.sendall(b"x" * n); s.shutdown(socket.SHUT_WR)
    got = s.recv(64)
    print(got.decode(), round(time.monotonic() - t, 3))
except Exception as e:
    print("error", type(e).__name__)
"""

SINK_ENTRYPOINT = ["python3", "-c", SINK]


def run_file_on_docker(path: Path, tmp: Path, *flags: str) -> Path:
    """`testbed run PATH --backend docker` (the testbed beside this
    interpreter, with a state directory of its own under `tmp`) into
    tmp/run, which it returns; the run must exit 0."""
    out = tmp / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp / "state")}
    proc = subprocess.run([str(Path(sys.executable).with_name("testbed")), "run", str(path), "--backend", "docker",
                           "--out", str(out), "--json", *flags], capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def unique_testbed(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tcp_reachable(ip: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout) as sock:
            sock.shutdown(socket.SHUT_WR)
            return True
    except OSError:
        return False


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


@pytest.fixture(scope="session")
def node_image() -> str:
    if not _OK:
        pytest.skip(f"no Docker daemon: {_WHY}")
    from orchestrator.images.router import ensure_image

    return ensure_image()


@pytest.fixture
def docker_backends(node_image: str, tmp_path: Path) -> Iterator:
    """make(nodes_or_None, **kw) -> DockerBackend; every testbed made is cleaned up."""
    from orchestrator.backends.api import BackendContext
    from orchestrator.backends.docker.backend import DockerBackend
    from orchestrator.records.state import StateStore

    made: list[tuple[str, str | None]] = []  # (testbed, the TESTBED_STATE_DIR it was made under)

    def make(name: str | None = None, **kw):
        name = name or unique_testbed()
        made.append((name, os.environ.get("TESTBED_STATE_DIR")))
        run_dir = tmp_path / f"{name}-{len(made)}"
        run_dir.mkdir()
        kw.setdefault("image", node_image)
        return DockerBackend(BackendContext(name, run_dir, StateStore(), options=kw))

    yield make
    saved = os.environ.get("TESTBED_STATE_DIR")
    try:
        for name, state in made:  # under the state directory it was made under: a test may have changed it since
            if state is None:
                os.environ.pop("TESTBED_STATE_DIR", None)
            else:
                os.environ["TESTBED_STATE_DIR"] = state
            DockerBackend.cleanup(name, StateStore())
    finally:
        if saved is None:
            os.environ.pop("TESTBED_STATE_DIR", None)
        else:
            os.environ["TESTBED_STATE_DIR"] = saved


def sink_config(backend, node: str, addresses, peers=()):
    """A floodsub node whose libp2p identity is its position in `addresses`."""
    from node.config import NodeConfig, PeerAddress
    from node.libp2p.identity import identity_for_index

    index = {name: i for i, name in enumerate(addresses)}
    pid = {name: identity_for_index(i).peer_id_b58 for name, i in index.items()}
    addr = addresses[node]
    return NodeConfig(
        name=node, index=index[node], router="floodsub", seed=1, listen_host=addr.host, listen_port=addr.port,
        control_host=addr.control_host, control_port=addr.control_port, token="tok",
        trace_path=str(backend.run_dir / "traces" / f"{node}.pb"),
        initial_peers=tuple(PeerAddress(p, addresses[p].host, addresses[p].port, pid[p]) for p in peers),
        peer_names={pid[p]: p for p in addresses if p != node},
    )
