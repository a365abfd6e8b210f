"""The libp2p wire's pieces without sockets: yamux's state machine fed bytes,
multistream-select over in-memory streams, noise and plaintext handshakes
(what they check, and what they refuse)."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from node.libp2p.identity import identity_for_index
from node.libp2p import multistream, noise, plaintext, yamux
from node.libp2p.bufstream import BufferedStream
from node.libp2p.connection import upgrade
from node.libp2p.errors import ProtocolError
from node.libp2p.poller import ReadPoller
from node.proto import libp2p_pb2


# yamux

def pair() -> tuple[yamux.YamuxSession, yamux.YamuxSession]:
    return yamux.YamuxSession(client=True), yamux.YamuxSession(client=False)


def test_yamux_stream_ids_by_role_and_syn_ack():
    client, server = pair()
    assert client.open_stream() == 1 and client.open_stream() == 3
    assert server.open_stream() == 2
    server.data_to_send()
    events = server.receive_data(client.data_to_send())
    assert events == [yamux.StreamOpened(1), yamux.StreamOpened(3)]
    server.send_data(1, b"hi")
    header = yamux.HEADER.unpack(server.data_to_send()[:yamux.HEADER_SIZE])
    assert header == (0, yamux.TYPE_DATA, yamux.FLAG_ACK, 1, 2)  # the first frame back carries ACK
    assert client.receive_data(yamux.frame(yamux.TYPE_DATA, yamux.FLAG_ACK, 1, 2) + b"hi") == [
        yamux.DataReceived(1, b"hi")]


def test_yamux_send_window_and_window_update():
    client, server = pair()
    sid = client.open_stream()
    server.receive_data(client.data_to_send())
    big = bytes(yamux.INITIAL_WINDOW + 1000)
    assert client.send_data(sid, big) == yamux.INITIAL_WINDOW  # never more than the window
    assert client.send_window(sid) == 0
    events = server.receive_data(client.data_to_send())
    assert sum(len(e.data) for e in events if isinstance(e, yamux.DataReceived)) == yamux.INITIAL_WINDOW
    server.consumed(sid, yamux.INITIAL_WINDOW)  # the application read it: grant it back
    assert client.receive_data(server.data_to_send()) == [yamux.WindowOpened(sid)]
    assert client.send_window(sid) == yamux.INITIAL_WINDOW


def test_yamux_window_violation_is_a_protocol_error_with_go_away():
    client, server = pair()
    sid = client.open_stream()
    server.receive_data(client.data_to_send())
    with pytest.raises(ProtocolError, match="window"):
        server.receive_data(yamux.frame(yamux.TYPE_DATA, 0, sid, yamux.INITIAL_WINDOW + 1)
                            + bytes(yamux.INITIAL_WINDOW + 1))
    assert server.data_to_send() == yamux.frame(yamux.TYPE_GO_AWAY, 0, 0, yamux.GO_AWAY_PROTOCOL_ERROR)


@pytest.mark.parametrize("bad, match", [
    (yamux.frame(9, 0, 0, 0), "unknown type 9"),
    (bytes([1]) + yamux.frame(0, 0, 0, 0)[1:], "version 1"),
    (yamux.frame(yamux.TYPE_WINDOW_UPDATE, yamux.FLAG_SYN, 1, 0), "may not open"),  # client's parity from the client
    (yamux.frame(yamux.TYPE_WINDOW_UPDATE, yamux.FLAG_SYN, 0, 0), "may not open"),
])
def test_yamux_refuses_what_the_spec_forbids(bad, match):
    server = yamux.YamuxSession(client=True)  # a client: the remote is a server and opens even ids
    with pytest.raises(ProtocolError, match=match):
        server.receive_data(bad)


def test_yamux_fin_rst_ping_go_away():
    client, server = pair()
    sid = client.open_stream()
    server.receive_data(client.data_to_send())
    client.close_stream(sid)
    assert server.receive_data(client.data_to_send()) == [yamux.StreamEnded(sid)]
    server.close_stream(sid)  # both halves closed: the stream is forgotten on both sides
    client.receive_data(server.data_to_send())
    assert sid not in client.streams and sid not in server.streams
    other = client.open_stream()
    server.receive_data(client.data_to_send())
    server.reset_stream(other)
    assert client.receive_data(server.data_to_send()) == [yamux.StreamReset(other)]
    client.ping(77)
    assert server.receive_data(client.data_to_send()) == []
    assert client.receive_data(server.data_to_send()) == [yamux.PongReceived(77)]  # answered with the same value
    server.go_away()
    assert client.receive_data(server.data_to_send()) == [yamux.GoAwayReceived(yamux.GO_AWAY_NORMAL)]
    with pytest.raises(ProtocolError):
        client.open_stream()


def test_yamux_frames_split_anywhere_decode_the_same():
    client, server = pair()
    sid = client.open_stream()
    client.send_data(sid, b"abcdef" * 100)
    client.ping(5)
    wire = client.data_to_send()
    events = []
    for i in range(len(wire)):
        events += server.receive_data(wire[i:i + 1])
    assert events[0] == yamux.StreamOpened(sid)
    assert b"".join(e.data for e in events if isinstance(e, yamux.DataReceived)) == b"abcdef" * 100


def test_yamux_stream_limit_resets_excess_streams():
    client, server = yamux.YamuxSession(client=True), yamux.YamuxSession(client=False, max_streams=2)
    for _ in range(3):
        client.open_stream()
    assert server.receive_data(client.data_to_send()) == [yamux.StreamOpened(1), yamux.StreamOpened(3)]
    assert yamux.HEADER.unpack(server.data_to_send()) == (0, yamux.TYPE_WINDOW_UPDATE, yamux.FLAG_RST, 5, 0)


# multistream-select

async def _both(dialer, listener):
    a, b = trio.testing.memory_stream_pair()
    results = {}

    async def run(key, fn, stream):
        try:
            results[key] = await fn(BufferedStream(stream))
        except ProtocolError as exc:
            results[key] = exc
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "dialer", dialer, a)
        nursery.start_soon(run, "listener", listener, b)
    return results


def test_multistream_na_then_agreement():
    async def main():
        res = await _both(lambda s: multistream.select(s, ["/meshsub/1.1.0", "/meshsub/1.0.0"]),
                          lambda s: multistream.handle(s, {"/meshsub/1.0.0", "/floodsub/1.0.0"}))
        assert res == {"dialer": "/meshsub/1.0.0", "listener": "/meshsub/1.0.0"}
        res = await _both(lambda s: multistream.select(s, ["/ipfs/id/1.0.0"]),
                          lambda s: multistream.handle(s, {"/meshsub/1.0.0"}))
        assert isinstance(res["dialer"], ProtocolError) and "none of" in str(res["dialer"])

    trio.run(main)


def test_multistream_message_format():
    assert multistream.encode_message("/multistream/1.0.0") == b"\x13/multistream/1.0.0\n"
    assert multistream.encode_message("na") == b"\x03na\n"


# noise and plaintext

def test_noise_xx_agrees_on_keys_and_checks_the_identity():
    initiator, responder = noise.NoiseHandshake(True), noise.NoiseHandshake(False)
    alice, bob = identity_for_index(1), identity_for_index(2)
    responder.read_message(initiator.write_message(b""))
    payload = initiator.read_message(responder.write_message(noise.make_payload(bob, responder.s_pub)))
    assert noise.check_payload(payload, initiator.rs) == bob.peer_id
    payload = responder.read_message(initiator.write_message(noise.make_payload(alice, initiator.s_pub)))
    assert noise.check_payload(payload, responder.rs) == alice.peer_id
    i_send, i_recv = initiator.split()
    r_send, r_recv = responder.split()
    assert r_recv.decrypt(b"", i_send.encrypt(b"", b"ping")) == b"ping"
    assert i_recv.decrypt(b"", r_send.encrypt(b"", b"pong")) == b"pong"
    assert initiator.state.h == responder.state.h
    # a signature over another static key, a tampered message, garbage payloads
    with pytest.raises(ProtocolError, match="does not verify"):
        noise.check_payload(noise.make_payload(bob, bytes(32)), initiator.rs)
    with pytest.raises(ProtocolError, match="authentication"):
        r_recv.decrypt(b"", bytes(20))
    with pytest.raises(ProtocolError):
        noise.check_payload(b"\xff\xff", initiator.rs)
    empty = libp2p_pb2.NoiseHandshakePayload(identity_key=bob.public_key_proto).SerializeToString()
    with pytest.raises(ProtocolError, match="lacks"):
        noise.check_payload(empty, initiator.rs)


def test_noise_channel_opens_messages_split_anywhere():
    """The sans-I/O read side a connection feeds its socket's bytes to: a
    message's plaintext comes out when its last byte is in, and a stream that
    ends inside a message is a protocol error."""
    initiator, responder = noise.NoiseHandshake(True), noise.NoiseHandshake(False)
    bob = identity_for_index(2)
    responder.read_message(initiator.write_message(b""))
    initiator.read_message(responder.write_message(noise.make_payload(bob, responder.s_pub)))
    responder.read_message(initiator.write_message(noise.make_payload(identity_for_index(1), initiator.s_pub)))
    sender = noise.NoiseChannel(BufferedStream(None), *initiator.split())
    receiver = noise.NoiseChannel(BufferedStream(None), *responder.split())
    wire = sender.seal(b"one") + sender.seal(b"two")
    assert receiver.open(wire[:3]) == b""
    assert receiver.open(wire[3:-1]) == b"one"
    assert receiver.open(wire[-1:]) == b"two"
    assert receiver.open(b"") == b""
    assert receiver.open(sender.seal(b"three")[:5]) == b""
    with pytest.raises(ProtocolError, match="closed while reading"):
        receiver.open(b"")


def test_read_poller_calls_back_every_readable_socket_until_removed():
    async def main():
        pairs = [socket.socketpair() for _ in range(3)]
        for a, b in pairs:
            b.setblocking(False)
        poller = ReadPoller()
        got: list[tuple[int, bytes]] = []

        def reader(i: int, sock: socket.socket):
            return lambda: got.append((i, sock.recv(100)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            for i, (_, b) in enumerate(pairs):
                poller.add(b.fileno(), reader(i, b))
            pairs[0][0].send(b"x")
            pairs[2][0].send(b"z")
            with trio.fail_after(5):
                while len(got) < 2:
                    await trio.sleep(0.001)
            assert sorted(got) == [(0, b"x"), (2, b"z")]
            poller.remove(pairs[1][1].fileno())
            pairs[1][0].send(b"y")
            await trio.sleep(0.05)
            assert len(got) == 2  # removed: never called
            nursery.cancel_scope.cancel()
        with pytest.raises(trio.ClosedResourceError):
            poller.add(pairs[1][1].fileno(), reader(1, pairs[1][1]))
        for a, b in pairs:
            a.close()
            b.close()

    trio.run(main)


@pytest.mark.parametrize("security", ["noise", "plaintext"])
def test_upgrade_checks_the_expected_peer_id(security):
    async def main():
        for expect, ok in ((identity_for_index(2).peer_id, True), (identity_for_index(3).peer_id, False)):
            a, b = trio.testing.memory_stream_pair()
            res = {}

            async def dial(a=a, expect=expect):
                try:
                    res["dialer"] = (await upgrade(a, identity_for_index(1), security, dialing=True,
                                                   expect=expect)).peer_id
                except ProtocolError as exc:
                    res["dialer"] = exc
                    await a.aclose()

            async def listen(b=b):
                try:
                    res["listener"] = (await upgrade(b, identity_for_index(2), security, dialing=False)).peer_id
                except (ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    res["listener"] = exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(dial)
                nursery.start_soon(listen)
            if ok:
                assert res == {"dialer": identity_for_index(2).peer_id, "listener": identity_for_index(1).peer_id}
            else:
                assert isinstance(res["dialer"], ProtocolError) and "dialled" in str(res["dialer"])

    trio.run(main)


def test_plaintext_exchange_must_match_its_key():
    good = plaintext.encode_exchange(identity_for_index(1))
    body = good[1:]
    assert plaintext.check_exchange(body) == identity_for_index(1).peer_id
    forged = libp2p_pb2.Exchange()
    forged.ParseFromString(body)
    forged.id = identity_for_index(2).peer_id
    with pytest.raises(ProtocolError, match="claims"):
        plaintext.check_exchange(forged.SerializeToString())
    with pytest.raises(ProtocolError, match="lacks"):
        plaintext.check_exchange(libp2p_pb2.Exchange(id=forged.id).SerializeToString())


def test_a_cancelled_connection_closes_its_socket_so_the_remote_sees_it_end():
    """A node killed inside its process (its task cancelled) ends its
    dialled connections at once, as a killed process does. The test holds
    the connection, so no garbage collection can close the socket for it."""
    async def main():
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        remote: list = []
        remote_ended = trio.Event()

        async def serve(stream):
            conn = await upgrade(stream, identity_for_index(2), "plaintext", dialing=False)
            remote.append(conn)
            await conn.run(trio.lowlevel.checkpoint)
            remote_ended.set()

        poller = ReadPoller()
        killed = trio.CancelScope()

        async def dialler(conn):
            with killed:
                await conn.run(trio.lowlevel.checkpoint)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poller.run)
            nursery.start_soon(trio.serve_listeners, serve, listeners)
            stream = await trio.open_tcp_stream("127.0.0.1", listeners[0].socket.getsockname()[1])
            conn = await upgrade(stream, identity_for_index(1), "plaintext", dialing=True,
                                 expect=identity_for_index(2).peer_id, poller=poller)
            nursery.start_soon(dialler, conn)
            with trio.fail_after(5):
                while not remote:
                    await trio.sleep(0.01)
            killed.cancel()
            with trio.fail_after(2):
                await remote_ended.wait()
            assert remote[0].close_reason == "closed by peer"
            assert conn.tcp.socket.fileno() == -1
            nursery.cancel_scope.cancel()

    trio.run(main)
