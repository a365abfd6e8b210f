"""The router daemon: one protocol engine on trio, a libp2p peer over TCP.

One nursery holds the node's whole life: the peer listener, the control
endpoint, a dial loop per initial peer, the heartbeat timer and the read
poller (one task reads every peer connection). The trace is written through
(each engine step's events in one write, so a killed node loses nothing it
traced) and event-loop lag is the lateness of the heartbeat: the heartbeat
is the router's one timer, and all it wakes for at rest. Each connection is
owned by the task that made it (the listener's handler or a dial loop), so when a
connection ends its owner cleans up and, for a dial loop, redials.

Rules that live here (docs/running.md):

- The wire (node/libp2p, docs/wire.md): TCP, multistream-select, the
  experiment's security protocol (noise or plaintext), yamux, then one
  pubsub stream each way (node/runtime/peer.py). A dialler checks that the
  remote has the peer id it expected; anyone may dial in, and an inbound peer
  that is not in the experiment is an ordinary peer known by its peer id.
  A peer that fails the handshake is dropped, and refused if we are isolated
  from it.
- One logical peer per peer id. Two connections to the same peer (simultaneous
  dials, or a redial before we noticed the old connection died): the one
  dialled by the lower peer id wins; between two dialled by the same side the
  newer wins (the older is stale). Both ends apply the same rule, so they
  keep the same TCP connection. Replacing a connection is remove_peer +
  add_peer on the engine, so both ends restart from the same state.
- A peer that breaks a wire rule (bad handshake, unknown yamux frame, a
  stream window overrun), sends bytes that are not frames, a frame above
  max_frame or an undecodable RPC is dropped; valid RPCs with nonsense go to
  the engine, which ignores what it does not know.
- Every RPC the engine emits is handed to the peer's bounded queue (SEND_RPC)
  or dropped there when the queue is full or the RPC exceeds max_frame
  (DROP_RPC). The router never waits on one peer.
- Dial on send (node/runtime/dial_on_send.py): an engine that sends to peers
  it has no connection to (episub) gets one dialled from the address book;
  its RPCs wait for it (traced when handed to the link), and a failed dial
  is DROP_RPC for them and `remove_peer` for the engine. Such a connection
  is not redialled when it ends.
- The engine learns each peer's IP with the peer (P6): the remote address
  of its TCP connection, our dials leaving from our listen address
  (node/runtime/addresses.py).
- The codec follows the engine: episub's own protobuf (node/wire/episub.py)
  on /episub/1.0.0, pubsub's RPC on every other protocol.
- Isolation (`isolate`/`rejoin`, used by churn's disconnect/reconnect): closes
  the connections to the named peers (or all), refuses their dials and stops
  dialling them until `rejoin`.
- Names: the control endpoint and status speak the experiment's names
  (`peer_names` in the config); a peer without one is its base58 peer id.
- Time: the engine, the trace and the lag read the experiment's clock
  (`NodeConfig.clock`), the wall clock unless the run is time-dilated; then
  the heartbeat sleeps k times its interval (node/dilation.py).
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import trio

from node.wire.codec import FrameError, encode_frame
from node.config import LinkShape, NodeConfig, PeerAddress
from node.engine import TraceType, make_router
from node.engine.adversary import Sybil
from node.engine.api import Output, protocol_order
from node.wire.episub import EPISUB_ID, decode_episub_rpc, encode_episub_rpc
from node.libp2p.identity import INJECTOR_INDEX, identity_for_index, peer_id_from_b58, peer_id_to_b58
from node.libp2p.connection import MuxedConnection, upgrade
from node.libp2p.errors import ProtocolError
from node.libp2p.poller import ReadPoller
from node.runtime.addresses import remote_ip, source_address
from node.runtime.dial_on_send import SendDials
from node.runtime.lag import LagMeter
from node.runtime.peer import PeerLink
from node.shaping.shaper import LinkShaper, Uplink
from node.trace.scores import ScoreFile
from node.trace.tree import TreeFile
from node.trace.file import TraceWriter, rpc_event
from node.wire.rpc import Rpc, RpcDecoder, encode_rpc

log = logging.getLogger("node")

LAG_WRITE_INTERVAL_S = 5.0
DRAIN_TIMEOUT_S = 2.0
GO_AWAY_TIMEOUT_S = 0.5
CONNECT_ATTEMPTS = 5  # one-shot dials from the control endpoint
DIAL_ERRORS = (ProtocolError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class PeerError(ValueError):
    """A peer sent something we drop it for."""


class ConnectError(RuntimeError):
    """A one-shot dial failed."""


def codec(protocol_id: str, message_id_function: str) -> tuple[Callable[[bytes], Rpc], Callable[[Rpc], bytes]]:
    """How an engine's RPCs are decoded and encoded: episub's protobuf on
    /episub/1.0.0, pubsub's RPC on every other protocol."""
    if protocol_id == EPISUB_ID:
        decode = partial(decode_episub_rpc, message_id_function=message_id_function)
        return decode, encode_episub_rpc  # type: ignore[return-value]
    return RpcDecoder(message_id_function).decode, encode_rpc


