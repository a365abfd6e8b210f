"""The py-libp2p adapter (adapters/py-libp2p) as the orchestrator runs it:
processes with --config (a NodeConfig) and --params (a gossipsub-interop
script), next to OUR routers, and its Docker image.

One ring, n0 - n1 - p2 - p3 - n0: n0, n1 are our gossipsub routers, p2, p3
py-libp2p adapters. Every node has two neighbours and D=Dlo=2, so every link is
a mesh link both ways, and a message reaches the far side of the ring twice
(the duplicate the contract's stdout must show). Our routers dial the
adapters (build_configs dials each edge from its lower name); p2 dials p3
through its script's connect.

The adapters run in .venv-pylibp2p (scripts/pylibp2p-venv.sh): skipped with
the reason where it is missing. Kept small for a shared 2-core machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from node.wire.codec import encode_frame
from node.engine.api import TraceType
from node.libp2p.identity import identity_for_index
from node.libp2p.connection import negotiate_outbound, upgrade
from node.runtime.client import ControlClient, ControlError
from node.trace.file import read_trace
from node.wire.rpc import workload_data
from orchestrator.backends.api import BackendContext
from orchestrator.experiment.model import LinkParams, NodeSpec, ResolvedExperiment
from orchestrator.routers.nodeconfigs import build_configs
from orchestrator.backends.process.backend import ProcessBackend
from orchestrator.records.state import StateStore
from tests.pylibp2p_helpers import ADAPTER_DIR, PY, START_S, ndjson, pylibp2p_missing, shut_down, wait_for

TOKEN = "pyadapt"
TOPIC = "t"
OURS = ("n0", "n1")
THEIRS = ("p2", "p3")
HEARTBEAT_NS = 300_000_000
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")

sys.path.insert(0, str(ADAPTER_DIR))
import contract  # noqa: E402 - stdlib only, so the project's tests can check it against node/
import script  # noqa: E402


MISSING = pylibp2p_missing()
needs_pylibp2p = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


# ---------------------------------------------------------------- pure rules


def test_contract_rules_match_the_project():
    for seq, size in ((0, 0), (7, 5), (31, 100), (2**40 + 3, 1000)):
        assert contract.workload_data(seq, size) == workload_data(seq, size)
    assert contract.ed25519_seed(5) == (5).to_bytes(4, "little") + bytes(28)
    assert contract.logged_id(contract.message_id(workload_data(31, 100))) == "31"
    assert RFC3339.match(contract.rfc3339_now())


def test_go_params_are_mapped_explicitly():
    p = script.router_params({"D": 3, "Dlo": 2, "Dhi": 4, "HeartbeatInterval": 700_000_000, "Dlazy": 9})
    assert p.gossipsub["degree"] == 3 and p.gossipsub["degree_low"] == 2 and p.gossipsub["degree_high"] == 4
    assert p.gossipsub["heartbeat_interval"] == 0.7
    assert p.gossipsub["heartbeat_initial_delay"] == 0.1  # go's default, not py-libp2p's
    assert p.gossipsub["gossip_history"] == 5 and p.gossipsub["gossip_window"] == 3
    assert p.gossipsub["prune_back_off"] == 60 and p.gossipsub["time_to_live"] == 60.0
    assert p.ignored == {"Dlazy": 9}  # py-libp2p 0.8.1 fixes it at 6
    assert p.gossipsub["do_px"] is False and script.router_params({"DoPX": True}).gossipsub["do_px"] is True
    assert script.router_params({}).gossipsub["heartbeat_interval"] == 1.0  # never py-libp2p's 120 s


def test_process_backend_command_names_the_fix(tmp_path, monkeypatch):
    import orchestrator.images.pylibp2p as image_pylibp2p
    from orchestrator.errors import BackendUnavailable

    monkeypatch.setattr(image_pylibp2p, "VENV", tmp_path / "absent")
    with pytest.raises(BackendUnavailable, match="scripts/pylibp2p-venv.sh") as caught:
        image_pylibp2p.pylibp2p_adapter_command()
    assert caught.value.exit_code == 3
    monkeypatch.setattr(image_pylibp2p, "VENV", PY.parent.parent)
    if not MISSING:
        assert image_pylibp2p.pylibp2p_adapter_command() == [str(PY), str(ADAPTER_DIR / "adapter.py")]


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_script_conditionals_and_order(tmp_path):
    doc = {"script": [
        {"type": "ifNodeIDEquals", "nodeID": 4, "instruction": {"type": "initGossipSub", "gossipSubParams": {"D": 4, "Dlo": 2}}},
        {"type": "ifNodeIDEquals", "nodeID": 3, "instruction": {"type": "initGossipSub", "gossipSubParams": {"D": 3, "Dlo": 2}}},
        {"type": "subscribeToTopic", "topicID": "a"},
        {"type": "ifNodeIDEquals", "nodeID": 3, "instruction": {
            "type": "ifNodeIDEquals", "nodeID": 3, "instruction": {"type": "connect", "connectTo": [1, 2]}}},
        {"type": "waitUntil", "elapsedSeconds": 2},
        {"type": "ifNodeIDEquals", "nodeID": 4, "instruction": {
            "type": "publish", "messageID": 9, "messageSizeBytes": 64, "topicID": "a"}},
    ]}
    s = script.load_script(_write(tmp_path / "p.json", doc), 3)
    assert s.params.gossipsub["degree"] == 3
    assert [step["type"] for step in s.steps] == ["subscribeToTopic", "connect", "waitUntil"]


@pytest.mark.parametrize("bad, words", [
    ({"script": [{"type": "connect", "connectTo": ["x"]}]}, "script[0]: connectTo[]"),
    ({"script": [{"type": "publish", "messageID": -1, "messageSizeBytes": 8, "topicID": "t"}]}, "messageID"),
    ({"script": [{"type": "initGossipSub", "gossipSubParams": {"HeartbeatInterval": 0.5}}]}, "nanoseconds"),
    ({"script": [{"type": "initGossipSub", "gossipSubParams": {"D": 3}}]}, "Dlo <= D <= Dhi"),
    ({"script": [{"type": "initGossipSub", "gossipSubParams": {"DoPX": 1}}]}, "DoPX must be true or false"),
    ({"script": [{"type": "initGossipSub", "gossipSubParams": {"D": True}}]}, "D must be a number"),
    ({"script": [{"type": "subscribeToTopic", "topicID": "t"}, {"type": "initGossipSub", "gossipSubParams": {}}]},
     "before every other"),
    ({"script": [{"type": "dance"}]}, "unknown instruction type 'dance'"),
    ({"scripts": []}, '{"script"'),
])
def test_bad_scripts_are_named(tmp_path, bad, words):
    with pytest.raises(script.ScriptError, match=re.escape(words)):
        script.load_script(_write(tmp_path / "p.json", bad), 0)


@needs_pylibp2p
def test_bad_input_exits_2_without_a_traceback(tmp_path):
    params = _write(tmp_path / "p.json", {"script": [{"type": "waitUntil"}]})
    config = _write(tmp_path / "c.json", {"index": 1})
    whole = {"index": 2**40, "listen_host": "127.0.0.1", "listen_port": 1, "control_host": "127.0.0.1",
             "control_port": 2, "token": "t"}
    huge = _write(tmp_path / "huge.json", whole)
    names = _write(tmp_path / "names.json", {**whole, "index": 1, "peer_names": ["not", "a", "map"]})
    for args in (["--params", str(params), "--config", str(config)],
                 ["--params", str(tmp_path / "absent.json"), "--config", str(config)],
                 ["--params", str(params), "--config", str(huge)],
                 ["--params", str(params), "--config", str(names)]):
        result = subprocess.run([str(PY), str(ADAPTER_DIR / "adapter.py"), *args], capture_output=True,
                                text=True, timeout=START_S)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and str(tmp_path) in result.stderr


# ---------------------------------------------------------------- a mixed ring


def _experiment() -> ResolvedExperiment:
    names = OURS + THEIRS
    params = {"D": 2, "D_low": 2, "D_high": 3, "heartbeat_interval": HEARTBEAT_NS / 1e9}
    nodes = tuple(NodeSpec(n, "default", "gossipsub", params, (TOPIC,), 100 + i) for i, n in enumerate(names))
    edges = tuple((names[i], names[(i + 1) % len(names)]) for i in range(len(names)))
    return ResolvedExperiment(
        name="pyadapt", source=__file__, seed=1, nodes=nodes, edges=edges, links={},
        default_link=LinkParams(latency_ms=0.0), publishes=(), churn=(), expectations=(), duration=1.0,
        linger=0.0, message_id="first-8-bytes",
    )


class Adapter:
    """One adapter process: stdout (NDJSON) to a file, control through our client."""

    def __init__(self, cfg, run_dir: Path) -> None:
        self.cfg = cfg
        dial = [identity_index(p.peer_id) for p in cfg.initial_peers]
        instructions = [
            {"type": "initGossipSub", "gossipSubParams": {"D": 2, "Dlo": 2, "Dhi": 3,
                                                          "HeartbeatInterval": HEARTBEAT_NS}},
            {"type": "subscribeToTopic", "topicID": TOPIC},
            {"type": "connect", "connectTo": dial},
        ]
        node_dir = run_dir / "nodes" / cfg.name
        node_dir.mkdir(parents=True)
        params = _write(node_dir / "params.json", {"script": instructions})
        (node_dir / "config.json").write_text(cfg.to_json())
        self.stdout = node_dir / "stdout.ndjson"
        self.stderr = node_dir / "stderr.log"
        self.proc = subprocess.Popen(
            [str(PY), str(ADAPTER_DIR / "adapter.py"), "--params", str(params), "--config", str(node_dir / "config.json")],
            stdout=self.stdout.open("wb"), stderr=self.stderr.open("wb"))
        self.client = ControlClient(cfg.control_host, cfg.control_port, TOKEN, timeout=20)

    def lines(self) -> list[dict]:
        return ndjson(self.stdout)

    def received(self, msg_id: str) -> list[dict]:
        return [x for x in self.lines() if x["msg"] == "Received Message" and x["id"] == msg_id]

    def stop(self) -> None:
        shut_down(self.proc, self.client)


def identity_index(b58: str) -> int:
    return next(i for i in range(16) if identity_for_index(i).peer_id_b58 == b58)


@dataclasses.dataclass
class Ring:
    ours: dict[str, ControlClient]
    theirs: dict[str, Adapter]
    run_dir: Path
    backend: ProcessBackend

    def status(self, name: str) -> dict:
        return (self.ours[name] if name in self.ours else self.theirs[name].client).call("status")


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    if MISSING:
        pytest.skip(MISSING)
    tmp = tmp_path_factory.mktemp("pyadapt")
    os.environ["TESTBED_STATE_DIR"] = str(tmp / "state")
    store = StateStore(tmp / "state")
    run_dir = tmp / "run"
    for sub in ("traces", "node-logs"):
        (run_dir / sub).mkdir(parents=True)
    backend = ProcessBackend(BackendContext("pyadapt-ring", run_dir, store))
    resolved = _experiment()
    names = [n.name for n in resolved.nodes]
    configs = build_configs(resolved, backend.prepare(names), backend.shaping_capabilities(), TOKEN, run_dir)
    theirs: dict[str, Adapter] = {}
    try:
        for name in OURS:
            backend.start(configs[name])
        for name in THEIRS:
            theirs[name] = Adapter(configs[name], run_dir)
        ring = Ring({n: ControlClient(configs[n].control_host, configs[n].control_port, TOKEN) for n in OURS},
                    theirs, run_dir, backend)
        wait_for(lambda: all(c.try_call("status") for c in ring.ours.values())
              and all(a.client.try_call("status") for a in theirs.values()), START_S, "every node to answer")
        yield ring
    finally:
        for adapter in theirs.values():
            adapter.stop()
        for name in OURS:
            backend.stop(name)
        ProcessBackend.cleanup(None, store)
        os.environ.pop("TESTBED_STATE_DIR", None)


NEIGHBOURS = {"n0": {"n1", "p3"}, "n1": {"n0", "p2"}, "p2": {"n1", "p3"}, "p3": {"p2", "n0"}}


def _meshed(ring: Ring) -> None:
    wait_for(lambda: all(set(ring.status(n)["mesh"].get(TOPIC, [])) == NEIGHBOURS[n] for n in NEIGHBOURS), 60,
          "every node to mesh with both ring neighbours")


@pytest.fixture(scope="module")
def delivered(ring) -> Ring:
    """Message 11 published by n0 (ours) and 12 by p2 (py-libp2p), once."""
    _meshed(ring)
    ours = ring.ours["n0"].call("publish", topic=TOPIC, size=200, seq=11)
    theirs = ring.theirs["p2"].client.call("publish", topic=TOPIC, size=300, seq=12)
    assert ours["message_id"] == "000000000000000b" and theirs["message_id"] == "000000000000000c"
    wait_for(lambda: all(a.received("11") for a in ring.theirs.values()) and ring.theirs["p3"].received("12")
          and all(ring.status(n)["counters"]["delivered"] >= 1 for n in OURS), 30,
          "both messages at every other node")
    return ring


@needs_pylibp2p
def test_mesh_both_ways(ring):
    _meshed(ring)
    st = ring.status("p2")
    assert st["router"] == "py-libp2p" and st["name"] == "p2" and set(st["peers"]) == {"n1", "p3"}
    assert st["peer_id"] == identity_for_index(2).peer_id_b58 and st["topics"] == [TOPIC]
    assert st["params"]["HeartbeatInterval"] == HEARTBEAT_NS and st["params_ignored"] == {}


@needs_pylibp2p
def test_delivery_both_ways_with_duplicates_logged(delivered):
    ring = delivered
    # The far side of the ring hears message 11 twice, and says so every time.
    wait_for(lambda: len(ring.theirs["p2"].received("11")) >= 2, 10, "p2's second copy of message 11")
    p2 = ring.status("p2")["counters"]
    assert p2["duplicates"] >= 1 and p2["delivered"] >= 1 and p2["published"] == 1
    assert {x["from"] for x in ring.theirs["p2"].received("11")} == {identity_for_index(1).peer_id_b58,
                                                                     identity_for_index(3).peer_id_b58}
    published = [x for x in ring.theirs["p2"].lines() if x["msg"] == "Published Message"]
    assert published == [{"time": published[0]["time"], "msg": "Published Message", "id": "12", "topic": TOPIC}]


@needs_pylibp2p
def test_stdout_is_the_contracts_ndjson(delivered):
    for name, adapter in delivered.theirs.items():
        lines = adapter.lines()
        assert lines[0] == {"time": lines[0]["time"], "msg": "PeerID",
                            "id": identity_for_index(adapter.cfg.index).peer_id_b58, "node_id": adapter.cfg.index}
        assert all(RFC3339.match(x["time"]) and isinstance(x["msg"], str) for x in lines), name
        kinds = {x["msg"] for x in lines}
        assert {"Received Message", "Joined", "Peer Added", "Graft", "RPC Sent", "RPC Received"} <= kinds, kinds
        for x in lines:
            if x["msg"] in ("Received Message", "Published Message"):
                assert re.fullmatch(r"0|[1-9]\d*", x["id"]) and x["topic"] == TOPIC
            if x["msg"] in ("RPC Sent", "RPC Received"):
                assert isinstance(x["size"], int) and x["size"] > 0


@needs_pylibp2p
def test_bad_control_requests_are_answered(ring):
    client = ring.theirs["p3"].client
    bad_token = ControlClient(client.host, client.port, "wrong")
    with pytest.raises(ControlError, match="unauthorized"):
        bad_token.call("status")
    for cmd, args, words in (("publish", {"topic": TOPIC, "size": -1}, "'size'"),
                             ("subscribe", {}, "'topic'"), ("inject", {}, "unsupported: inject on py-libp2p"),
                             ("connect", {"host": "127.0.0.1", "port": 1}, "known peer id"),
                             ("fly", {}, "unknown command")):
        with pytest.raises(ControlError, match=re.escape(words)):
            client.call(cmd, **args)
    with socket.create_connection((client.host, client.port), timeout=10) as sock:
        sock.sendall(b"{not json\n")
        assert b"not JSON" in sock.recv(4096)
    assert client.call("status")["name"] == "p3"


async def _send_garbage(host: str, port: int, node_index: int) -> None:
    """An outsider that speaks libp2p correctly up to pubsub, then sends an RPC
    frame that is no protobuf; and one that sends bytes that are no libp2p."""
    with trio.fail_after(60):
        stream = await trio.open_tcp_stream(host, port)
        conn = await upgrade(stream, identity_for_index(9), "noise", dialing=True,
                             expect=identity_for_index(node_index).peer_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run, lambda s: trio.sleep_forever())
            _, out = await negotiate_outbound(conn.open_stream(), ["/meshsub/1.1.0"])
            await out.send_all(encode_frame(b"\xff\xff\xff\xff\xff"))
            await trio.sleep(2)
            nursery.cancel_scope.cancel()
        raw = await trio.open_tcp_stream(host, port)
        await raw.send_all(os.urandom(4096))
        await trio.sleep(1)
        await raw.aclose()


@needs_pylibp2p
def test_garbage_from_a_peer_drops_that_peer_only(ring):
    _meshed(ring)
    cfg = ring.theirs["p3"].cfg
    trio.run(_send_garbage, cfg.listen_host, cfg.listen_port, cfg.index)
    assert ring.theirs["p3"].proc.poll() is None
    wait_for(lambda: ring.status("p3")["counters"]["peers_dropped"] >= 1, 10, "p3 to drop the outsider")
    _meshed(ring)


@needs_pylibp2p
def test_isolate_and_rejoin(delivered):
    ring = delivered
    _meshed(ring)
    p2 = ring.theirs["p2"].client
    assert p2.call("isolate", peers=["n1"])["closed"] >= 1
    time.sleep(2)  # n1 redials; p2 keeps refusing it
    st = ring.status("p2")
    assert st["isolated"] == ["n1"] and "n1" not in st["peers"] and st["mesh"][TOPIC] == ["p3"]
    ring.ours["n0"].call("publish", topic=TOPIC, size=100, seq=21)
    wait_for(lambda: ring.theirs["p2"].received("21"), 20, "message 21 around the other side of the ring")
    assert {x["from"] for x in ring.theirs["p2"].received("21")} == {identity_for_index(3).peer_id_b58}
    p2.call("rejoin")
    wait_for(lambda: "n1" in ring.status("p2")["peers"], 30, "n1 to reconnect to p2")
    assert ring.status("p2")["isolated"] is None


@needs_pylibp2p
def test_shutdown_is_graceful_and_our_traces_see_py_libp2p(delivered):
    ring = delivered
    p3 = ring.theirs["p3"]
    assert p3.client.call("shutdown")["shutdown"] is True
    assert p3.proc.wait(60) == 0
    assert [x["msg"] for x in p3.lines()].count("Left") == 1
    ring.backend.stop("n0")
    traces = list(read_trace(ring.run_dir / "traces" / "n0.pb"))
    delivered_ids = {ev.deliverMessage.messageID for ev in traces if ev.type == TraceType.DELIVER_MESSAGE}
    assert (12).to_bytes(8, "big") in delivered_ids  # published by p2, a py-libp2p node
    pruned_by_p3 = [ev for ev in traces if ev.type == TraceType.RECV_RPC
                    and ev.recvRPC.receivedFrom == identity_for_index(3).peer_id
                    and len(ev.recvRPC.meta.control.prune)]
    assert pruned_by_p3, "p3 left its mesh with PRUNE before exiting"


# ---------------------------------------------------------------- the image


@pytest.mark.docker
@pytest.mark.slow
def test_image_runs_the_adapter_and_answers_status(tmp_path):
    from orchestrator.dockerapi.client import docker_available, docker_client
    from orchestrator.images.pylibp2p import build_pylibp2p_image
    from orchestrator.progress import Reporter

    ok, why = docker_available()
    if not ok:
        pytest.skip(f"no Docker daemon: {why}")
    client = docker_client(timeout=600)
    tag = build_pylibp2p_image(client, Reporter())
    assert build_pylibp2p_image(client, Reporter()) == tag  # content-hashed: nothing to do
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    node_dir.chmod(0o755)
    _write(node_dir / "params.json", {"script": [
        {"type": "initGossipSub", "gossipSubParams": {"D": 2, "Dlo": 1, "Dhi": 3, "HeartbeatInterval": HEARTBEAT_NS}},
        {"type": "subscribeToTopic", "topicID": TOPIC},
        {"type": "connect", "connectTo": [99]}]})  # no node99: reported on stderr, the node goes on
    _write(node_dir / "config.json", {"index": 7, "name": "py7", "listen_host": "0.0.0.0", "listen_port": 9000,
                                      "control_host": "0.0.0.0", "control_port": 9100, "token": TOKEN,
                                      "message_id": "first-8-bytes"})
    (node_dir / "config.json").chmod(0o644)
    (node_dir / "params.json").chmod(0o644)
    try:
        # With the testbed's --config: our control endpoint.
        testbed = client.containers.run(
            tag, ["--params", "/node/params.json", "--config", "/node/config.json"], detach=True,
            hostname="node7", name=f"pyadapt-test-{os.getpid()}", labels={"gossip-testbed.test": "pyadapt"},
            volumes={str(node_dir): {"bind": "/node", "mode": "ro"}})
        # Bare contract: the node id comes from the hostname.
        bare = client.containers.run(
            tag, ["--params", "/node/params.json"], detach=True, hostname="node5",
            name=f"pyadapt-test-bare-{os.getpid()}", labels={"gossip-testbed.test": "pyadapt"},
            volumes={str(node_dir): {"bind": "/node", "mode": "ro"}})
        testbed.reload()
        ctl = ControlClient(testbed.attrs["NetworkSettings"]["IPAddress"], 9100, TOKEN, timeout=20)
        wait_for(lambda: ctl.try_call("status") is not None, START_S, "the container's control endpoint")
        st = ctl.call("status")
        assert st["router"] == "py-libp2p" and st["name"] == "py7" and st["topics"] == [TOPIC]
        assert st["peer_id"] == identity_for_index(7).peer_id_b58
        assert ctl.call("shutdown")["shutdown"] is True
        assert testbed.wait(timeout=60)["StatusCode"] == 0

        def first_line() -> dict | None:
            out = bare.logs(stdout=True, stderr=False).decode().splitlines()
            return json.loads(out[0]) if out else None

        wait_for(lambda: first_line() is not None, START_S, "the bare node's PeerID line")
        assert first_line() == {"time": first_line()["time"], "msg": "PeerID",
                                "id": identity_for_index(5).peer_id_b58, "node_id": 5}
        wait_for(lambda: b"node99" in bare.logs(stdout=False, stderr=True), START_S, "the failed connect's report")
        bare.reload()
        assert bare.status == "running"
    finally:  # by label: a container whose start failed was created all the same
        for c in client.containers.list(all=True, filters={"label": "gossip-testbed.test=pyadapt"}):
            c.remove(force=True)
        client.close()
