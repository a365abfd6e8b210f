"""A small network of episub engines for tests, on a fake clock.

Unlike tests/engine_harness.py's fixed links, any node can send to any other,
as over the Internet: the first RPC to a peer opens a connection (both ends
see `add_peer`), an RPC to a dead node fails the connection (the sender sees
`remove_peer` one latency later, the draft's TCP failure detection), and a
killed node's connections close (each other end notices one latency later).
Heartbeats fire at each engine's `first_heartbeat` and every
`heartbeat_interval` after it, as in the simulator.

    net = EpisubNet(20, seed=1)
    net.random_contacts(3); net.join_all("t"); net.run_for(10)
    mid = net.publish("n0", "t"); net.run_for(2)
    assert all(mid in net.delivered(n) for n in net.alive if n != "n0")
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Mapping
from typing import Any

from node.engine import Output, TraceEvent, TraceType, make_router
from node.engine.episub import EPISUB_ID, EpisubRouter, EpisubRpc
from node.wire.rpc import MessageId

MS = 1_000_000
S = 1_000_000_000

_RPC, _FAILED, _CLOSED, _HEARTBEAT = range(4)


class EpisubNet:
    def __init__(
        self, n: int, *, seed: int = 0, params: Mapping[str, Any] | None = None,
        latency: Callable[[str, str], int] | None = None,
    ) -> None:
        self.names = [f"n{i}" for i in range(n)]
        self.engines: dict[str, EpisubRouter] = {
            name: make_router("episub", name.encode(), seed * 1000 + i, params or {})  # type: ignore[misc]
            for i, name in enumerate(self.names)
        }
        self.latency = latency or (lambda a, b: 10 * MS)
        self.alive = set(self.names)
        self.connections: set[frozenset[str]] = set()
        self.now = 0
        self._heap: list[tuple[int, int, int, tuple]] = []
        self._seq = itertools.count()
        self.deliveries: dict[str, list[tuple[int, MessageId]]] = {n: [] for n in self.names}
        self.trace: dict[str, list[TraceEvent]] = {n: [] for n in self.names}
        self.sent: list[tuple[int, str, str, EpisubRpc]] = []
        for name in self.names:
            self._push(self.engines[name].first_heartbeat, _HEARTBEAT, (name,))

    def _push(self, t: int, kind: int, payload: tuple) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, payload))

    # Access

    def engine(self, name: str) -> EpisubRouter:
        return self.engines[name]

    def delivered(self, name: str) -> list[MessageId]:
        return [mid for _, mid in self.deliveries[name]]

    def active(self, name: str, topic: str = "t") -> set[str]:
        return {p.decode() for p in self.engines[name].overlays[topic].membership.active}

    def passive(self, name: str, topic: str = "t") -> set[str]:
        return {p.decode() for p in self.engines[name].overlays[topic].membership.passive}

    def eager(self, name: str, topic: str = "t") -> set[str]:
        return {p.decode() for p in self.engines[name].overlays[topic].broadcast.eager}

    def lazy(self, name: str, topic: str = "t") -> set[str]:
        return {p.decode() for p in self.engines[name].overlays[topic].broadcast.lazy}

    def messages(self, kind: type, src: str | None = None, dst: str | None = None) -> list[tuple[str, str, Any]]:
        return [
            (s, d, m) for _, s, d, rpc in self.sent for m in rpc.messages
            if isinstance(m, kind) and (src is None or s == src) and (dst is None or d == dst)
        ]

    def events(self, name: str, type_: TraceType) -> list[TraceEvent]:
        return [ev for ev in self.trace[name] if ev.type == type_]

    # Inputs

    def apply(self, name: str, out: Output) -> Output:
        self.trace[name].extend(out.trace)
        for msg in out.deliveries:
            self.deliveries[name].append((self.now, msg.id))
        for peer, rpc in out.sends:
            dst = peer.decode()
            self.sent.append((self.now, name, dst, rpc))  # type: ignore[arg-type]
            if dst not in self.alive:
                self._push(self.now + 2 * self.latency(name, dst), _FAILED, (name, dst))
                continue
            if frozenset((name, dst)) not in self.connections:
                self.connect(name, dst)
            self._push(self.now + self.latency(name, dst), _RPC, (name, dst, rpc))
        return out

    def connect(self, a: str, b: str) -> None:
        """Open a connection: both ends get add_peer now."""
        self.connections.add(frozenset((a, b)))
        self.apply(a, self.engines[a].add_peer(self.now, b.encode(), EPISUB_ID))
        self.apply(b, self.engines[b].add_peer(self.now, a.encode(), EPISUB_ID))

    def ring_contacts(self) -> None:
        """Each node's initial contact is the next node (a connected start)."""
        for a, b in zip(self.names, self.names[1:]):
            self.connect(a, b)

    def random_contacts(self, k: int, seed: int = 0) -> None:
        """A ring (so the start is connected) plus k - 1 random contacts per
        node, as a rendezvous would hand out."""
        self.ring_contacts()
        rng = random.Random(seed)
        for a in self.names:
            for b in rng.sample([n for n in self.names if n != a], k - 1):
                if frozenset((a, b)) not in self.connections:
                    self.connect(a, b)

    def overlay_connected(self, topic: str = "t") -> bool:
        """The live nodes' active views form one connected graph."""
        live = sorted(self.alive)
        seen, todo = {live[0]}, [live[0]]
        while todo:
            for peer in self.active(todo.pop(), topic) & self.alive:
                if peer not in seen:
                    seen.add(peer)
                    todo.append(peer)
        return seen == set(live)

    def join_all(self, topic: str = "t") -> None:
        for name in self.names:
            self.apply(name, self.engines[name].join(self.now, topic))

    def leave(self, name: str, topic: str = "t") -> Output:
        return self.apply(name, self.engines[name].leave(self.now, topic))

    def publish(self, name: str, topic: str = "t", data: bytes = b"x") -> MessageId:
        out = self.apply(name, self.engines[name].publish(self.now, topic, data))
        (mid,) = [ev.message_id for ev in out.trace if ev.type == TraceType.PUBLISH_MESSAGE]
        return mid

    def kill(self, name: str) -> None:
        """The process dies: its connections close; the other ends notice one latency later."""
        self.alive.discard(name)
        for conn in [c for c in self.connections if name in c]:
            self.connections.discard(conn)
            (other,) = conn - {name}
            self._push(self.now + self.latency(name, other), _CLOSED, (other, name))

    # Time

    def run_for(self, seconds: float) -> None:
        until = self.now + round(seconds * S)
        while self._heap and self._heap[0][0] <= until:
            t, _, kind, payload = heapq.heappop(self._heap)
            self.now = max(self.now, t)
            if kind == _HEARTBEAT:
                (name,) = payload
                if name in self.alive:
                    eng = self.engines[name]
                    self.apply(name, eng.heartbeat(self.now))
                    self._push(self.now + eng.heartbeat_interval, _HEARTBEAT, (name,))
            elif kind == _RPC:
                src, dst, rpc = payload
                if dst in self.alive and frozenset((src, dst)) in self.connections:
                    self.apply(dst, self.engines[dst].handle_rpc(self.now, src.encode(), rpc))
            elif payload[0] in self.alive:  # _FAILED, _CLOSED: the node sees the peer go
                name, peer = payload
                self.apply(name, self.engines[name].remove_peer(self.now, peer.encode()))
        self.now = until