class Node:
    def __init__(self, cfg: NodeConfig, trace: TraceWriter | None = None) -> None:
        """`trace`: where trace events go instead of cfg.trace_path (the
        contract entry point's stdout, node/interop/contract.py)."""
        self.cfg = cfg
        self.name = cfg.name
        self.identity = cfg.identity
        self.peer_id = self.identity.peer_id
        self.auth = cfg.auth()
        self.sybil = cfg.sybil()  # None: an honest node
        behaviours = self.sybil.behaviours(None) if self.sybil else ()
        self.engine = make_router(cfg.router, self.peer_id, cfg.seed, cfg.params, auth=self.auth, behaviours=behaviours,
                                  validation_delay=cfg.validation_delay)
        if cfg.app_specific_scores:
            self.engine.set_app_specific_scores(  # type: ignore[attr-defined]
                {peer_id_from_b58(pid): value for pid, value in cfg.app_specific_scores.items()})
        preferred = self.engine.protocol_id
        self.protocols = protocol_order(preferred, self.engine.supported_protocols)
        self.names = {peer_id_from_b58(pid): name for pid, name in cfg.peer_names.items()}
        self.peer_ids = {name: pid for pid, name in self.names.items()}
        self.shaping = {peer_id_from_b58(pid): shape for pid, shape in cfg.shaping.items()}
        self.trace = trace or TraceWriter(Path(cfg.trace_path), cfg.peer_id)
        self.scores = ScoreFile(Path(cfg.scores_path), flush_each=True) if cfg.scores_path else None  # as the tree's
        self.tree = TreeFile(Path(cfg.tree_path), flush_each=True) if cfg.tree_path else None  # a kill loses none
        self.lag = LagMeter()
        self.lag_path = Path(cfg.lag_path or cfg.trace_path + ".lag.json")
        self.uplink = Uplink(cfg.uplink_bps)
        self.rng = random.Random(f"runtime-{cfg.seed}")  # never the engine's RNG
        self.decode, self.encode = codec(self.engine.protocol_id, cfg.message_id)
        self.dials_on_send = bool(getattr(self.engine, "dials_on_send", False))
        self.address_book = {peer_id_from_b58(p.peer_id): p for p in cfg.address_book}
        self.send_dials = SendDials(cfg.queue_len)
        self.poller = ReadPoller()  # reads every peer connection (node/libp2p/poller.py)
        self.links: dict[bytes, PeerLink] = {}
        self.asked: set[bytes] = set()  # peers the engine asked for, dialled or connected now
        self.topics: set[str] = set()
        self.isolated: set[str] | None = None  # None: not isolated; empty: from everyone
        self.counters: Counter[str] = Counter()
        self.clock = cfg.clock  # the experiment's: dilated when the run is (node/dilation.py)
        self.started_ns = time.time_ns()
        self.listen_port = cfg.listen_port
        self.control_port = cfg.control_port
        self._changed = trio.Event()
        self._shutdown = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.trace_error = ""  # why the trace could not be written; the router then stops

    # Life

    async def run(self, *, handle_signals: bool = True, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from node.runtime.control import serve_control  # noqa: PLC0415 - control imports us

        cfg = self.cfg
        peer_listeners = await trio.open_tcp_listeners(cfg.listen_port, host=cfg.listen_host)
        control_listeners = await trio.open_tcp_listeners(cfg.control_port, host=cfg.control_host)
        self.listen_port = peer_listeners[0].socket.getsockname()[1]
        self.control_port = control_listeners[0].socket.getsockname()[1]
        log.info(
            "%s (%s, %s) listening on %s:%d, control on %s:%d", self.name, cfg.router,
            peer_id_to_b58(self.peer_id), cfg.listen_host, self.listen_port, cfg.control_host, self.control_port,
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self.poller.run)
                if handle_signals:
                    nursery.start_soon(self._signals)
                nursery.start_soon(trio.serve_listeners, self._inbound, peer_listeners)
                nursery.start_soon(trio.serve_listeners, lambda s: serve_control(self, s), control_listeners)
                for topic in cfg.topics:
                    self.subscribe(topic)
                nursery.start_soon(self._heartbeats)
                for peer in cfg.initial_peers:
                    nursery.start_soon(self._dial_loop, peer, True)
                task_status.started((self.listen_port, self.control_port))
                await self._shutdown.wait()
                log.info("%s shutting down: leaving %s", self.name, sorted(self.topics))
                await self._leave_all()
                nursery.cancel_scope.cancel()
        finally:
            self.trace.close()
            for side_file in (self.scores, self.tree):
                if side_file is not None:
                    side_file.close()
            self.lag.write(self.lag_path, self.name)
            log.info("%s stopped (%s)", self.name, dict(self.counters))

    def request_shutdown(self) -> None:
        self._shutdown.set()

    def _trace_failed(self, exc: OSError) -> None:
        """A router whose trace cannot be written (a full disk, a removed
        directory) would go on producing figures nobody can see: it says why
        once and stops, and `run_node` exits 1. Whatever the write was called
        from (a peer's frame, a publish, a heartbeat), nothing else fails."""
        if not self.trace_error:
            self.trace_error = f"cannot write its trace: {exc}"
            log.error("%s %s; stopping", self.name, self.trace_error)
            self.request_shutdown()

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("%s: signal %d", self.name, signum)
                self.request_shutdown()

    async def drain(self) -> None:
        """The end of a run: LEAVE every topic (PRUNE to the mesh) and give
        the queues a bounded time to empty through the shaper. The node keeps
        receiving, so what its peers still send reaches its trace."""
        for topic in sorted(self.topics):
            self.unsubscribe(topic)
        delays = [s.delay_ms + s.jitter_ms for s in self.cfg.shaping.values()]
        delays.append(self.cfg.default_shape.delay_ms + self.cfg.default_shape.jitter_ms)
        with trio.move_on_after(DRAIN_TIMEOUT_S + max(delays) / 1000):
            while any(not link.idle() for link in self.links.values()):
                await trio.sleep(0.01)

    async def _leave_all(self) -> None:
        """Graceful shutdown: drain, then say GoAway(normal) on every
        connection."""
        await self.drain()
        conns = [link.conn for link in self.links.values()]
        for conn in conns:
            conn.go_away()
        with trio.move_on_after(GO_AWAY_TIMEOUT_S):
            while any(conn.backlog and not conn.closed for conn in conns):
                await trio.sleep(0.01)

    async def _heartbeats(self) -> None:
        """The engine's heartbeat; also the lag sample and, every
        LAG_WRITE_INTERVAL_S, the lag file."""
        interval = self.clock.wall_s(self.engine.heartbeat_interval / 1e9)
        due = trio.current_time() + self.clock.wall_s(self.engine.first_heartbeat / 1e9)
        next_lag_write = due
        while True:
            await trio.sleep_until(due)
            t = trio.current_time()
            self.lag.record((t - due) / self.clock.factor)  # on the experiment's clock, as the traces
            now = self.clock.now_ns()
            self._apply(self.engine.heartbeat(now), now)
            if t >= next_lag_write:
                self.lag.write(self.lag_path, self.name)
                next_lag_write = t + LAG_WRITE_INTERVAL_S
            due += interval
            if due < t:
                due = t + interval

    async def _wake(self, at: int) -> None:
        """Wake the engine at `at` (its clock, ns) for the work it finishes
        then (a validation that takes time); never before `at`, even if the
        wall clock and trio's disagree by a hair."""
        await trio.sleep(self.clock.wall_s(max(0, at - self.clock.now_ns()) / 1e9))
        now = max(self.clock.now_ns(), at)
        self._apply(self.engine.wake(now), now)

    # Connections

    def label(self, peer_id: bytes) -> str:
        """A peer's experiment name, or its base58 peer id."""
        name = self.names.get(peer_id)
        if name is None:
            name = self.names[peer_id] = peer_id_to_b58(peer_id)
        return name

    def _blocked(self, peer_id: bytes) -> bool:
        return self.isolated is not None and (not self.isolated or self.label(peer_id) in self.isolated)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_dialable(self, peer_id: bytes | None) -> None:
        while peer_id is not None and (self._blocked(peer_id) or peer_id in self.links):
            await self._changed.wait()

    def _shape_for(self, peer_id: bytes) -> LinkShape:
        return self.shaping.get(peer_id, self.cfg.default_shape)

    async def _upgrade(self, stream: trio.abc.Stream, *, dialing: bool, expect: bytes | None) -> MuxedConnection:
        with trio.fail_after(self.cfg.handshake_timeout_ms / 1000):
            return await upgrade(stream, self.identity, self.cfg.security, dialing=dialing, expect=expect,
                                 admit=None if dialing else self._refuse_if_isolated, poller=self.poller)

    def _refuse_if_isolated(self, peer_id: bytes) -> None:
        if self._blocked(peer_id):
            raise ProtocolError(f"refused {self.label(peer_id)}: isolated from it")

    async def _inbound(self, stream: trio.SocketStream) -> None:
        try:
            conn = await self._upgrade(stream, dialing=False, expect=None)
        except (ProtocolError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.counters["handshakes_failed"] += 1
            log.info("%s: inbound handshake failed: %s", self.name, exc)
            await trio.aclose_forcefully(stream)
            return
        await self._run_connection(conn, conn.peer_id)

    async def _dial_loop(
        self, addr: PeerAddress | tuple[str, int, bytes | None], persistent: bool,
        task_status=trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Dial with capped exponential backoff. Persistent: keep the peer
        connected for the node's life (redial when the connection ends).
        One-shot: give up after CONNECT_ATTEMPTS failures (ConnectError)."""
        if isinstance(addr, PeerAddress):
            host, port, expect = addr.host, addr.port, peer_id_from_b58(addr.peer_id)
        else:
            host, port, expect = addr
        first = self.cfg.dial_backoff_ms / 1000
        cap = self.cfg.dial_backoff_max_ms / 1000
        backoff = first
        failures = 0
        reported = False
        while True:
            await self._wait_dialable(expect)
            try:
                conn = await self._open(host, port, expect)
            except DIAL_ERRORS as exc:
                failures += 1
                self.counters["dials_failed"] += 1
                if failures == 1 or failures % 10 == 0:
                    log.info("%s: dial %s:%d failed (%d): %s", self.name, host, port, failures, exc)
                if not persistent and failures >= CONNECT_ATTEMPTS:
                    raise ConnectError(f"could not connect to {host}:{port}: {exc}") from None
                await trio.sleep(backoff * (0.5 + self.rng.random()))
                backoff = min(backoff * 2, cap)
                continue
            failures = 0
            if not reported:
                task_status.started(self.label(conn.peer_id))
                reported = True
            if self._blocked(conn.peer_id):
                await trio.aclose_forcefully(conn.tcp)
                admitted = False
            else:
                admitted = await self._run_connection(conn, self.peer_id)
            if not persistent:
                return
            expect = expect or conn.peer_id
            backoff = first if admitted else min(backoff * 2, cap)
            await trio.sleep(backoff * (0.5 + self.rng.random()))

    async def _open(self, host: str, port: int, expect: bytes | None) -> MuxedConnection:
        """One dial: TCP, then the libp2p upgrade (DIAL_ERRORS when it fails)."""
        with trio.fail_after(self.cfg.handshake_timeout_ms / 1000):
            stream = await trio.open_tcp_stream(host, port, local_address=source_address(self.cfg.listen_host))
        try:
            return await self._upgrade(stream, dialing=True, expect=expect)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise

    def _hold(self, peer: bytes, rpc: Rpc, now: int, events: list) -> None:
        """An RPC to a peer that is not ready: it waits for the connection,
        which is dialled unless one is open or being dialled."""
        if not self.send_dials.hold(peer, rpc):
            self.counters["dropped"] += 1
            events.append(rpc_event(TraceType.DROP_RPC, now, peer, rpc))
            return
        if peer not in self.links and self.send_dials.start(peer):
            assert self._nursery is not None
            self._nursery.start_soon(self._dial_on_send, peer)

    async def _dial_on_send(self, peer: bytes) -> None:
        """One attempt to the address book's address for `peer`; the
        connection then lives as any other until it ends."""
        addr = self.address_book.get(peer)
        reason = "no address for it"
        try:
            if addr is not None and self._blocked(peer):
                reason = "isolated from it"
            elif addr is not None:
                conn = await self._open(addr.host, addr.port, peer)
                reason = "its connection ended before its pubsub stream opened"
                if self._blocked(peer):
                    await trio.aclose_forcefully(conn.tcp)
                else:
                    await self._run_connection(conn, self.peer_id)
        except DIAL_ERRORS as exc:
            reason = str(exc) or type(exc).__name__
        finally:
            self.send_dials.finished(peer)
        link = self.links.get(peer)
        if self.send_dials.waiting(peer) and (link is None or not link.ready.is_set()):
            self._dial_failed(peer, reason)

    def _dial_failed(self, peer: bytes, reason: str) -> None:
        """What waited for `peer` is dropped, and the engine hears the
        peer is unreachable."""
        self.counters["dials_failed"] += 1
        log.info("%s: dial on send to %s failed: %s", self.name, self.label(peer), reason)
        now = self.clock.now_ns()
        events = [rpc_event(TraceType.DROP_RPC, now, peer, rpc) for rpc in self.send_dials.release(peer)]
        self.counters["dropped"] += len(events)
        out = self.engine.remove_peer(now, peer)
        self._apply(replace(out, trace=(*events, *out.trace)), now)

    def _admit(self, link: PeerLink) -> bool:
        existing = self.links.get(link.peer_id)
        if existing is not None:
            keep_new = existing.dialer == link.dialer or link.dialer == min(self.peer_id, link.peer_id)
            if not keep_new:
                self.counters["duplicate_connections"] += 1
                return False
            self._forget(existing, "replaced by a newer connection")
        self.links[link.peer_id] = link
        self._notify()
        return True

    def _forget(self, link: PeerLink, reason: str) -> None:
        link.close(reason)
        if self.links.get(link.peer_id) is not link:
            return
        del self.links[link.peer_id]
        self.counters["bytes_in"] += link.bytes_in
        self.counters["bytes_out"] += link.bytes_out
        if link.misbehaved:
            self.counters["peers_dropped"] += 1
        log.info("%s: peer %s gone: %s", self.name, link.name, link.close_reason or reason)
        if link.ready.is_set():
            now = self.clock.now_ns()
            self._apply(self.engine.remove_peer(now, link.peer_id), now)
        elif self.send_dials.waiting(link.peer_id) and not self.send_dials.dialing(link.peer_id):
            self._dial_failed(link.peer_id, link.close_reason or reason)
        self._notify()

    async def _run_connection(self, conn: MuxedConnection, dialer: bytes) -> bool:
        peer_id = conn.peer_id
        shaper = LinkShaper(self._shape_for(peer_id), self.uplink, self.rng)
        link = PeerLink(conn, self.label(peer_id), dialer, shaper, self.cfg.queue_len, self.cfg.max_frame,
                        self.protocols, self._on_ready, self._on_frame)
        if not self._admit(link):
            await trio.aclose_forcefully(conn.tcp)
            return False
        try:
            await link.run()
        finally:
            self._forget(link, link.close_reason or "connection ended")
        return True

    def _on_ready(self, link: PeerLink) -> None:
        """Our pubsub stream to the peer is open: the engine meets the peer."""
        if self.links.get(link.peer_id) is not link:
            return
        now = self.clock.now_ns()
        outbound = link.dialer == self.peer_id
        address = remote_ip(link.conn.tcp)
        self._apply(self.engine.add_peer(now, link.peer_id, link.protocol, outbound=outbound, address=address), now)
        held = self.send_dials.release(link.peer_id)
        if held:
            self._apply(Output(sends=tuple((link.peer_id, rpc) for rpc in held)), now)

    def _on_frame(self, link: PeerLink, frame: bytes) -> None:
        if self.links.get(link.peer_id) is not link:
            return  # a replaced connection's last words
        rpc = self.decode(frame)  # WireError drops the peer
        link.rpcs_in += 1
        self.counters["rpcs_in"] += 1
        now = self.clock.now_ns()
        try:
            out = self.engine.handle_rpc(now, link.peer_id, rpc)
        except Exception as exc:  # an engine bug must not take the router down
            log.exception("%s: engine failed on an RPC from %s", self.name, link.name)
            raise PeerError(f"engine failed on an RPC from {link.name}: {exc!r}") from None
        self._apply(out, now)

    # Engine output

    def _apply(self, out: Output, now: int) -> None:
        for at in out.wakeups:
            assert self._nursery is not None
            self._nursery.start_soon(self._wake, at)
        events = list(out.trace)
        forwarded: dict[int, bytes | None] = {}  # a message forwarded alone to many peers is encoded once
        for peer, rpc in out.sends:
            link = self.links.get(peer)
            if self.dials_on_send and (link is None or not link.ready.is_set()) and peer != self.peer_id:
                self._hold(peer, rpc, now, events)
                continue
            result = "dropped"
            if link is not None and link.ready.is_set():
                frame = self._frame(rpc, forwarded)
                if frame is not None:
                    result = link.offer(frame)
            if result == "dropped":
                self.counters["dropped"] += 1
                events.append(rpc_event(TraceType.DROP_RPC, now, peer, rpc))
            else:
                self.counters["rpcs_out"] += 1
                if result == "lost":
                    self.counters["lost"] += 1
                events.append(rpc_event(TraceType.SEND_RPC, now, peer, rpc))
        for peer in out.dials:
            self._dial_asked(peer)
        if out.deliveries:
            self.counters["delivered"] += len(out.deliveries)
        if out.scores and self.scores is not None:
            self.scores.write(now, out.scores)
        if out.tree and self.tree is not None:
            self.tree.write(now, out.tree)
        if events and not self.trace_error:  # after a failed write nothing more: the trace stays readable
            try:
                self.trace.write(events)
            except OSError as exc:
                self._trace_failed(exc)

    def _dial_asked(self, peer: bytes) -> None:
        """A connection the engine asked for (a peer from PX, a lost explicit
        peer): one dial, retried as a control `connect` is, to the address the
        peer book gives (PX without signed peer records: go looks the peer up in
        its peerstore). A peer it does not list is not dialled."""
        addr = self.address_book.get(peer)
        if addr is None or peer in self.links or peer in self.asked or self._nursery is None:
            return
        self.asked.add(peer)
        self.counters["dials_asked"] += 1
        self._nursery.start_soon(self._dial_asked_once, addr, peer)

    async def _dial_asked_once(self, addr: PeerAddress, peer: bytes) -> None:
        try:
            await self._dial_loop((addr.host, addr.port, peer), False)
        except ConnectError as exc:
            log.info("%s: the dial the router asked for failed: %s", self.name, exc)
        finally:
            self.asked.discard(peer)

    def _frame(self, rpc: Rpc, forwarded: dict[int, bytes | None]) -> bytes | None:
        """The RPC framed for the wire; None when it exceeds max_frame."""
        alone = type(rpc) is Rpc and len(rpc.publish) == 1 and not rpc.subscriptions and rpc.control is None
        if alone and id(rpc.publish[0]) in forwarded:
            return forwarded[id(rpc.publish[0])]
        try:
            frame: bytes | None = encode_frame(self.encode(rpc), self.cfg.max_frame)
        except FrameError:
            frame = None
        if alone:
            forwarded[id(rpc.publish[0])] = frame
        return frame

    # What the control endpoint calls

    def workload_started(self, t_ns: int) -> None:
        """The workload began at `t_ns` on the engine's clock: a covert sybil
        now knows when to switch (node/engine/adversary/spec.py)."""
        if isinstance(self.engine, Sybil) and self.sybil is not None:
            self.engine.behaviours = self.sybil.behaviours(t_ns)

    def subscribe(self, topic: str) -> None:
        self.topics.add(topic)
        now = self.clock.now_ns()
        self._apply(self.engine.join(now, topic), now)

    def unsubscribe(self, topic: str) -> None:
        self.topics.discard(topic)
        now = self.clock.now_ns()
        self._apply(self.engine.leave(now, topic), now)

    def _published(self, out: Output, now: int) -> str:
        mids = [ev.message_id for ev in out.trace if ev.type == TraceType.PUBLISH_MESSAGE]
        self._apply(out, now)
        if mids:
            self.counters["published"] += 1
        return mids[0].hex() if mids else ""

    def publish(self, topic: str, data: bytes) -> str:
        now = self.clock.now_ns()
        return self._published(self.engine.publish(now, topic, data), now)

    def inject(self, seqno: int, topic: str, data: bytes) -> str:
        """Publish a message built elsewhere (the same id via several nodes),
        authored by the testbed's injector identity."""
        now = self.clock.now_ns()
        injector = identity_for_index(INJECTOR_INDEX)
        msg = replace(self.auth, signer=injector).author(injector.peer_id, seqno, topic, data)
        mid = self._published(self.engine.publish_message(now, msg), now)
        return mid or msg.id.hex()

    def peer_id_for(self, label: str) -> bytes | None:
        """The peer id of an experiment name or a base58 peer id; None when
        it is neither."""
        if label in self.peer_ids:
            return self.peer_ids[label]
        try:
            return peer_id_from_b58(label)
        except ValueError:
            return None

    async def connect(self, host: str, port: int, name: str | None, persistent: bool) -> str:
        """Dial; `name` (an experiment name or a base58 peer id) is the peer
        the remote must prove it is, when we know its peer id."""
        assert self._nursery is not None
        expect = self.peer_id_for(name) if name is not None else None
        if expect is not None and expect in self.links:
            return self.label(expect)
        return await self._nursery.start(self._dial_loop, (host, port, expect), persistent)

    def keep_connected(self, host: str, port: int, peer_id: bytes) -> None:
        """Dial `peer_id` at host:port and redial for the node's life, as an
        initial peer (a script's connect, node/interop/contract.py)."""
        assert self._nursery is not None
        self._nursery.start_soon(self._dial_loop, (host, port, peer_id), True)

    def disconnect(self, peer: str) -> bool:
        peer_id = self.peer_id_for(peer)
        link = self.links.get(peer_id) if peer_id is not None else None
        if link is None:
            return False
        self._forget(link, "disconnected by the control endpoint")
        return True

    def isolate(self, peers: list[str] | None) -> list[str]:
        if peers is None or self.isolated == set():
            self.isolated = set()
        else:
            self.isolated = (self.isolated or set()) | set(peers)
        closed = [pid for pid in list(self.links) if self._blocked(pid)]
        for pid in closed:
            self._forget(self.links[pid], "isolated")
        self._notify()
        return sorted(self.label(pid) for pid in closed)

    def rejoin(self, peers: list[str] | None) -> None:
        if self.isolated is None:
            return
        if peers is None or not self.isolated:
            self.isolated = None
        else:
            self.isolated -= set(peers)
            self.isolated = self.isolated or None
        self._notify()

    def mesh(self) -> dict[str, list[str]]:
        mesh = getattr(self.engine, "mesh", None)
        if isinstance(mesh, dict):
            return {t: sorted(self.label(p) for p in peers) for t, peers in sorted(mesh.items())}
        topic = getattr(self.engine, "topic", None)
        if topic is not None and isinstance(getattr(self.engine, "D", None), list):
            return {topic: sorted(self.label(p) for p in self.engine.D)}
        return {}

    def fanout(self) -> dict[str, list[str]]:
        fanout = getattr(self.engine, "fanout", None)
        if isinstance(fanout, dict):
            return {t: sorted(self.label(p) for p in peers) for t, peers in sorted(fanout.items())}
        return {}

    def status(self) -> dict[str, Any]:
        counters = Counter(self.counters)
        for link in self.links.values():
            counters["bytes_in"] += link.bytes_in
            counters["bytes_out"] += link.bytes_out
        keys = ("rpcs_in", "rpcs_out", "bytes_in", "bytes_out", "delivered", "published", "dropped", "lost",
                "peers_dropped", "handshakes_failed", "dials_failed")
        return {
            "name": self.name,
            "peer_id": peer_id_to_b58(self.peer_id),
            "security": self.cfg.security,
            "router": self.cfg.router,
            "protocol": self.engine.protocol_id,
            "pid": os.getpid(),
            "uptime_s": round((time.time_ns() - self.started_ns) / 1e9, 3),
            "listen": [self.cfg.listen_host, self.listen_port],
            "peers": sorted(link.name for link in self.links.values()),
            "topics": sorted(self.topics),
            "mesh": self.mesh(),
            "fanout": self.fanout(),
            "isolated": None if self.isolated is None else sorted(self.isolated),
            "queued": sum(link.pending() for link in self.links.values()),
            "counters": {k: counters.get(k, 0) for k in keys},
            "lag": self.lag.summary(),
            "trace_events": self.trace.events_written,
        }


def run_node(cfg: NodeConfig) -> int:
    """The daemon's entry point: run until shutdown; 0 on a graceful exit,
    1 when the trace could not be written."""
    node = Node(cfg)
    gc.freeze()  # what start-up made lives as long as the process: no collection scans it again
    trio.run(node.run)
    return 1 if node.trace_error else 0

