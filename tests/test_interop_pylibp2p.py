"""Interop with py-libp2p 0.8.1: py-libp2p gossipsub hosts join a testbed of
our routers on the process backend, over noise+yamux and plaintext+yamux.

The hosts are the project's py-libp2p adapter (adapters/py-libp2p/adapter.py,
run by the virtualenv scripts/pylibp2p-venv.sh makes: py-libp2p needs
protobuf<7), started with a NodeConfig (--config) and a gossipsub-interop
script (--params) that dials our routers by node id, and driven through the
same control endpoint as our routers. Both sides sign and verify strictly
and use test-plans' first-8-bytes message ids. The test checks that messages
published on either side reach every subscriber on both sides, that GRAFT,
PRUNE, IHAVE and IWANT cross implementations (from our routers' traces), that
a host told DoPX sends peer exchange in its PRUNEs, and
that a py-libp2p host that leaves is dropped from our routers' mesh and peers.

Kept small for a shared 2-core machine: 4 routers and 2 hosts, with mesh
degrees chosen so that both sides GRAFT each other and gossip (IHAVE/IWANT)
carries part of the traffic.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest

from node.config import NodeConfig, PeerAddress
from node.engine.api import TraceType
from node.libp2p.identity import identity_for_index
from node.runtime.client import ControlClient
from node.trace.file import read_trace
from orchestrator.experiment.model import LinkParams, NodeSpec, ResolvedExperiment
from orchestrator.backends.api import BackendContext
from orchestrator.routers.nodeconfigs import build_configs
from orchestrator.backends.process.backend import ProcessBackend
from orchestrator.records.state import StateStore
from tests.pylibp2p_helpers import ADAPTER, PY, START_S, free_port, ndjson, pylibp2p_missing, shut_down, wait_for

TOKEN = "interop"
ROUTERS = 4
TOPIC = "t"
HEARTBEAT_NS = 300_000_000
# The routers are a ring. n1..n3 want 3 mesh peers but have 2 router
# neighbours, so they must GRAFT host A (index 4, dialling n1..n3), which wants
# at most 1 and PRUNEs the surplus. n0 is content with its 2 ring neighbours
# and host B (index 5, dialling only n0) wants no mesh at all: between n0 and
# B messages can only travel as IHAVE then IWANT, both ways.
RING = {"D": 3, "D_low": 3, "D_high": 4, "heartbeat_interval": 0.3}
CONTENT = {"D": 2, "D_low": 2, "D_high": 2, "heartbeat_interval": 0.3}


MISSING = pylibp2p_missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]


def _experiment() -> ResolvedExperiment:
    names = [f"n{i}" for i in range(ROUTERS)]
    nodes = tuple(NodeSpec(n, "default", "gossipsub", CONTENT if n == "n0" else RING, (TOPIC,), 100 + i)
                  for i, n in enumerate(names))
    edges = tuple((names[i], names[(i + 1) % ROUTERS]) for i in range(ROUTERS))
    return ResolvedExperiment(
        name="interop", source=__file__, seed=1, nodes=nodes, edges=edges, links={},
        default_link=LinkParams(latency_ms=0.0), publishes=(), churn=(), expectations=(), duration=1.0, linger=0.0,
        message_id="first-8-bytes",
    )


class PyHost:
    """One py-libp2p adapter process: a script that dials `dial` (our routers'
    configs), stdout (NDJSON) to a file, commands through its control endpoint."""

    def __init__(self, index: int, security: str, dial: list[NodeConfig], degree: int, run_dir: Path,
                 px: bool = False) -> None:
        self.peer_id = identity_for_index(index).peer_id
        cfg = NodeConfig(
            name=f"py{index}", router="py-libp2p", seed=index, listen_host="127.0.0.1", listen_port=free_port(),
            control_host="127.0.0.1", control_port=free_port(), token=TOKEN, trace_path="", index=index,
            topics=(TOPIC,), security=security, message_id="first-8-bytes",
            initial_peers=tuple(PeerAddress(c.name, c.listen_host, c.listen_port, c.identity.peer_id_b58) for c in dial),
            peer_names={c.identity.peer_id_b58: c.name for c in dial},
        )
        script = [{"type": "initGossipSub", "gossipSubParams": {"D": degree, "Dlo": degree, "Dhi": degree,
                                                                "HeartbeatInterval": HEARTBEAT_NS, "DoPX": px}},
                  {"type": "connect", "connectTo": [c.index for c in dial]}]
        (run_dir / f"{cfg.name}.config.json").write_text(cfg.to_json())
        (run_dir / f"{cfg.name}.params.json").write_text(json.dumps({"script": script}))
        self.stdout = run_dir / f"{cfg.name}.ndjson"
        self.proc = subprocess.Popen(
            [str(PY), str(ADAPTER), "--params", str(run_dir / f"{cfg.name}.params.json"),
             "--config", str(run_dir / f"{cfg.name}.config.json")],
            stdout=self.stdout.open("wb"), stderr=(run_dir / "node-logs" / f"{cfg.name}.log").open("wb"),
        )
        self.client = ControlClient(cfg.control_host, cfg.control_port, TOKEN, timeout=20)

    def delivered(self) -> set[bytes]:
        """Ids of the messages it received (first copies and duplicates alike)."""
        return {int(x["id"]).to_bytes(8, "big") for x in ndjson(self.stdout) if x["msg"] == "Received Message"}

    def publish(self, seq: int) -> bytes:
        return bytes.fromhex(self.client.call("publish", topic=TOPIC, size=64, seq=seq)["message_id"])

    def stop(self) -> None:
        shut_down(self.proc, self.client)


@pytest.mark.parametrize("security", ["noise", "plaintext"])
def test_pylibp2p_hosts_in_a_testbed_of_our_routers(tmp_path, monkeypatch, security):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    store = StateStore(tmp_path / "state")
    run_dir = tmp_path / "run"
    for sub in ("traces", "node-logs"):
        (run_dir / sub).mkdir(parents=True)
    backend = ProcessBackend(BackendContext(f"interop-{security}", run_dir, store))
    resolved = _experiment()
    names = [n.name for n in resolved.nodes]
    addresses = backend.prepare(names)
    configs = {
        name: dataclasses.replace(cfg, security=security)
        for name, cfg in build_configs(resolved, addresses, backend.shaping_capabilities(), TOKEN, run_dir).items()
    }
    hosts: list[PyHost] = []
    try:
        for cfg in configs.values():
            backend.start(cfg)
        clients = {n: ControlClient(c.control_host, c.control_port, TOKEN) for n, c in configs.items()}
        wait_for(lambda: all(c.try_call("status") for c in clients.values()), 20, "our routers")
        hosts = [
            PyHost(ROUTERS, security, [configs[n] for n in ("n1", "n2", "n3")], 1, run_dir, px=True),
            PyHost(ROUTERS + 1, security, [configs["n0"]], 0, run_dir),
        ]
        wait_for(lambda: all(h.client.try_call("status") for h in hosts), START_S, "the py-libp2p hosts")
        # Subscribed once connected, so that joining the topic GRAFTs our routers
        # (py-libp2p's join) before their GRAFTs fill host A's mesh.
        wait_for(lambda: len(hosts[0].client.call("status")["peers"]) == 3, 30, "host A's pubsub peers")
        for h in hosts:
            h.client.call("subscribe", topic=TOPIC)
        py_ids = {h.peer_id for h in hosts}
        py_labels = {identity_for_index(ROUTERS + i).peer_id_b58 for i in range(2)}

        def meshed() -> bool:
            statuses = [c.call("status") for c in clients.values()]
            return all(st["mesh"].get(TOPIC) for st in statuses) and bool(hosts[0].client.call("status")["mesh"].get(TOPIC))

        wait_for(meshed, 30, "every router and host A to have a mesh")
        assert py_labels <= {p for c in clients.values() for p in c.call("status")["peers"]}

        # Publish on both sides; every subscriber on both sides gets every message.
        ours: set[bytes] = set()
        own: dict[int, set[bytes]] = {0: set(), 1: set()}
        for k in range(3):
            ours.add(bytes.fromhex(clients["n1"].call("publish", topic=TOPIC, size=64, seq=k)["message_id"]))
            own[k % 2].add(hosts[k % 2].publish(100 + k))
            time.sleep(0.2)
        published = ours | own[0] | own[1]

        def everyone_has_everything() -> bool:
            py_ok = all(published - own[i] <= h.delivered() for i, h in enumerate(hosts))
            counts = {n: c.call("status")["counters"]["delivered"] for n, c in clients.items()}
            return py_ok and counts["n1"] >= 3 and all(v >= 6 for n, v in counts.items() if n != "n1")

        wait_for(everyone_has_everything, 30, "every message at every subscriber")

        # A host that disconnects is pruned here.
        hosts[0].stop()
        gone = identity_for_index(ROUTERS).peer_id_b58
        wait_for(lambda: all(gone not in c.call("status")["peers"]
                          and gone not in c.call("status")["mesh"].get(TOPIC, []) for c in clients.values()),
              10, "the disconnected host to leave every mesh")
    finally:
        for h in hosts:
            h.stop()
        for name in names:
            backend.stop(name)
        ProcessBackend.cleanup(None, store)

    control = {"graft": set(), "prune": set(), "ihave": set(), "iwant": set()}
    px_peers: set[bytes] = set()  # the peers host A's PRUNEs exchanged (its DoPX)
    delivered: dict[str, set[bytes]] = {}
    for name in names:
        delivered[name] = set()
        for ev in read_trace(run_dir / "traces" / f"{name}.pb"):
            if ev.type == TraceType.DELIVER_MESSAGE:
                delivered[name].add(ev.deliverMessage.messageID)
            for direction, field, peer in (("recv", "recvRPC", "receivedFrom"), ("send", "sendRPC", "sendTo")):
                if ev.type == (TraceType.RECV_RPC if direction == "recv" else TraceType.SEND_RPC):
                    rpc = getattr(ev, field)
                    if getattr(rpc, peer) in py_ids:
                        meta = rpc.meta.control
                        for kind in control:
                            if len(getattr(meta, kind)):
                                control[kind].add(direction)
                        if direction == "recv" and rpc.receivedFrom == identity_for_index(ROUTERS).peer_id:
                            px_peers |= {p for prune in meta.prune for p in prune.peers}
    for name in names:
        assert published - (set(ours) if name == "n1" else set()) <= delivered[name], name
    assert control["graft"] == {"send", "recv"}, control
    assert "recv" in control["prune"], control  # host A trimming its mesh
    # with DoPX, py-libp2p's PRUNEs carry its other topic peers: our routers
    routers = {identity_for_index(i).peer_id for i in range(1, ROUTERS)}
    assert px_peers and px_peers <= routers, px_peers
    assert control["ihave"] == control["iwant"] == {"send", "recv"}, control


def test_pylibp2p_joins_our_v12_router_at_its_own_version(tmp_path, monkeypatch):
    """Our gossipsub-v1.2 proposes /meshsub/1.2.0 first; py-libp2p 0.8.1 (as
    its adapter runs it) speaks 1.1.0 and 1.0.0, so the two settle on 1.1.0,
    as both sides record it, and messages cross both ways."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    store = StateStore(tmp_path / "state")
    run_dir = tmp_path / "run"
    for sub in ("traces", "node-logs"):
        (run_dir / sub).mkdir(parents=True)
    backend = ProcessBackend(BackendContext("interop-v12", run_dir, store))
    resolved = dataclasses.replace(_experiment(), nodes=(
        NodeSpec("n0", "default", "gossipsub-v1.2", {**RING, "D_out": 1, "D_score": 2}, (TOPIC,), 100),), edges=())
    configs = build_configs(resolved, backend.prepare(["n0"]), backend.shaping_capabilities(), TOKEN, run_dir)
    host = None
    try:
        backend.start(configs["n0"])
        client = ControlClient(configs["n0"].control_host, configs["n0"].control_port, TOKEN)
        wait_for(lambda: client.try_call("status"), 20, "our router")
        host = PyHost(1, "noise", [configs["n0"]], 1, run_dir)
        wait_for(lambda: host.client.try_call("status"), START_S, "the py-libp2p host")
        host.client.call("subscribe", topic=TOPIC)
        wait_for(lambda: client.call("status")["mesh"].get(TOPIC), 30, "our router to mesh the host")
        ours = bytes.fromhex(client.call("publish", topic=TOPIC, size=64, seq=1)["message_id"])
        theirs = host.publish(2)
        wait_for(lambda: ours in host.delivered() and client.call("status")["counters"]["delivered"] >= 1, 30,
                 "a message each way")
    finally:
        if host is not None:
            host.stop()
        backend.stop("n0")
        ProcessBackend.cleanup(None, store)
    py_id = identity_for_index(1).peer_id
    added = [ev.addPeer.proto for ev in read_trace(run_dir / "traces" / "n0.pb")
             if ev.type == TraceType.ADD_PEER and ev.addPeer.peerID == py_id]
    assert added == ["/meshsub/1.1.0"], added
    theirs_added = [x["protocol"] for x in ndjson(host.stdout) if x["msg"] == "Peer Added"]
    assert theirs_added == ["/meshsub/1.1.0"], theirs_added
    delivered = {ev.deliverMessage.messageID for ev in read_trace(run_dir / "traces" / "n0.pb")
                 if ev.type == TraceType.DELIVER_MESSAGE}
    assert theirs in delivered
