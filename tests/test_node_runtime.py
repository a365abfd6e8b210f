"""The trio router daemon in-process: handshake, one logical peer per pair
under simultaneous dials, delivery, the control endpoint (auth, commands),
isolation, and hostile peers (garbage, oversized frames, nonsense RPCs)."""

from __future__ import annotations

import json
import os
import random
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from node.codec import FrameDecoder, encode_frame, encode_uvarint
from node.config import NodeConfig, PeerAddress
from node.engine.api import TraceType
from node.identity import INJECTOR_INDEX, identity_for_index
from node.runtime.control import handle
from node.runtime.daemon import Node
from node.runtime.handshake import HandshakeError, Hello, agree, parse_hello
from node.tracefile import read_trace
from node.wire import Control, Graft, IHave, IWant, Message, Prune, Rpc, SubOpts, decode_rpc, encode_rpc

TOKEN = "secret-token"
INDEX: dict[str, int] = {}  # every test node name gets its own identity
RAW_PEER = identity_for_index(10_000)  # the identity hand-driven peers claim
RAW_PEER_ID = RAW_PEER.peer_id_b58


def make_cfg(tmp: Path, name: str, **kw) -> NodeConfig:
    base = dict(
        name=name, router="gossipsub", seed=sum(name.encode()), listen_host="127.0.0.1", listen_port=0,
        control_host="127.0.0.1", control_port=0, token=TOKEN, trace_path=str(tmp / f"{name}.pb"),
        index=INDEX.setdefault(name, len(INDEX)),
        topics=("t",), params={"heartbeat_interval": 0.2},
    )
    base.update(kw)
    return NodeConfig(**base)


@asynccontextmanager
async def running(*cfgs: NodeConfig):
    async with trio.open_nursery() as nursery:
        nodes = []
        for cfg in cfgs:
            node = Node(cfg)
            await nursery.start(lambda task_status, node=node: node.run(handle_signals=False, task_status=task_status))
            nodes.append(node)
        try:
            yield nodes
        finally:
            for node in nodes:
                node.request_shutdown()


async def wait_for(predicate, timeout: float = 5.0, step: float = 0.02) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(step)


async def ctl(node: Node, cmd: str, **args) -> dict:
    return await handle(node, {"token": TOKEN, "cmd": cmd, **args})


class RawPeer:
    """A hand-driven peer: does the handshake, then sends whatever a test wants."""

    def __init__(self, stream: trio.SocketStream, decoder: FrameDecoder) -> None:
        self.stream = stream
        self.decoder = decoder

    @classmethod
    async def connect(cls, node: Node, name: str = "evil", protocols=("/meshsub/1.0.0",)) -> RawPeer:
        stream = await trio.open_tcp_stream("127.0.0.1", node.listen_port)
        await stream.send_all(Hello(name, RAW_PEER_ID, tuple(protocols)).encode())
        decoder = FrameDecoder()
        with trio.fail_after(5):
            while True:
                frames = list(decoder.feed(await stream.receive_some(4096)))
                if frames:
                    parse_hello(frames[0])
                    break
        return cls(stream, decoder)

    async def send_rpc(self, rpc: Rpc) -> None:
        await self.stream.send_all(encode_frame(encode_rpc(rpc)))

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        with trio.move_on_after(timeout):
            try:
                while await self.stream.receive_some(65536):
                    pass
            except trio.BrokenResourceError:
                pass
            return True
        return False


def trace_types(path: str) -> list[int]:
    return [ev.type for ev in read_trace(Path(path))]


# Handshake

def test_hello_roundtrip_and_negotiation():
    a = Hello("a", RAW_PEER_ID, ("/meshsub/1.0.0", "/floodsub/1.0.0"))
    frames = list(FrameDecoder().feed(a.encode()))
    assert parse_hello(frames[0]) == a
    assert a.peer_id_bytes == identity_for_index(10_000).peer_id
    b = Hello("b", RAW_PEER_ID, ("/floodsub/1.0.0",))
    assert agree(a, b) == agree(a, b) == "/floodsub/1.0.0"
    with pytest.raises(HandshakeError):
        agree(a, Hello("c", RAW_PEER_ID, ("/simsub/1.0.0",)))
    pid = RAW_PEER_ID
    for bad in (b"\xff\xfe", b"[]", b'{"hello": "x"}',
                b'{"hello": "gossip-testbed/1", "name": "", "peer_id": "%s", "protocols": ["p"]}' % pid.encode(),
                b'{"hello": "gossip-testbed/1", "name": "n", "peer_id": "%s", "protocols": []}' % pid.encode(),
                b'{"hello": "gossip-testbed/1", "name": "n", "protocols": ["p"]}',
                b'{"hello": "gossip-testbed/1", "name": "n", "peer_id": "n0", "protocols": ["p"]}'):
        with pytest.raises(HandshakeError):
            parse_hello(bad)


