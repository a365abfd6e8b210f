"""`python -m node.shaping.proxy --config FILE`: a transparent TCP proxy that
shapes what a foreign router sends, per destination, in user space.

Why: on a kernel without sch_netem our router delays, jitters and loses its
own egress (node/shaping/shaper.py), but a foreign router (rust-libp2p,
py-libp2p, any gossipsub-interop image) cannot. This proxy runs in the
foreign node's network namespace (a sidecar container sharing it, see
orchestrator/shaping/proxy.py), where iptables `nat REDIRECT` sends it
- every TCP connection the node dials (OUTPUT) to `outbound_port`, and
- every connection dialled to the node's listen port (PREROUTING) to
  `inbound_port`.
It reads the real destination (SO_ORIGINAL_DST), opens the real connection
and relays both ways. Bytes from the node to the peer go through the peer's
StreamShaper (one per peer address, shared by all connections to it, so the
link is one FIFO as a netem qdisc is); bytes towards the node are relayed
as they come: the peer shapes its own egress (our router itself, a foreign
peer through its own proxy).

The proxy's own connections must not be redirected again: iptables exempts
the proxy's uid (`-m owner --uid-owner`), so it runs as a uid of its own.
A connection that breaks, sends garbage, or reaches the proxy without a
redirect (no original destination) ends alone; the proxy never exits for it.
Counters go to stdout as NDJSON ("proxy stats"), periodically and at exit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import socket
import struct
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from node.config import LinkShape
from node.shaping.shaper import LinkShaper, Uplink
from node.shaping.stream import GaveUp, StreamShaper

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
READ_BYTES = 65536
QUEUE_SEGMENTS = 1024  # per connection: ~1.4 MB in the delay line before the node is back-pressured
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ProxyConfig:
    """What the orchestrator tells the proxy. `per_dest` maps peer IPv4
    addresses to the shape of what the node sends them; `default` shapes
    every other destination; `seed` seeds loss and jitter."""

    outbound_port: int
    inbound_port: int
    per_dest: Mapping[str, LinkShape] = field(default_factory=dict)
    default: LinkShape = LinkShape()
    uplink_bps: int | None = None
    seed: int = 0
    stats_interval_s: float = 10.0

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["per_dest"] = {ip: dataclasses.asdict(s) for ip, s in sorted(self.per_dest.items())}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ProxyConfig:
        data: dict[str, Any] = json.loads(text)
        data["per_dest"] = {ip: LinkShape(**s) for ip, s in data.get("per_dest", {}).items()}
        data["default"] = LinkShape(**data.get("default", {}))
        return cls(**data)


@dataclass
class DestStats:
    connections: int = 0
    bytes_out: int = 0  # node -> peer, shaped
    bytes_in: int = 0  # peer -> node
    segments: int = 0
    retransmits: int = 0  # segments lost and sent again (see node/shaping/stream.py)
    gave_up: int = 0
    errors: int = 0


def original_dst(sock: Any) -> tuple[str, int]:
    """The (ip, port) a redirected connection was dialled to."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


