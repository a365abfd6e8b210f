"""Real routers in containers, driven through the Docker backend and each
node's control endpoint: 20 gossipsub nodes, kills, a graceful stop, a full
and a partial partition, restarts; the traces must show every message reaching
the subscribers that were up and connected."""

from __future__ import annotations

import time

import pytest

from node.config import NodeConfig, PeerAddress
from node.libp2p.identity import identity_for_index
from node.proto import trace_pb2
from node.runtime.client import ControlClient
from node.trace.file import read_trace
from tests.docker_fixtures import docker_backends, needs_docker, needs_root, node_image, wait_for  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_docker]

TOKEN = "test-token"
N = 20


def _configs(backend, addresses, nodes):
    configs = {}
    peer_ids = {node: identity_for_index(i).peer_id_b58 for i, node in enumerate(nodes)}
    for i, node in enumerate(nodes):
        dial = sorted({nodes[(i - k) % len(nodes)] for k in (1, 3, 7)} - {node})
        addr = addresses[node]
        configs[node] = NodeConfig(
            name=node, index=i, router="gossipsub", seed=100 + i,
            listen_host=addr.host, listen_port=addr.port,
            control_host=addr.control_host, control_port=addr.control_port, token=TOKEN,
            trace_path=str(backend.run_dir / "traces" / f"{node}.pb"),
            topics=("t",),
            initial_peers=tuple(PeerAddress(p, addresses[p].host, addresses[p].port, peer_ids[p]) for p in dial),
            peer_names={peer_ids[p]: p for p in nodes if p != node},
            params={"D": 4, "D_low": 3, "D_high": 6},
        )
    return configs


def _meshed(clients, nodes) -> bool:
    for node in nodes:
        status = clients[node].try_call("status", timeout=2)
        if not status or not status.get("mesh", {}).get("t"):
            return False
    return True


def _deliveries(run_dir, nodes) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {}
    for node in nodes:
        path = run_dir / "traces" / f"{node}.pb"
        ids = set()
        if path.exists():
            for ev in read_trace(path):
                if ev.type == trace_pb2.TraceEvent.DELIVER_MESSAGE:
                    ids.add(ev.deliverMessage.messageID.hex())
        got[node] = ids
    return got


@needs_root
def test_twenty_routers_survive_churn(docker_backends):
    backend = docker_backends()
    nodes = [f"n{i:02d}" for i in range(N)]
    addresses = backend.prepare(nodes)
    configs = _configs(backend, addresses, nodes)
    clients = {n: ControlClient(addresses[n].control_host, addresses[n].control_port, TOKEN) for n in nodes}
    backend.start_many(configs.values())
    assert wait_for(lambda: _meshed(clients, nodes), timeout=60, interval=0.5), "never meshed"

    def publish(node: str) -> str:
        return clients[node].call("publish", topic="t", size=200)["message_id"]

    m1 = publish("n00")
    time.sleep(1.5)

    # churn: two crashes, a graceful stop, a full partition, a partial partition
    backend.kill("n05")
    backend.kill("n06")
    backend.stop("n07")
    backend.disconnect("n08")
    backend.disconnect("n09", ["n00", "n01", "n02", "n03"])
    down = {"n05", "n06", "n07", "n08"}
    time.sleep(3)  # heartbeats repair the mesh around the holes
    m2 = publish("n01")
    time.sleep(2)

    # heal: restart the killed n05 and the stopped n07, reconnect n08 and n09
    backend.start(configs["n05"])
    backend.start(configs["n07"])
    backend.reconnect("n08")
    backend.reconnect("n09", ["n00", "n01", "n02", "n03"])
    back = [n for n in nodes if n != "n06"]
    assert wait_for(lambda: _meshed(clients, back), timeout=60, interval=0.5), "no mesh after healing"
    time.sleep(2)
    m3 = publish("n02")
    time.sleep(2)

    # graceful stops flush every trace; the killed n06 keeps what it had flushed
    for node in back:
        backend.stop(node)
    got = _deliveries(backend.run_dir, nodes)

    assert all(m1 in got[n] for n in nodes if n != "n00"), {n: m1 in got[n] for n in nodes}
    expected2 = [n for n in nodes if n not in down and n != "n01"]
    assert all(m2 in got[n] for n in expected2), {n: m2 in got[n] for n in expected2}
    expected3 = [n for n in back if n != "n02"]
    assert all(m3 in got[n] for n in expected3), {n: m3 in got[n] for n in expected3}
    assert m3 not in got["n06"]
    # a restarted node appends to its trace: n05 has messages from before its crash and after
    assert {m1, m3} <= got["n05"]