# Delivery and peers

def test_nodes_connect_mesh_and_deliver(tmp_path):
    async def main():
        cfgs = [make_cfg(tmp_path, f"n{i}") for i in range(3)]
        async with running(*cfgs) as (a, b, c):
            await a.connect("127.0.0.1", b.listen_port, "n1", True)
            await b.connect("127.0.0.1", c.listen_port, "n2", True)
            await wait_for(lambda: a.mesh().get("t") == ["n1"] and c.mesh().get("t") == ["n1"])
            reply = await ctl(c, "publish", topic="t", size=1000)
            assert reply["ok"] and reply["message_id"] == c.cfg.peer_id.hex() + reply["message_id"][-16:]
            await wait_for(lambda: a.counters["delivered"] == 1 and b.counters["delivered"] == 1)
            assert c.counters["delivered"] == 1  # the publisher delivers its own message (go)
            st = (await ctl(b, "status"))
            assert st["peers"] == ["n0", "n2"] and st["counters"]["delivered"] == 1
            assert st["lag"]["samples"] > 0
            # injection: the same message id handed to two nodes
            r1 = await ctl(a, "inject", seqno=5, topic="t", size=10, seq=4)
            r2 = await ctl(c, "inject", seqno=5, topic="t", size=10, seq=4)
            injector = identity_for_index(INJECTOR_INDEX).peer_id
            assert r1["message_id"] == r2["message_id"] == (injector + (5).to_bytes(8, "big")).hex()
            await wait_for(lambda: b.counters["delivered"] == 2)

    trio.run(main)
    types = trace_types(str(tmp_path / "n1.pb"))
    assert TraceType.DELIVER_MESSAGE in types and TraceType.SEND_RPC in types and TraceType.RECV_RPC in types
    # graceful shutdown left the topic (PRUNE to the mesh)
    assert TraceType.LEAVE in types and TraceType.PRUNE in types


def test_simultaneous_dials_end_with_one_logical_peer(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "a"), make_cfg(tmp_path, "b")) as (a, b):
            for _ in range(5):
                async with trio.open_nursery() as n:
                    n.start_soon(a.connect, "127.0.0.1", b.listen_port, None, False)
                    n.start_soon(b.connect, "127.0.0.1", a.listen_port, None, False)
            await trio.sleep(0.3)
            assert list(a.links) == ["b"] and list(b.links) == ["a"]
            # both ends kept the same TCP connection: the one dialled by "a"
            assert a.links["b"].dialer == "a" and b.links["a"].dialer == "a"
            await wait_for(lambda: a.mesh().get("t") == ["b"] and b.mesh().get("t") == ["a"])
            await ctl(a, "publish", topic="t", size=10)
            await wait_for(lambda: b.counters["delivered"] == 1)

    trio.run(main)


def test_initial_peers_are_dialled_with_retry(tmp_path):
    """A node whose peer is not listening yet keeps dialling and connects when it is."""

    async def main():
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        late = make_cfg(tmp_path, "late", listen_port=port)
        early = make_cfg(tmp_path, "early", initial_peers=(PeerAddress("late", "127.0.0.1", port),),
                         dial_backoff_ms=20, dial_backoff_max_ms=200)
        async with running(early) as (e,):
            await trio.sleep(0.5)
            assert e.counters["dials_failed"] >= 2
            async with running(late) as (l,):
                await wait_for(lambda: "late" in e.links and "early" in l.links)

    trio.run(main)