class ShapingProxy:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.uplink = Uplink(config.uplink_bps)
        self.shapers: dict[str, StreamShaper] = {}
        self.stats: dict[str, DestStats] = {}
        self.refused = 0  # connections with no original destination (not redirected)

    def shaper(self, ip: str) -> StreamShaper:
        shaper = self.shapers.get(ip)
        if shaper is None:
            shape = self.config.per_dest.get(ip, self.config.default)
            link = LinkShaper(shape, self.uplink, random.Random(self.rng.getrandbits(64)))
            shaper = self.shapers[ip] = StreamShaper(link)
        return shaper

    def dest(self, ip: str) -> DestStats:
        return self.stats.setdefault(ip, DestStats())

    # ------------------------------------------------------------ relaying

    async def relay(self, node: trio.abc.Stream, peer: trio.abc.Stream, peer_ip: str) -> None:
        """Until both directions end or either breaks: a broken direction
        (reset, garbage the peer refuses, a segment TCP would give up on)
        ends the whole connection, as in TCP."""
        stats = self.dest(peer_ip)
        stats.connections += 1
        send, recv = trio.open_memory_channel[tuple[float, bytes]](QUEUE_SEGMENTS)
        try:
            async with trio.open_nursery() as nursery:
                def guarded(fn: Any, *args: Any) -> None:
                    nursery.start_soon(self._ended_by_error, nursery.cancel_scope, stats, fn, *args)

                guarded(self._shape_out, node, send, peer_ip)
                guarded(self._deliver, recv, peer)
                guarded(self._pass_in, peer, node, stats)
        finally:
            await trio.aclose_forcefully(node)
            await trio.aclose_forcefully(peer)

    @staticmethod
    async def _ended_by_error(scope: trio.CancelScope, stats: DestStats, fn: Any, *args: Any) -> None:
        try:
            await fn(*args)
        except GaveUp:
            stats.gave_up += 1
            scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            stats.errors += 1
            scope.cancel()

    async def _shape_out(self, node: trio.abc.Stream, send: trio.MemorySendChannel, peer_ip: str) -> None:
        shaper, stats = self.shaper(peer_ip), self.dest(peer_ip)
        async with send:
            while chunk := await node.receive_some(READ_BYTES):
                stats.bytes_out += len(chunk)
                if shaper.noop:
                    await send.send((0.0, chunk))
                    continue
                before = shaper.retransmits
                segments = shaper.schedule(trio.current_time(), len(chunk))
                stats.segments += len(segments)
                stats.retransmits += shaper.retransmits - before
                for seg in segments:
                    await send.send((seg.due, chunk[seg.start:seg.end]))

    @staticmethod
    async def _deliver(recv: trio.MemoryReceiveChannel, peer: trio.abc.Stream) -> None:
        """Send each segment when it is due; segments already due go out together."""
        async with recv:
            async for due, data in recv:
                await trio.sleep_until(due)
                batch = [data]
                while True:
                    try:
                        due, more = recv.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    await trio.sleep_until(due)
                    batch.append(more)
                await peer.send_all(b"".join(batch))
        await _send_eof(peer)

    @staticmethod
    async def _pass_in(peer: trio.abc.Stream, node: trio.abc.Stream, stats: DestStats) -> None:
        while chunk := await peer.receive_some(READ_BYTES):
            stats.bytes_in += len(chunk)
            await node.send_all(chunk)
        await _send_eof(node)

    # ------------------------------------------------------------ accepting

    async def outbound(self, node: trio.SocketStream) -> None:
        """A connection the node dialled: relay it to where it was going."""
        await self._accepted(node, inbound=False)

    async def inbound(self, peer_side: trio.SocketStream) -> None:
        """A connection a peer dialled to the node: relay it to the node."""
        await self._accepted(peer_side, inbound=True)

    async def _accepted(self, accepted: trio.SocketStream, inbound: bool) -> None:
        try:
            ip, port = original_dst(accepted.socket)
            if (ip, port) == accepted.socket.getsockname()[:2]:
                raise OSError("not redirected: no original destination")
            with trio.fail_after(CONNECT_TIMEOUT_S):
                upstream = await trio.open_tcp_stream(ip, port)
        except (OSError, trio.TooSlowError):
            self.refused += 1
            await trio.aclose_forcefully(accepted)
            return
        if inbound:
            peer_ip = accepted.socket.getpeername()[0]
            await self.relay(upstream, accepted, peer_ip)
        else:
            await self.relay(accepted, upstream, ip)

    def snapshot(self) -> dict[str, Any]:
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "msg": "proxy stats",
            "refused": self.refused,
            "dests": {ip: dataclasses.asdict(s) for ip, s in sorted(self.stats.items())},
        }


async def _send_eof(stream: trio.abc.Stream) -> None:
    if isinstance(stream, trio.abc.HalfCloseableStream):
        try:
            await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True), flush=True)


async def _handle(handler: Any, stream: trio.SocketStream) -> None:
    """One connection: whatever goes wrong with it ends it, never the proxy."""
    try:
        await handler(stream)
    except Exception as exc:  # noqa: BLE001 - a connection must never take the proxy down
        _emit({"msg": "proxy connection error", "error": f"{type(exc).__name__}: {exc}"})
        await trio.aclose_forcefully(stream)


async def serve(config: ProxyConfig, task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED) -> None:
    proxy = ShapingProxy(config)
    out_listeners = await trio.open_tcp_listeners(config.outbound_port)
    in_listeners = await trio.open_tcp_listeners(config.inbound_port)
    _emit({"msg": "proxy ready", "outbound_port": config.outbound_port, "inbound_port": config.inbound_port,
           "destinations": sorted(config.per_dest)})
    task_status.started(proxy)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, lambda s: _handle(proxy.outbound, s), out_listeners)
            nursery.start_soon(trio.serve_listeners, lambda s: _handle(proxy.inbound, s), in_listeners)
            nursery.start_soon(_stats_loop, proxy)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
    finally:
        _emit(proxy.snapshot())


async def _stats_loop(proxy: ShapingProxy) -> None:
    while True:
        await trio.sleep(proxy.config.stats_interval_s)
        _emit(proxy.snapshot())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.shaping.proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="the proxy's JSON configuration (ProxyConfig)")
    args = parser.parse_args(argv)
    try:
        config = ProxyConfig.from_json(args.config.read_text())
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: cannot load proxy config {args.config}: {exc}", file=sys.stderr)
        return 2
    trio.run(serve, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
