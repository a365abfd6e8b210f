"""The shaping proxy without Docker: the stream shaper's schedule (pure
arithmetic), the relay on trio's mock clock (no sleeping), its config file,
the iptables rules it is given, and connections that cannot be relayed."""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path

import pytest
import trio
import trio.testing

from node.config import LinkShape
from node.shaping.shaper import LinkShaper, Uplink
from node.shaping.stream import MAX_RETRANSMITS, MSS_BYTES, RTO_MIN_S, GaveUp, StreamShaper
from node.shaping.proxy import ProxyConfig, ShapingProxy, original_dst, serve
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.shaping.proxy import (
    CHAIN_IN,
    CHAIN_OUT,
    ProxyInfo,
    hook_commands,
    iptables_commands,
    proxy_needed,
    proxy_shapes,
)
from orchestrator.experiment.spec import load_experiment
from tests.ports import free_ports


class ScriptedRandom(random.Random):
    """random() answers from a script (loss draws), uniform() is the midpoint."""

    def __init__(self, draws: list[float]) -> None:
        super().__init__(0)
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


def stream(shape: LinkShape, rng: random.Random | None = None, uplink: int | None = None) -> StreamShaper:
    return StreamShaper(LinkShaper(shape, Uplink(uplink), rng or random.Random(1)))


# ---------------------------------------------------------------- schedule


def test_delay_applies_to_every_segment_and_chunks_are_cut_at_the_mss() -> None:
    shaper = stream(LinkShape(delay_ms=20))
    segs = shaper.schedule(1.0, 2 * MSS_BYTES + 10)
    assert [(s.start, s.end) for s in segs] == [(0, MSS_BYTES), (MSS_BYTES, 2 * MSS_BYTES),
                                                 (2 * MSS_BYTES, 2 * MSS_BYTES + 10)]
    assert [s.due for s in segs] == pytest.approx([1.02] * 3)
    assert shaper.retransmits == 0 and shaper.segments == 3


def test_jitter_never_reorders() -> None:
    shaper = stream(LinkShape(delay_ms=30, jitter_ms=25), random.Random(7))
    dues = [seg.due for i in range(300) for seg in shaper.schedule(i * 0.001, 100)]
    assert dues == sorted(dues)
    assert min(d - i * 0.001 for i, d in enumerate(dues)) >= 0.005 - 1e-9
    assert len({round(d - i * 0.001, 6) for i, d in enumerate(dues)}) > 50  # it does jitter


def test_a_lost_segment_is_retransmitted_after_an_rto_and_the_next_waits_behind_it() -> None:
    # first segment: lost, lost, delivered; second: delivered at once
    shaper = stream(LinkShape(delay_ms=10, loss=0.5), ScriptedRandom([0.1, 0.2, 0.9, 0.9]))
    first, second = shaper.schedule(0.0, MSS_BYTES + 1)
    rto = RTO_MIN_S + 0.02
    assert first.retransmits == 2
    assert first.due == pytest.approx(rto + 2 * rto + 0.01)  # RTO doubles
    assert second.retransmits == 0 and second.due == pytest.approx(first.due)  # FIFO: in order
    assert shaper.retransmits == 2


def test_a_segment_lost_too_often_ends_the_connection() -> None:
    shaper = stream(LinkShape(loss=1.0))
    with pytest.raises(GaveUp, match=str(MAX_RETRANSMITS + 1)):
        shaper.schedule(0.0, 10)


def test_rate_is_serialization_time_per_segment() -> None:
    shaper = stream(LinkShape(rate_bps=1_000_000))
    segs = shaper.schedule(0.0, 3 * MSS_BYTES)
    assert [s.due for s in segs] == pytest.approx([(i + 1) * MSS_BYTES * 8 / 1e6 for i in range(3)])


# ---------------------------------------------------------------- relay


async def _relay_pair(proxy: ShapingProxy, nursery: trio.Nursery, peer_ip: str):
    node_app, node_proxy = trio.testing.memory_stream_pair()
    peer_proxy, peer_app = trio.testing.memory_stream_pair()
    nursery.start_soon(proxy.relay, node_proxy, peer_proxy, peer_ip)
    return node_app, peer_app


def test_relay_delays_what_the_node_sends_per_destination_and_not_what_it_receives() -> None:
    proxy = ShapingProxy(ProxyConfig(1, 2, {"10.0.0.2": LinkShape(delay_ms=20)}, LinkShape(delay_ms=50)))
    seen: dict[str, float] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            t0 = trio.current_time()
            for ip in ("10.0.0.2", "10.0.0.9"):
                node_app, peer_app = await _relay_pair(proxy, nursery, ip)
                await node_app.send_all(b"ping")
                assert await peer_app.receive_some(100) == b"ping"
                seen[ip] = trio.current_time() - t0
                t1 = trio.current_time()
                await peer_app.send_all(b"pong")
                assert await node_app.receive_some(100) == b"pong"
                seen[ip + " back"] = trio.current_time() - t1
                await node_app.send_eof()
                assert await peer_app.receive_some(100) == b""  # half-close passes through
                await peer_app.aclose()
                t0 = trio.current_time()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen == pytest.approx({"10.0.0.2": 0.02, "10.0.0.2 back": 0.0, "10.0.0.9": 0.05, "10.0.0.9 back": 0.0})
    assert proxy.stats["10.0.0.2"].bytes_out == 4 and proxy.stats["10.0.0.2"].bytes_in == 4
    assert set(proxy.shapers) == {"10.0.0.2", "10.0.0.9"}