def test_control_requires_the_token(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (n,):
            for req in ({"cmd": "status"}, {"cmd": "status", "token": "wrong"}, {"cmd": "shutdown", "token": 1}):
                assert await handle(n, req) == {"ok": False, "error": "unauthorized"}
            assert not (await ctl(n, "nonsense"))["ok"]
            assert not (await ctl(n, "publish"))["ok"]  # missing topic
            # over the socket, too
            stream = await trio.open_tcp_stream("127.0.0.1", n.control_port)
            await stream.send_all(b'{"cmd": "shutdown"}\nnot json\n')
            buf = b""
            while buf.count(b"\n") < 2:
                buf += await stream.receive_some(4096)
            lines = [json.loads(x) for x in buf.splitlines()]
            assert lines[0]["error"] == "unauthorized" and lines[1]["ok"] is False
            await stream.aclose()
            assert not n._shutdown.is_set()

    trio.run(main)


def test_isolate_closes_and_refuses_until_rejoin(tmp_path):
    async def main():
        b_cfg = make_cfg(tmp_path, "b", dial_backoff_ms=20, dial_backoff_max_ms=100)
        async with running(make_cfg(tmp_path, "a"), b_cfg) as (a, b):
            await b.connect("127.0.0.1", a.listen_port, "a", True)  # b keeps redialling a
            await wait_for(lambda: "b" in a.links)
            assert (await ctl(a, "isolate"))["closed"] == ["b"]
            await trio.sleep(0.5)
            assert not a.links and not b.links and a.counters["handshakes_failed"] >= 1
            assert (await ctl(a, "rejoin"))["ok"]
            await wait_for(lambda: "b" in a.links and "a" in b.links)
            assert (await ctl(a, "disconnect", peer="b"))["closed"] is True

    trio.run(main)


# Hostile peers

@pytest.mark.parametrize("garbage", [
    pytest.param(lambda: bytes(random.Random(1).getrandbits(8) for _ in range(5000)), id="random-bytes"),
    pytest.param(lambda: encode_uvarint(10 << 20) + b"x" * 100, id="oversized-frame"),
    pytest.param(lambda: encode_frame(b"\xff\xff\xff\xff\x0f"), id="undecodable-rpc"),
    pytest.param(lambda: b"\xff" * 11, id="overlong-length-prefix"),
])
def test_garbage_peer_is_dropped_and_the_node_keeps_serving(tmp_path, garbage):
    async def main():
        async with running(make_cfg(tmp_path, "n0"), make_cfg(tmp_path, "n1")) as (a, b):
            await b.connect("127.0.0.1", a.listen_port, "n0", True)
            evil = await RawPeer.connect(a)
            await wait_for(lambda: "evil" in a.links)
            await evil.stream.send_all(garbage())
            assert await evil.closed_by_peer()
            await wait_for(lambda: "evil" not in a.links)
            assert a.counters["peers_dropped"] == 1
            await wait_for(lambda: a.mesh().get("t") == ["n1"])
            await ctl(a, "publish", topic="t", size=10)
            await wait_for(lambda: b.counters["delivered"] == 1)

    trio.run(main)


def test_a_bad_handshake_is_dropped(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (a,):
            for first in (b"\x05hello", encode_frame(b'{"hello": 1}'), encode_frame(b'{"hello": "gossip-testbed/1", "name": "n0", "protocols": ["/meshsub/1.0.0"]}')):
                stream = await trio.open_tcp_stream("127.0.0.1", a.listen_port)
                await stream.send_all(first)
                if first == b"\x05hello":
                    await stream.send_all(b"xx")  # complete the bogus frame
                peer = RawPeer(stream, FrameDecoder())
                assert await peer.closed_by_peer()
            assert not a.links and a.counters["handshakes_failed"] == 3

    trio.run(main)


def test_nonsense_rpcs_are_survived_and_the_node_keeps_serving(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0"), make_cfg(tmp_path, "n1")) as (a, b):
            await b.connect("127.0.0.1", a.listen_port, "n0", True)
            evil = await RawPeer.connect(a)
            await wait_for(lambda: "evil" in a.links)
            unknown = tuple(os.urandom(20) for _ in range(200))
            await evil.send_rpc(Rpc(subscriptions=tuple(SubOpts(True, f"nope-{i}") for i in range(50))))
            await evil.send_rpc(Rpc(publish=(Message(b"x", b"data", b"\0" * 8, "unknown-topic"),)))
            await evil.send_rpc(Rpc(control=Control(iwant=(IWant(unknown),), ihave=(IHave("t", unknown),))))
            flood = Rpc(control=Control(graft=(Graft("t"), Graft("zz")), prune=(Prune("t"), Prune("zz"))))
            frame = encode_frame(encode_rpc(flood))
            await evil.stream.send_all(frame * 3000)
            await evil.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),), control=Control(graft=(Graft("t"),))))
            await wait_for(lambda: a.counters["rpcs_in"] >= 3004, timeout=10)
            assert "evil" in a.links and a.counters["peers_dropped"] == 0
            await wait_for(lambda: "n1" in a.mesh().get("t", []))
            await ctl(a, "publish", topic="t", size=10)
            await wait_for(lambda: b.counters["delivered"] == 1)
            assert (await ctl(a, "status"))["ok"]

    trio.run(main)


def test_raw_peer_sees_valid_rpcs(tmp_path):
    """What the node sends is framed protobuf a foreign implementation can read."""

    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (a,):
            peer = await RawPeer.connect(a)
            with trio.fail_after(5):
                while True:
                    frames = list(peer.decoder.feed(await peer.stream.receive_some(4096)))
                    if frames:
                        break
            rpc = decode_rpc(frames[0])
            assert rpc.subscriptions == (SubOpts(True, "t"),)

    trio.run(main)
