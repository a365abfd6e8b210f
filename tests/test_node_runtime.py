"""The trio router daemon in-process: the libp2p upgrade, one logical peer per
pair under simultaneous dials, delivery, the control endpoint (auth,
commands), isolation, and hostile peers (bad handshakes, yamux violations,
garbage, oversized frames, nonsense RPCs)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from node.wire.codec import FrameDecoder, encode_frame, encode_uvarint
from node.config import NodeConfig, PeerAddress
from node.engine.api import TraceType
from node.libp2p.identity import INJECTOR_INDEX, identity_for_index, peer_id_to_b58
from node.libp2p import multistream, noise, yamux
from node.libp2p.bufstream import BufferedStream
from node.libp2p.connection import MuxedConnection, negotiate_inbound, negotiate_outbound, upgrade
from node.runtime.control import handle
from node.runtime.daemon import Node
from node.trace.file import TraceWriter, read_trace
from node.wire.rpc import Control, Graft, IHave, IWant, Message, Prune, Rpc, SubOpts, decode_rpc, encode_rpc

TOKEN = "secret-token"
INDEX = {"n0": 0, "n1": 1, "n2": 2, "a": 10, "b": 11, "c": 12, "d": 13, "early": 14, "late": 15, "fast": 16}
EVIL = 99  # an outsider: a peer id no config names
EVIL_ID = identity_for_index(EVIL).peer_id


def pid(name: str) -> str:
    return identity_for_index(INDEX[name]).peer_id_b58


def make_cfg(tmp: Path, name: str, **kw) -> NodeConfig:
    base = dict(
        name=name, index=INDEX[name], router="gossipsub", seed=sum(name.encode()), listen_host="127.0.0.1",
        listen_port=0, control_host="127.0.0.1", control_port=0, token=TOKEN, trace_path=str(tmp / f"{name}.pb"),
        topics=("t",), params={"heartbeat_interval": 0.2}, peer_names={pid(n): n for n in INDEX},
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
    """A hand-driven libp2p peer (our own stack, an outsider's identity): it
    upgrades a connection, opens a pubsub stream and sends whatever a test
    wants, on the stream or straight into the yamux session."""

    def __init__(self, conn: MuxedConnection, nursery: trio.Nursery) -> None:
        self.conn = conn
        self.nursery = nursery
        self.out: BufferedStream | None = None
        self.inbound: list[BufferedStream] = []
        self.decoder = FrameDecoder()
        self.protocol = "/meshsub/1.0.0"

    @classmethod
    async def connect(cls, node: Node, nursery: trio.Nursery, protocol: str = "/meshsub/1.0.0") -> RawPeer:
        stream = await trio.open_tcp_stream("127.0.0.1", node.listen_port)
        conn = await upgrade(stream, identity_for_index(EVIL), node.cfg.security, dialing=True, expect=node.peer_id)
        peer = cls(conn, nursery)
        peer.protocol = protocol
        nursery.start_soon(conn.run, peer._on_stream)
        _, peer.out = await negotiate_outbound(conn.open_stream(), [protocol])
        return peer

    async def _on_stream(self, stream) -> None:
        """The node's pubsub stream to us: kept, read only by `first_rpc`
        (a test peer that never reads stalls the node's writer to it)."""
        _, buffered = await negotiate_inbound(stream, {self.protocol})
        self.inbound.append(buffered)
        await trio.sleep_forever()

    async def send_rpc(self, rpc: Rpc) -> None:
        assert self.out is not None
        await self.out.send_all(encode_frame(encode_rpc(rpc)))

    async def send_raw(self, data: bytes) -> None:
        """Bytes straight onto the secured channel, below yamux."""
        await self.conn.secure.send_all(data)

    async def first_rpc(self) -> Rpc:
        with trio.fail_after(5):
            while not self.inbound:
                await trio.sleep(0.01)
            while True:
                frames = list(self.decoder.feed(await self.inbound[0].receive_some()))
                if frames:
                    return decode_rpc(frames[0])

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        with trio.move_on_after(timeout):
            while not self.conn.closed:
                await trio.sleep(0.01)
            return True
        return False


async def closed_by_node(stream: trio.SocketStream, timeout: float = 5.0) -> bool:
    with trio.move_on_after(timeout):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


def trace_types(path: str) -> list[int]:
    return [ev.type for ev in read_trace(Path(path))]


# The upgrade

def test_nodes_speak_noise_and_plaintext_and_know_peer_ids(tmp_path):
    async def main():
        for security in ("noise", "plaintext"):
            cfgs = [make_cfg(tmp_path, n, security=security) for n in ("n0", "n1")]
            async with running(*cfgs) as (a, b):
                assert await a.connect("127.0.0.1", b.listen_port, "n1", False) == "n1"
                await wait_for(lambda: a.mesh().get("t") == ["n1"] and b.mesh().get("t") == ["n0"])
                st = await ctl(b, "status")
                assert st["peer_id"] == pid("n1") and st["security"] == security and st["peers"] == ["n0"]

    trio.run(main)


def test_shutdown_says_go_away(tmp_path):
    async def main():
        async with trio.open_nursery() as nursery:
            async with running(make_cfg(tmp_path, "n0")) as (a,):
                peer = await RawPeer.connect(a, nursery)
                await wait_for(lambda: EVIL_ID in a.links)
            assert await peer.closed_by_peer()
            assert peer.conn.close_reason == "GoAway(0) from peer"

    trio.run(main)


def test_a_dial_to_the_wrong_peer_id_fails(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0"), make_cfg(tmp_path, "n1")) as (a, b):
            reply = await ctl(a, "connect", host="127.0.0.1", port=b.listen_port, name="n2")
            assert not reply["ok"] and "n2" not in a.links
            assert a.counters["dials_failed"] >= 1 and not a.links

    trio.run(main)


# Delivery and peers

def test_nodes_connect_mesh_and_deliver(tmp_path):
    async def main():
        cfgs = [make_cfg(tmp_path, f"n{i}") for i in range(3)]
        async with running(*cfgs) as (a, b, c):
            await a.connect("127.0.0.1", b.listen_port, "n1", True)
            await b.connect("127.0.0.1", c.listen_port, "n2", True)
            await wait_for(lambda: a.mesh().get("t") == ["n1"] and c.mesh().get("t") == ["n1"])
            reply = await ctl(c, "publish", topic="t", size=1000)
            assert reply["ok"] and reply["message_id"].startswith(c.peer_id.hex())
            await wait_for(lambda: a.counters["delivered"] == 1 and b.counters["delivered"] == 1)
            st = (await ctl(b, "status"))
            assert st["peers"] == ["n0", "n2"] and st["counters"]["delivered"] == 1
            assert st["peer_id"] == pid("n1")
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


class TraceThatFills(TraceWriter):
    """Writes until `full`, then fails as a full disk does."""

    full = False
    failed = 0

    def write(self, events) -> None:
        if self.full:
            self.failed += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(events)


def test_a_trace_that_cannot_be_written_stops_the_router(tmp_path):
    """The failing write comes from a peer's frame: the router stops (it does
    not drop the peer as a broken connection and run on untraced) and writes
    nothing after the failed write (its LEAVE included), so what the trace
    holds stays readable."""
    async def main():
        a_cfg = make_cfg(tmp_path, "n0")
        b_cfg = make_cfg(tmp_path, "n1", params={"heartbeat_interval": 30.0})  # b writes only for frames here
        trace = TraceThatFills(Path(b_cfg.trace_path), identity_for_index(INDEX["n1"]).peer_id)
        b = Node(b_cfg, trace)
        async with running(a_cfg) as (a,):
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:  # ends when b.run does
                    await nursery.start(lambda task_status: b.run(handle_signals=False, task_status=task_status))
                    await a.connect("127.0.0.1", b.listen_port, "n1", True)
                    await wait_for(lambda: a.mesh().get("t") == ["n1"])
                    trace.full = True
                    assert (await ctl(a, "publish", topic="t", size=10))["ok"]
            assert b.trace_error == "cannot write its trace: [Errno 28] No space left on device"
            assert b.counters["rpcs_in"] >= 1 and b.counters["peers_dropped"] == 0
            assert trace.failed == 1
        assert TraceType.JOIN in trace_types(b_cfg.trace_path)

    trio.run(main)


def test_drained_nodes_receive_every_rpc_sent_to_them(tmp_path):
    """The end of a run: every node drains (LEAVE, queues emptied) while the
    others still listen, then all stop at once. Each RPC a node traced as
    sent to a peer is in that peer's trace as received."""

    async def main():
        cfgs = [make_cfg(tmp_path, f"n{i}") for i in range(3)]
        async with running(*cfgs) as nodes:
            a, b, c = nodes
            await a.connect("127.0.0.1", b.listen_port, "n1", True)
            await b.connect("127.0.0.1", c.listen_port, "n2", True)
            await c.connect("127.0.0.1", a.listen_port, "n0", True)
            await wait_for(lambda: all(len(n.mesh().get("t", [])) == 2 for n in nodes))
            for node in nodes:
                await ctl(node, "publish", topic="t", size=100)
            await wait_for(lambda: all(n.counters["delivered"] == 3 for n in nodes))
            answers = []

            async def drain(node: Node) -> None:
                answers.append(await ctl(node, "drain"))

            async with trio.open_nursery() as nursery:
                for node in nodes:
                    nursery.start_soon(drain, node)
            for node in nodes:
                assert node.topics == set() and (await ctl(node, "status"))["queued"] == 0
            # the answer carries what the controller's linger and the manifest's lag fallback need
            assert all(a["ok"] and a["counters"]["delivered"] == 3 and a["lag"]["samples"] > 0 for a in answers)
            await trio.sleep(0.5)  # the RPCs in flight arrive

    trio.run(main)
    sent: dict[tuple[bytes, bytes], int] = {}
    received: dict[tuple[bytes, bytes], int] = {}
    for i in range(3):
        for ev in read_trace(tmp_path / f"n{i}.pb"):
            if ev.type == TraceType.SEND_RPC:
                sent[ev.peerID, ev.sendRPC.sendTo] = sent.get((ev.peerID, ev.sendRPC.sendTo), 0) + 1
            elif ev.type == TraceType.RECV_RPC:
                key = (ev.recvRPC.receivedFrom, ev.peerID)
                received[key] = received.get(key, 0) + 1
    assert len(sent) == 6 and sent == received


def test_simultaneous_dials_end_with_one_logical_peer(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "a"), make_cfg(tmp_path, "b")) as (a, b):
            for _ in range(5):
                async with trio.open_nursery() as n:
                    n.start_soon(a.connect, "127.0.0.1", b.listen_port, None, False)
                    n.start_soon(b.connect, "127.0.0.1", a.listen_port, None, False)
            await trio.sleep(0.3)
            assert list(a.links) == [b.peer_id] and list(b.links) == [a.peer_id]
            # both ends kept the same TCP connection: the one dialled by the lower peer id
            lower = min(a.peer_id, b.peer_id)
            assert a.links[b.peer_id].dialer == lower and b.links[a.peer_id].dialer == lower
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
        early = make_cfg(tmp_path, "early", initial_peers=(PeerAddress("late", "127.0.0.1", port, pid("late")),),
                         dial_backoff_ms=20, dial_backoff_max_ms=200)
        async with running(early) as (e,):
            await trio.sleep(0.5)
            assert e.counters["dials_failed"] >= 2
            async with running(late) as (l,):
                await wait_for(lambda: l.peer_id in e.links and e.peer_id in l.links)

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


def test_a_control_request_to_a_peer_port_says_what_answered(tmp_path):
    """Issue 34's open finding: publishes refused with "answered 'publish'
    with something not JSON". The control server never writes such a line;
    a libp2p listener does (multistream-select's header comes first from
    both sides), and the error now quotes it, so a log tells the two apart."""
    from node.runtime.client import ControlClient, ControlError

    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (n,):
            good = await trio.to_thread.run_sync(
                lambda: ControlClient("127.0.0.1", n.control_port, TOKEN, 3).call("publish", topic="t", size=8, seq=1))
            assert good["ok"] and good["message_id"]
            peer_port = ControlClient("127.0.0.1", n.listen_port, TOKEN, 3)
            with pytest.raises(ControlError) as wrong:
                await trio.to_thread.run_sync(lambda: peer_port.call("publish", topic="t", size=8, seq=2))
            assert "something not JSON: b'\\x13/multistream/1.0.0'" in str(wrong.value)

    trio.run(main)


def test_isolate_closes_and_refuses_until_rejoin(tmp_path):
    async def main():
        b_cfg = make_cfg(tmp_path, "b", dial_backoff_ms=20, dial_backoff_max_ms=100)
        async with running(make_cfg(tmp_path, "a"), b_cfg) as (a, b):
            await b.connect("127.0.0.1", a.listen_port, "a", True)  # b keeps redialling a
            await wait_for(lambda: b.peer_id in a.links)
            assert (await ctl(a, "isolate"))["closed"] == ["b"]
            await wait_for(lambda: a.counters["handshakes_failed"] >= 1)  # b redialled and was refused
            assert not a.links and not b.links
            assert (await ctl(a, "rejoin"))["ok"]
            await wait_for(lambda: b.peer_id in a.links and a.peer_id in b.links)
            assert (await ctl(a, "disconnect", peer="b"))["closed"] is True

    trio.run(main)


# Hostile peers

def test_an_outsider_is_an_ordinary_peer_known_by_its_peer_id(tmp_path):
    """Inbound peers not in the experiment are accepted, meshed and traced
    under their peer id; what the node sends them is framed protobuf."""

    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (a,), trio.open_nursery() as nursery:
            peer = await RawPeer.connect(a, nursery)
            rpc = await peer.first_rpc()
            assert rpc.subscriptions == (SubOpts(True, "t"),)
            await peer.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),)))
            await wait_for(lambda: a.mesh().get("t") == [peer_id_to_b58(EVIL_ID)])
            nursery.cancel_scope.cancel()

    trio.run(main)
    added = [ev for ev in read_trace(tmp_path / "n0.pb") if ev.type == TraceType.ADD_PEER]
    assert [ev.addPeer.peerID for ev in added] == [EVIL_ID]
    assert {ev.peerID for ev in added} == {identity_for_index(INDEX["n0"]).peer_id}