def test_a_link_gave_up_by_tcp_ends_its_connection_and_is_counted() -> None:
    proxy = ShapingProxy(ProxyConfig(1, 2, {"10.0.0.3": LinkShape(loss=1.0)}))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            node_app, peer_app = await _relay_pair(proxy, nursery, "10.0.0.3")
            await node_app.send_all(b"x")
            with pytest.raises(trio.BrokenResourceError):
                for _ in range(10):
                    await node_app.send_all(b"more")
                    await trio.sleep(1)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert proxy.stats["10.0.0.3"].gave_up == 1


# ---------------------------------------------------------------- accepting


def test_original_dst_reads_the_sockaddr_netfilter_returns() -> None:
    class Sock:
        def getsockopt(self, level: int, name: int, size: int) -> bytes:
            assert (level, name, size) == (socket.SOL_IP, 80, 16)
            return struct.pack("!HH4s8x", socket.AF_INET, 9000, socket.inet_aton("172.20.0.5"))

    assert original_dst(Sock()) == ("172.20.0.5", 9000)


def test_unredirected_and_garbage_connections_end_alone_and_the_proxy_keeps_serving() -> None:
    out_port, in_port = free_ports(2)
    config = ProxyConfig(out_port, in_port, stats_interval_s=3600)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            proxy = await nursery.start(serve, config)
            for port in (out_port, in_port, out_port):
                conn = await trio.open_tcp_stream("127.0.0.1", port)
                try:
                    await conn.send_all(b"\x00\xffgarbage" * 100)
                except trio.BrokenResourceError:
                    pass
                with trio.fail_after(10):
                    try:
                        assert await conn.receive_some(10) == b""
                    except trio.BrokenResourceError:
                        pass  # reset: just as ended
                await conn.aclose()
            assert proxy.refused == 3
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_config_round_trips_through_json() -> None:
    config = ProxyConfig(19000, 19001, {"10.1.0.3": LinkShape(5, 1, 0.01, None)}, LinkShape(delay_ms=7),
                         uplink_bps=10_000, seed=42)
    assert ProxyConfig.from_json(config.to_json()) == config


# ---------------------------------------------------------------- rules


def test_rules_exempt_the_proxy_loopback_and_the_gateway_and_redirect_the_rest() -> None:
    rules = [" ".join(r) for r in iptables_commands(9000, exempt=["172.30.0.1"], proxy_uid=777,
                                                    outbound_port=19000, inbound_port=19001)]
    out = [r for r in rules if f"-A {CHAIN_OUT}" in r]
    inb = [r for r in rules if f"-A {CHAIN_IN}" in r]
    assert out[-1].endswith("-p tcp -j REDIRECT --to-ports 19000")  # everything else, last
    assert any("--uid-owner 777 -j RETURN" in r for r in out[:-1])
    assert any("-o lo -j RETURN" in r for r in out[:-1])
    assert any("-d 172.30.0.1/32 -j RETURN" in r for r in out[:-1])
    assert inb[-1].endswith("-p tcp --dport 9000 -j REDIRECT --to-ports 19001")
    assert any("-s 172.30.0.1/32 -j RETURN" in r for r in inb[:-1])
    assert [add[5:] for _, add in hook_commands()] == [
        ["OUTPUT", "-p", "tcp", "-j", CHAIN_OUT], ["PREROUTING", "-p", "tcp", "-j", CHAIN_IN]]


def test_manifest_record_names_the_path_and_the_loss_model() -> None:
    record = ProxyInfo("n3", "gtb-x-n3-proxy", "/r/configs/n3.proxy.json", (), 0).manifest_record()
    assert record["path"] == "proxy" and record["detail"] == "proxy: user-space, per destination"
    assert "RTO" in record["loss"] and record["unshaped_connections"] == 0


def test_proxy_shapes_are_what_our_router_would_shape_itself() -> None:
    resolved = load_experiment(Path("topologies/quick.yaml")).resolve()
    ips = {n.name: f"10.9.0.{i + 2}" for i, n in enumerate(resolved.nodes)}
    userspace = ShapingCapabilities(kernel_delay=False, kernel_rate=True, path="userspace+htb", detail="")
    netem = ShapingCapabilities(kernel_delay=True, kernel_rate=True, path="netem", detail="")
    shapes = proxy_shapes(resolved, "n0", ips, userspace, seed=5)
    neighbours = resolved.neighbours()["n0"]
    assert sorted(shapes.per_dest) == sorted(ips[p] for p in neighbours) and neighbours
    assert set(shapes.per_dest.values()) == {LinkShape(delay_ms=30)}
    assert shapes.default == LinkShape(delay_ms=30) and shapes.uplink_bps is None and shapes.seed == 5
    assert proxy_needed(userspace) and not proxy_needed(netem)
