"""The virtual-time simulator: thousands of protocol engines in one process on a
discrete-event clock, over a virtual network with per-pair latency, jitter,
loss and serialization delay from each node's uplink bandwidth, driven by the
experiment's workload and churn timeline. Deterministic for a seed: one heap
ordered by (time, sequence number), and every random draw from seeded RNGs.

Links behave like the TCP connections of the real backends: FIFO per
direction (jitter never reorders), a connection is set up one latency after
the dial, and a lost RPC is dropped whole (as the node's user-space shaper
does). Choices are listed in docs/simulator.md.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from node.engine import make_router
from node.engine.api import NS, Output, TraceEvent, TraceType
from node.engine.registry import negotiate
from node.trace.vocab import RunEvent
from node.wire.rpc import Message, PeerId, Rpc, rpc_size, workload_data
from orchestrator.experiment.model import ChurnAction, Publish, ResolvedExperiment
from orchestrator.experiment.resolve import incarnation_seed
from orchestrator.experiment.lifecycle import Ineligible, Process, Verb, drive
from orchestrator.routers.peers import authenticity_for, injector_identity
from orchestrator.sim.churn import SimRunner
from orchestrator.sim.trace_level import EventCounts, TraceLevel
from orchestrator.sim.dial import DialOnSend
from orchestrator.sim.gc import quiet_gc
from orchestrator.sim.node import Conn, SimNode, sim_nodes
from orchestrator.sim.stats import SimStats
from orchestrator.sim.traces import TraceSink

WARMUP_S = 3.0

# Event kinds, in the order they are handled when times tie (at most 16: the
# event queue keeps a kind in the low 4 bits of its key).
_CONNECT, _RPC, _DISCONNECTED, _HEARTBEAT, _WAKE, _CHURN, _PUBLISH, _OPEN, _END = range(9)
OVERLAY = True  # a _CONNECT of an overlay edge: its dialling side is the real backends' (`_on_connect`)
_SEND_RPC = TraceType.SEND_RPC


class Simulator:
    def __init__(
        self,
        resolved: ResolvedExperiment,
        trace_dir: Path,
        log_event: Callable[..., None],
        warmup_s: float = WARMUP_S,
        trace_level: TraceLevel = TraceLevel(),
    ) -> None:
        self.resolved = resolved
        self.log_event = log_event
        self.warmup = round(warmup_s * NS)
        self.rng = random.Random(f"sim-network-{resolved.seed}")
        self.sink = TraceSink(trace_dir)
        self.stats = SimStats(nodes=len(resolved.nodes))
        self.nodes: dict[str, SimNode] = sim_nodes(resolved, self.warmup)
        self.traced = trace_level.traced(list(self.nodes), resolved.seed, (n for p in resolved.publishes for n in p.via))
        for index, node in enumerate(self.nodes.values()):
            node.index, node.traced = index, node.name in self.traced
        self.counts = None if trace_level.sample is None else EventCounts(list(self.nodes))
        injector = injector_identity()
        self.injector_id = injector.peer_id
        self.injector_auth = authenticity_for(resolved, injector, modelled=True)
        # The event queue, in (time, kind, order pushed): a heap of the keys
        # time << 4 | kind, each key's first event in `_due` and the later
        # ones of the same key (rare: times are in nanoseconds) in order in
        # `_later`. Ints compare in a few instructions where the tuples
        # (time, kind, seq, ...) this replaced went element by element, which
        # made the heap a quarter of PyPy's time.
        self._heap: list[int] = []
        self._due: dict[int, tuple[object, object, object]] = {}
        self._later: dict[int, deque[tuple[object, object, object]]] = {}
        self._epoch = 0
        # per message: when it was published, and which nodes (one byte each, by
        # SimNode.index) expect it and have it: a million nodes' names in sets
        # took over a gigabyte for ten messages
        self._expected: dict[bytes, tuple[int, bytearray]] = {}
        self._delivered: dict[bytes, bytearray] = {}
        self.dials = DialOnSend({n.peer_id: n.name for n in self.nodes.values()})
        # overlay edges that open late (`connect_at`), both ways: when (ns) they are dialled
        self.late = {edge: self.warmup + round(at * NS) for edge, at in resolved.late_edges().items()}
        self.opens: dict[tuple[str, str], int] = {}
        for (a, b), at in self.late.items():
            self.opens[(a, b)] = self.opens[(b, a)] = at
        self.now = 0

    # Scheduling

    def _push(self, t: int, kind: int, a: object = None, b: object = None, c: object = None) -> None:
        key = t << 4 | kind
        if key in self._due:
            self._later.setdefault(key, deque()).append((a, b, c))
        else:
            self._due[key] = (a, b, c)
            heapq.heappush(self._heap, key)

    def _latency(self, a: str, b: str) -> int:
        return round(self.resolved.link(a, b).latency_ms * 1e6)

    def end_time(self) -> int:
        r = self.resolved
        last = max((p.at for p in r.publishes), default=0.0)
        return self.warmup + round(max(r.duration, last + r.linger) * NS)

    def run(self, advance: Callable[[int], None] | None = None) -> SimStats:
        """Simulate to the end; `advance` is told how many virtual
        nanoseconds went by, now and then (a Reporter phase's advance)."""
        for node in self.nodes.values():
            self._start(node, 0)
            node.life = replace(node.life, process=Process.RUNNING)
        opening: dict[int, list[tuple[str, str]]] = {}
        for edge, at in self.late.items():
            opening.setdefault(at, []).append(edge)
        for at, edges in sorted(opening.items()):
            self._push(at, _OPEN, tuple(edges))
        for p in self.resolved.publishes:
            self._push(self.warmup + round(p.at * NS), _PUBLISH, p)
        for action in self.resolved.churn:
            self._push(self.warmup + round(action.at * NS), _CHURN, action)
        end = self.end_time()
        self._push(end, _END)
        self.log_event(0, RunEvent.RUN_START)
        self.log_event(self.warmup, RunEvent.ALL_UP, nodes=len(self.nodes))
        with quiet_gc():
            self._loop(end, advance)
        self.log_event(self.now, RunEvent.RUN_END)
        self.sink.close()
        self._count_expected()
        return self.stats

    def _loop(self, end: int, advance: Callable[[int], None] | None) -> None:
        step = max(end // 200, 1)
        next_report = step
        reported = 0
        heap = self._heap
        due, later = self._due, self._later
        while heap:
            key = heap[0]
            a, b, c = due.pop(key)
            rest = later.get(key)
            if rest is None:
                heapq.heappop(heap)
            else:
                due[key] = rest.popleft()
                if not rest:
                    del later[key]
            t, kind = key >> 4, key & 15
            self.now = t
            self.stats.events += 1
            if kind == _RPC:
                self._on_rpc(a, b, c)
            elif kind == _HEARTBEAT:
                self._on_heartbeat(a, b)
            elif kind == _WAKE:
                self._on_wake(a, b)
            elif kind == _CONNECT:
                self._on_connect(a, b, c)
            elif kind == _DISCONNECTED:
                self._on_disconnected(a, b, c)
            elif kind == _PUBLISH:
                self._on_publish(a)
            elif kind == _CHURN:
                self._on_churn(a)
            elif kind == _OPEN:
                self._on_open(a)
            elif kind == _END:
                break
            if advance is not None and t >= next_report:
                advance(t - reported)
                reported, next_report = t, t + step

    # Output of an engine

    def _emit(self, node: SimNode, out: Output) -> None:
        """Deliveries are counted, RPCs go onto their connections (SEND_RPC is
        traced even when the connection just closed: the router did send)."""
        for msg in out.deliveries:
            self._on_delivered(node, msg)
        for peer in out.dials:
            self._dial(node, peer)
        for at in out.wakeups:
            self._push(at, _WAKE, node.name, node.incarnation)
        if self.counts is not None:
            self._count(node, out)
        if not out.sends:
            if node.traced and (out.trace or out.scores or out.tree):
                self.sink.write(node.name, node.peer_id, out.trace, (self.now, out.scores), out.tree)
            return
        now = self.now
        stats = self.stats
        events = list(out.trace) if node.traced else None
        conns = node.conns
        stats.rpcs += len(out.sends)
        for peer, rpc in out.sends:
            if events is not None:
                events.append(TraceEvent(_SEND_RPC, now, b"", "", peer, "", "", rpc))
            stats.transmissions += len(rpc.publish)
            ctl = rpc.control
            if ctl is not None:
                stats.graft += len(ctl.graft)
                stats.prune += len(ctl.prune)
                stats.ihave += len(ctl.ihave)
                stats.iwant += len(ctl.iwant)
            conn = conns.get(peer)
            if conn is not None:
                self._transmit(node, conn, rpc)
            elif getattr(node.engine, "dials_on_send", False) and (dst := self.dials.hold(node.name, peer, rpc)):
                self._push(now + self._latency(node.name, dst), _CONNECT, node.name, dst)
        if events is not None:
            self.sink.write(node.name, node.peer_id, events, (now, out.scores), out.tree)

    def _count(self, node: SimNode, out: Output) -> None:
        """Every node's trace events, counted by type, traced or not."""
        assert self.counts is not None
        counts, base = self.counts.counts, self.counts.base(node.index)
        for ev in out.trace:
            counts[base + ev.type] += 1
        counts[base + _SEND_RPC] += len(out.sends)

    def _transmit(self, node: SimNode, conn: Conn, rpc: Rpc) -> None:
        """Onto the connection: the uplink serializes, the link loses, delays
        and jitters (never reordering)."""
        depart = self.now
        if node.uplink_bps:
            start = max(depart, node.uplink_free_at)
            depart = start + rpc_size(rpc) * 8 * NS // node.uplink_bps
            node.uplink_free_at = depart
        if conn.loss and self.rng.random() < conn.loss:
            self.stats.rpcs_lost += 1
            return
        arrival = depart + conn.latency
        if conn.jitter:
            arrival = max(depart, arrival + self.rng.randint(-conn.jitter, conn.jitter))
        if arrival < conn.last_arrival:
            arrival = conn.last_arrival
        conn.last_arrival = arrival
        self._push(arrival, _RPC, node, conn.peer, (conn.epoch, rpc))

    # Handlers

    def _on_rpc(self, src: SimNode, dst: SimNode, payload: tuple) -> None:
        """Accepted while the receiving end of that connection is open: what a
        closing peer sent before closing still arrives."""
        epoch, rpc = payload
        conn = dst.conns.get(src.peer_id)
        if conn is None or conn.epoch != epoch:
            return
        if dst.paused:
            dst.paused_inbox.append(lambda: self._on_rpc(src, dst, payload))
            return
        self._emit(dst, dst.engine.handle_rpc(self.now, src.peer_id, rpc))

    def _on_heartbeat(self, name: str, incarnation: int) -> None:
        node = self.nodes[name]
        if node.incarnation != incarnation or node.engine is None:
            return
        if node.paused:
            node.heartbeat_due = True
            return
        self._emit(node, node.engine.heartbeat(self.now))
        self._push(self.now + node.engine.heartbeat_interval, _HEARTBEAT, name, incarnation)

    def _on_wake(self, name: str, incarnation: int) -> None:
        """The engine asked to finish work now (a validation that took
        time); a paused node does it when it runs again."""
        node = self.nodes[name]
        if node.incarnation != incarnation or node.engine is None:
            return
        if node.paused:
            node.paused_inbox.append(lambda: self._on_wake(name, incarnation))
            return
        self._emit(node, node.engine.wake(self.now))

    def _on_open(self, edges: tuple[tuple[str, str], ...]) -> None:
        """Overlay edges that open late (`connect_at`) are dialled now, by
        the side that dials on the real backends (`_on_connect`)."""
        self.log_event(self.now, RunEvent.EDGES_OPEN, edges=len(edges))
        for a, b in edges:
            self._push(self.now + self._latency(a, b), _CONNECT, a, b, OVERLAY)

    def _on_connect(self, a: str, b: str, overlay: bool | None = None) -> None:
        """a dialled b. On the real backends an overlay edge is dialled by
        the side `up` starts later (nodeconfigs.dials: the later node in the
        experiment's order), so that side holds the outbound connection, as
        gossipsub v1.1's outbound quota (D_out) sees it: a sybil group
        listed after the honest one dials them and is inbound to them. At
        the start that is what happens here too (a node dials the nodes
        started before it); after a restart, and for an edge that opens
        late, both ends may dial, and the outbound side is still that one."""
        na, nb = self.nodes[a], self.nodes[b]
        if na.engine is None or nb.engine is None or na.life.cut_off_from(b) or nb.life.cut_off_from(a):
            if self.dials.release(a, b):  # a dial on send failed: a's engine hears it a round trip on
                self._push(self.now + self._latency(a, b), _DISCONNECTED, a, b, None)
            return
        ca, cb = na.conns.get(nb.peer_id), nb.conns.get(na.peer_id)
        if ca is not None and cb is not None and ca.epoch == cb.epoch:
            self._flush_dials(na, nb, ca)
            return
        proto = negotiate(na.engine.supported_protocols, nb.engine.supported_protocols, na.engine.protocol_id)
        if proto is None:
            return
        for me, other, stale in ((na, nb, ca), (nb, na, cb)):
            if stale is not None:  # the half-open end of an older connection: replaced
                self._on_disconnected(me.name, other.name, stale.epoch)
        self._epoch += 1
        link = self.resolved.link(a, b)
        latency, jitter = round(link.latency_ms * 1e6), round(link.jitter_ms * 1e6)
        na.conns[nb.peer_id] = Conn(self._epoch, nb, latency, jitter, link.loss)
        nb.conns[na.peer_id] = Conn(self._epoch, na, latency, jitter, link.loss)
        self.stats.connect += 1
        dialler = max(na, nb, key=lambda n: n.index) if overlay else na
        for me, other in ((na, nb), (nb, na)):
            self._add_peer(me, other, proto, me is dialler)
        for me, other in ((na, nb), (nb, na)):
            self._flush_dials(me, other, me.conns[other.peer_id])

    def _flush_dials(self, node: SimNode, other: SimNode, conn: Conn) -> None:
        for rpc in self.dials.release(node.name, other.name):
            self._transmit(node, conn, rpc)

    def _add_peer(self, node: SimNode, peer: SimNode, proto: str, outbound: bool) -> None:
        if node.paused:
            node.paused_inbox.append(lambda: self._add_peer(node, peer, proto, outbound))
        elif node.engine is not None:
            self._emit(node, node.engine.add_peer(self.now, peer.peer_id, proto, outbound=outbound, address=peer.address))

    def _on_disconnected(self, name: str, peer: str, epoch: int) -> None:
        """`name` notices its connection to `peer` is gone, unless a newer
        connection between them replaced it meanwhile; its end closes."""
        node = self.nodes[name]
        peer_id = self.nodes[peer].peer_id
        conn = node.conns.get(peer_id)
        if conn is not None and conn.epoch != epoch:
            return
        node.conns.pop(peer_id, None)
        if node.paused:
            node.paused_inbox.append(lambda: self._emit(node, node.engine.remove_peer(self.now, peer_id)))
        elif node.engine is not None:
            self._emit(node, node.engine.remove_peer(self.now, peer_id))

    def _close(self, node: SimNode, peers: set[str] | None) -> None:
        """A process ends: close its ends of its connections (to `peers`, or
        all). Each other side notices one latency later, and only after what
        was in flight to it has arrived."""
        for peer_id, conn in list(node.conns.items()):
            if peers is not None and conn.peer.name not in peers:
                continue
            del node.conns[peer_id]
            notice = max(self.now + conn.latency, conn.last_arrival)
            self._push(notice, _DISCONNECTED, conn.peer.name, node.name, conn.epoch)

    def _partition(self, node: SimNode, peers: set[str] | None) -> None:
        """The network between node and `peers` (or everyone) goes away: what
        is in flight is lost and both ends notice at once."""
        for peer_id, conn in list(node.conns.items()):
            if peers is not None and conn.peer.name not in peers:
                continue
            self._on_disconnected(node.name, conn.peer.name, conn.epoch)
            self._on_disconnected(conn.peer.name, node.name, conn.epoch)

    def _dial(self, node: SimNode, peer: PeerId) -> None:
        """A connection the engine asked for (a peer from PX, a lost explicit
        peer): opened a latency later, as the overlay's; to a node that is
        down it fails and the engine is not told (a refused dial)."""
        dst = self.dials.names.get(peer)
        if dst is not None and peer not in node.conns:
            self._push(self.now + self._latency(node.name, dst), _CONNECT, node.name, dst)

    def _dial_neighbours(self, node: SimNode, only: set[str] | None = None) -> None:
        """Its overlay edges, but those that open later than now (they are
        dialled when they open, `run`)."""
        for other in node.neighbours:
            if only is not None and other not in only:
                continue
            if self.opens and self.opens.get((node.name, other), 0) > self.now:
                continue
            if self.nodes[other].engine is not None:
                self._push(self.now + self._latency(node.name, other), _CONNECT, node.name, other, OVERLAY)

    def _start(self, node: SimNode, t: int) -> None:
        node.incarnation += 1
        seed = incarnation_seed(node.seed, node.incarnation)
        node.engine = make_router(
            node.router, node.peer_id, seed, node.params, node.auth, node.behaviours,
            self.resolved.validation_delay,
        )
        if node.app_scores:
            node.engine.set_app_specific_scores(node.app_scores)  # type: ignore[attr-defined]
        node.paused_inbox.clear()
        node.heartbeat_due = False
        node.uplink_free_at = t
        for topic in sorted(node.life.topics):
            self._emit(node, node.engine.join(t, topic))
        self._push(t + node.engine.first_heartbeat, _HEARTBEAT, node.name, node.incarnation)
        self._dial_neighbours(node)

    def _stop(self, node: SimNode, graceful: bool) -> None:
        """The process ends: gracefully (LEAVE every topic first) or killed."""
        if node.engine is None:
            return
        if graceful:
            for topic in sorted(node.life.topics):
                self._emit(node, node.engine.leave(self.now, topic))
        self._close(node, None)
        self.dials.forget(node.name)
        node.engine = None
        node.incarnation += 1

    # Workload

    def _on_publish(self, p: Publish) -> None:
        data = workload_data(p.seq, p.size)
        via = [self.nodes[n] for n in p.via]
        live = [n for n in via if n.life.reachable]
        if not live:
            self.log_event(self.now, RunEvent.WARNING, message=f"message {p.seq}: no live publisher among {list(p.via)}; skipped")
            return
        if p.publisher is not None:
            node = live[0]
            out = node.engine.publish(self.now, p.topic, data)
            mids = [ev.message_id for ev in out.trace if ev.type == TraceType.PUBLISH_MESSAGE]
            mid = mids[0]
            self._emit(node, out)
        else:
            msg = self.injector_auth.author(self.injector_id, p.seq + 1, p.topic, data)
            mid = msg.id
            for node in live:
                self._emit(node, node.engine.publish_message(self.now, msg))
        self.stats.messages += 1
        self.stats.publish += len(live)
        publishers = {n.name for n in live}
        expected = bytearray(len(self.nodes))
        for n in self.nodes.values():
            if n.life.reachable and p.topic in n.life.topics and n.name not in publishers:
                expected[n.index] = 1
        self._expected[mid] = (self.now, expected)
        self._delivered.setdefault(mid, bytearray(len(self.nodes)))
        self.log_event(
            self.now, RunEvent.PUBLISH, node=p.publisher, via=[n.name for n in live], topic=p.topic,
            message_id=mid.hex(), size=p.size, seq=p.seq,
        )

    def _on_delivered(self, node: SimNode, msg: Message) -> None:
        self.stats.deliver += 1
        mid = msg.id
        entry = self._expected.get(mid)
        if entry is not None and entry[1][node.index]:
            got = self._delivered[mid]
            if not got[node.index]:
                got[node.index] = 1
                self.stats.latencies_ns.append(self.now - entry[0])

    def _count_expected(self) -> None:
        self.stats.expected_deliveries = sum(e[1].count(1) for e in self._expected.values())
        self.stats.on_time_deliveries = sum(got.count(1) for got in self._delivered.values())

    # Churn

    def _on_churn(self, action: ChurnAction) -> None:
        self.log_event(
            self.now, RunEvent.CHURN, action=action.action, nodes=list(action.nodes),
            **({"topic": action.topic} if action.topic else {}),
            **({"peers": list(action.peers)} if action.peers else {}),
        )
        for name in action.nodes:
            self._apply(action, self.nodes[name])

    def _apply(self, action: ChurnAction, node: SimNode) -> None:
        """One verb on one node, step by step as the lifecycle table says."""
        try:
            for step in drive(SimRunner(self), node.name, node.life, Verb(action.action), action.topic, action.peers):
                node.life = step.life
                for ev in step.events:
                    self.log_event(self.now, ev.kind, node=node.name, cause=ev.cause)
        except Ineligible as exc:
            self.log_event(self.now, RunEvent.WARNING, message=f"churn {action.action} on {node.name} skipped: {exc}")

    def _unpause(self, node: SimNode) -> None:
        node.life = replace(node.life, process=Process.RUNNING)
        inbox, node.paused_inbox = node.paused_inbox, []
        for deferred in inbox:
            deferred()
        if node.heartbeat_due:
            node.heartbeat_due = False
            self._on_heartbeat(node.name, node.incarnation)