@pytest.mark.parametrize("garbage", [
    pytest.param(("stream", lambda: bytes(random.Random(1).getrandbits(8) for _ in range(5000))), id="random-bytes"),
    pytest.param(("stream", lambda: encode_uvarint(10 << 20) + b"x" * 100), id="oversized-frame"),
    pytest.param(("stream", lambda: encode_frame(b"\xff\xff\xff\xff\x0f")), id="undecodable-rpc"),
    pytest.param(("stream", lambda: b"\xff" * 11), id="overlong-length-prefix"),
    pytest.param(("yamux", lambda: yamux.frame(7, 0, 0, 0)), id="yamux-unknown-frame-type"),
    pytest.param(("yamux", lambda: yamux.frame(yamux.TYPE_DATA, 0, 1, yamux.INITIAL_WINDOW + 1)
                  + bytes(yamux.INITIAL_WINDOW + 1)), id="yamux-window-violation"),
    pytest.param(("yamux", lambda: yamux.frame(yamux.TYPE_WINDOW_UPDATE, yamux.FLAG_SYN, 2, 0)),
                 id="yamux-syn-with-the-listeners-parity"),
])
def test_a_peer_that_breaks_the_wire_is_dropped_and_the_node_keeps_serving(tmp_path, garbage):
    layer, make = garbage

    async def main():
        async with running(make_cfg(tmp_path, "n0"), make_cfg(tmp_path, "n1")) as (a, b), \
                trio.open_nursery() as nursery:
            await b.connect("127.0.0.1", a.listen_port, "n0", True)
            evil = await RawPeer.connect(a, nursery)
            await wait_for(lambda: EVIL_ID in a.links)
            with contextlib.suppress(trio.BrokenResourceError):  # the node may hang up mid-send
                if layer == "stream":
                    assert evil.out is not None
                    await evil.out.send_all(make())
                else:
                    await evil.send_raw(make())
            assert await evil.closed_by_peer()
            await wait_for(lambda: EVIL_ID not in a.links)
            assert a.counters["peers_dropped"] == 1
            await wait_for(lambda: a.mesh().get("t") == ["n1"])
            await ctl(a, "publish", topic="t", size=10)
            await wait_for(lambda: b.counters["delivered"] == 1)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_bad_handshake_is_dropped(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (a,):
            attempts = [
                b"\x05hello",  # not multistream
                multistream.encode_message(multistream.MULTISTREAM) + multistream.encode_message(noise.PROTOCOL_ID)
                + bytes([0, 32]) + bytes(32),  # an all-zero (low-order) noise ephemeral key
                multistream.encode_message(multistream.MULTISTREAM) + multistream.encode_message(noise.PROTOCOL_ID)
                + bytes([0, 3]) + b"abc",  # a noise message too short for a key
            ]
            for first in attempts:
                stream = await trio.open_tcp_stream("127.0.0.1", a.listen_port)
                await stream.send_all(first)
                assert await closed_by_node(stream)
            # a noise handshake whose identity signature does not cover the static key
            stream = await trio.open_tcp_stream("127.0.0.1", a.listen_port)
            raw = BufferedStream(stream)
            await multistream.select(raw, [noise.PROTOCOL_ID])
            hs = noise.NoiseHandshake(initiator=True)
            await raw.send_all(noise._framed(hs.write_message(b"")))
            hs.read_message(await noise._read_handshake_message(raw))
            forged = noise.make_payload(identity_for_index(EVIL), b"\0" * 32)
            await raw.send_all(noise._framed(hs.write_message(forged)))
            assert await closed_by_node(stream)
            assert not a.links and a.counters["handshakes_failed"] == 4

    trio.run(main)


def test_nonsense_rpcs_are_survived_and_the_node_keeps_serving(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0"), make_cfg(tmp_path, "n1")) as (a, b), \
                trio.open_nursery() as nursery:
            await b.connect("127.0.0.1", a.listen_port, "n0", True)
            evil = await RawPeer.connect(a, nursery)
            await wait_for(lambda: EVIL_ID in a.links)
            unknown = tuple(os.urandom(20) for _ in range(200))
            await evil.send_rpc(Rpc(subscriptions=tuple(SubOpts(True, f"nope-{i}") for i in range(50))))
            await evil.send_rpc(Rpc(publish=(Message(b"x", b"data", b"\0" * 8, "unknown-topic"),)))
            await evil.send_rpc(Rpc(control=Control(iwant=(IWant(unknown),), ihave=(IHave("t", unknown),))))
            flood = Rpc(control=Control(graft=(Graft("t"), Graft("zz")), prune=(Prune("t"), Prune("zz"))))
            frame = encode_frame(encode_rpc(flood))
            assert evil.out is not None
            await evil.out.send_all(frame * 3000)
            await evil.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),), control=Control(graft=(Graft("t"),))))
            await wait_for(lambda: a.counters["rpcs_in"] >= 3004, timeout=10)
            assert EVIL_ID in a.links and a.counters["peers_dropped"] == 0
            await wait_for(lambda: "n1" in a.mesh().get("t", []))
            await ctl(a, "publish", topic="t", size=10)
            await wait_for(lambda: b.counters["delivered"] == 1)
            assert (await ctl(a, "status"))["ok"]
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_streams_for_protocols_we_do_not_speak_get_na_and_the_peer_keeps_working(tmp_path):
    async def main():
        async with running(make_cfg(tmp_path, "n0")) as (a,), trio.open_nursery() as nursery:
            peer = await RawPeer.connect(a, nursery)
            for proto in ("/ipfs/id/1.0.0", "/ipfs/ping/1.0.0", "/meshsub/1.1.0"):
                with pytest.raises(Exception, match="none of"):
                    await negotiate_outbound(peer.conn.open_stream(), [proto])
            await peer.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),)))
            await wait_for(lambda: a.mesh().get("t") == [peer_id_to_b58(EVIL_ID)])
            nursery.cancel_scope.cancel()

    trio.run(main)
