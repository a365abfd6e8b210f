"""A small lockstep network of protocol engines for tests.

Engines are sans-I/O, so a network of them is a fake clock, a queue of RPCs in
flight and a loop. Every directed link has a fixed latency, so RPCs on one link
arrive in the order they were sent (per-link FIFO, as over one TCP stream);
RPCs on different links interleave by arrival time, ties broken by send order.

    net = Network.build("gossipsub", 6, edges="full", params={"D": 3}, seed=1)
    net.join_all("t"); net.settle()
    net.heartbeat_all(); net.settle()
    mid = net.publish("n0", "t", b"x"); net.settle()
    assert all(mid in net.delivered_ids(n) for n in net.names if n != "n0")

Two ways to move time: by hand (`heartbeat_all`/`heartbeat`, then `settle`,
which delivers everything in flight and nothing else), or `run_for(seconds)`,
which also fires each engine's heartbeat at `first_heartbeat` and every
`heartbeat_interval` after it, as the simulator does.

Everything an engine emits is kept: `sent` (every RPC handed to a link),
`deliveries`, `dials` (peers an engine asked to connect to, not acted on),
and `trace` per node (engine events plus the SEND_RPC events the
runtime would record), which `write_traces` writes as trace files.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.engine import Output, TraceEvent, TraceType, make_router
from node.engine.registry import negotiate
from node.trace.file import TraceWriter, rpc_event
from node.wire.rpc import Control, Graft, IDontWant, IHave, IWant, Message, MessageId, PeerId, Prune, Rpc, SubOpts

MS = 1_000_000
S = 1_000_000_000

Latency = int | tuple[float, float] | Callable[[str, str], int]


@dataclass(frozen=True)
class Sent:
    time: int
    src: str
    dst: str
    rpc: Rpc


def name_of(peer: PeerId) -> str:
    return peer.decode()


def random_edges(names: list[str], p: float, rng: random.Random) -> list[tuple[str, str]]:
    """A connected random graph: a random spanning tree plus each other pair
    with probability p."""
    order = list(names)
    rng.shuffle(order)
    edges = {tuple(sorted((order[i], order[rng.randrange(i)]))) for i in range(1, len(order))}
    for a, b in itertools.combinations(sorted(names), 2):
        if rng.random() < p:
            edges.add((a, b))
    return sorted(edges)  # type: ignore[arg-type]


class Network:
    def __init__(
        self,
        routers: Mapping[str, str],
        *,
        params: Mapping[str, Any] | Mapping[str, Mapping[str, Any]] | None = None,
        seed: int = 0,
        latency: Latency = 1 * MS,
        start: int = 0,
    ) -> None:
        self.names = sorted(routers, key=lambda n: (len(n), n))
        self.kinds = dict(routers)
        self.rng = random.Random(seed)
        self.now = start
        self.engines = {}
        for i, name in enumerate(self.names):
            p = params or {}
            if p and all(isinstance(v, Mapping) for v in p.values()) and name in p:
                p = p[name]  # per-node parameters
            self.engines[name] = make_router(routers[name], name.encode(), seed * 1000 + i, p)
        self._latency = latency
        self._link_latency: dict[tuple[str, str], int] = {}
        self.links: set[tuple[str, str]] = set()
        self._queue: list[tuple[int, int, str, str, Rpc]] = []
        self._heartbeats: list[tuple[int, int, str]] = []
        self._seq = itertools.count()
        self.sent: list[Sent] = []
        self.deliveries: dict[str, list[Message]] = {n: [] for n in self.names}
        self.trace: dict[str, list[TraceEvent]] = {n: [] for n in self.names}
        self.dials: list[tuple[str, str]] = []

    @classmethod
    def build(
        cls,
        router: str | Mapping[str, str],
        n: int = 0,
        *,
        edges: str | Iterable[tuple[str, str]] = "full",
        **kwargs: Any,
    ) -> Network:
        """`router` names one kind for n nodes n0..n{n-1}, or maps names to
        kinds. `edges` is "full", "none", "ring", or a list of pairs."""
        routers = {f"n{i}": router for i in range(n)} if isinstance(router, str) else dict(router)
        net = cls(routers, **kwargs)
        if edges == "full":
            pairs: Iterable[tuple[str, str]] = itertools.combinations(net.names, 2)
        elif edges == "none":
            pairs = ()
        elif edges == "ring":
            pairs = [(net.names[i], net.names[(i + 1) % len(net.names)]) for i in range(len(net.names))]
        else:
            pairs = edges  # type: ignore[assignment]
        for a, b in pairs:
            net.connect(a, b)
        return net

    # Access

    def engine(self, name: str) -> Any:
        return self.engines[name]

    def delivered_ids(self, name: str) -> list[MessageId]:
        return [m.id for m in self.deliveries[name]]

    def events(self, name: str, type_: TraceType) -> list[TraceEvent]:
        return [ev for ev in self.trace[name] if ev.type == type_]

    def mesh(self, name: str, topic: str) -> set[str]:
        """mesh[topic] of a gossipsub engine, or the simsub actor's D."""
        eng = self.engines[name]
        if hasattr(eng, "mesh"):
            return {name_of(p) for p in eng.mesh.get(topic, ())}
        return {name_of(p) for p in eng.D} if eng.topic == topic else set()

    def sent_between(self, src: str, dst: str) -> list[Rpc]:
        return [s.rpc for s in self.sent if s.src == src and s.dst == dst]

    def in_flight(self) -> int:
        return len(self._queue)

    # Topology

    def latency(self, src: str, dst: str) -> int:
        key = (src, dst)
        if key not in self._link_latency:
            lat = self._latency
            if callable(lat):
                value = lat(src, dst)
            elif isinstance(lat, tuple):
                value = round(self.rng.uniform(*lat) * MS)
            else:
                value = lat
            self._link_latency[key] = value
        return self._link_latency[key]

    def connect(self, a: str, b: str) -> None:
        """`a` dials `b`: the connection is outbound for a, inbound for b."""
        ea, eb = self.engines[a], self.engines[b]
        pa = negotiate(ea.supported_protocols, eb.supported_protocols, ea.protocol_id)
        pb = negotiate(eb.supported_protocols, ea.supported_protocols, eb.protocol_id)
        if pa is None or pb is None:
            raise ValueError(f"{a} and {b} share no protocol")
        self.links.add((a, b))
        self.links.add((b, a))
        self.apply(a, ea.add_peer(self.now, b.encode(), pa, outbound=True))
        self.apply(b, eb.add_peer(self.now, a.encode(), pb))

    def disconnect(self, a: str, b: str) -> None:
        """Close the connection: both sides see the peer go, RPCs in flight
        between them are lost."""
        self.links.discard((a, b))
        self.links.discard((b, a))
        self._queue = [q for q in self._queue if {q[2], q[3]} != {a, b}]
        heapq.heapify(self._queue)
        self.apply(a, self.engines[a].remove_peer(self.now, b.encode()))
        self.apply(b, self.engines[b].remove_peer(self.now, a.encode()))

    def neighbours(self, name: str) -> set[str]:
        return {b for a, b in self.links if a == name}

    # Inputs

    def apply(self, name: str, out: Output) -> Output:
        self.trace[name].extend(out.trace)
        self.deliveries[name].extend(out.deliveries)
        self.dials.extend((name, name_of(peer)) for peer in out.dials)
        for peer, rpc in out.sends:
            dst = name_of(peer)
            self.trace[name].append(rpc_event(TraceType.SEND_RPC, self.now, peer, rpc))
            self.sent.append(Sent(self.now, name, dst, rpc))
            if (name, dst) in self.links:
                arrival = self.now + self.latency(name, dst)
                heapq.heappush(self._queue, (arrival, next(self._seq), name, dst, rpc))
        return out

    def join(self, name: str, topic: str) -> Output:
        return self.apply(name, self.engines[name].join(self.now, topic))

    def join_all(self, topic: str, names: Iterable[str] | None = None) -> None:
        for name in self.names if names is None else names:
            self.join(name, topic)

    def leave(self, name: str, topic: str) -> Output:
        return self.apply(name, self.engines[name].leave(self.now, topic))

    def publish(self, name: str, topic: str, data: bytes = b"x") -> MessageId:
        out = self.apply(name, self.engines[name].publish(self.now, topic, data))
        (mid,) = [ev.message_id for ev in out.trace if ev.type == TraceType.PUBLISH_MESSAGE]
        return mid

    def inject(self, name: str, msg: Message) -> Output:
        return self.apply(name, self.engines[name].publish_message(self.now, msg))

    def receive(self, name: str, src: str, rpc: Rpc) -> Output:
        """Hand `name` an RPC from `src` directly, outside the queue."""
        return self.apply(name, self.engines[name].handle_rpc(self.now, src.encode(), rpc))

    def heartbeat(self, name: str) -> Output:
        return self.apply(name, self.engines[name].heartbeat(self.now))

    def heartbeat_all(self) -> None:
        """Every engine's heartbeat at the current time (lockstep)."""
        for name in self.names:
            self.heartbeat(name)

    # Time

    def advance(self, ns: int) -> None:
        """Move the clock without delivering anything."""
        if self._queue and self._queue[0][0] < self.now + ns:
            raise RuntimeError("RPCs in flight would be skipped; settle() first")
        self.now += ns

    def _deliver_next(self) -> None:
        arrival, _, src, dst, rpc = heapq.heappop(self._queue)
        self.now = max(self.now, arrival)
        self.apply(dst, self.engines[dst].handle_rpc(self.now, src.encode(), rpc))

    def settle(self, max_steps: int = 1_000_000) -> None:
        """Deliver RPCs (and what they cause) until nothing is in flight."""
        for _ in range(max_steps):
            if not self._queue:
                return
            self._deliver_next()
        raise RuntimeError("network did not settle")

    def rounds(self, n: int, interval: int | None = None) -> None:
        """n lockstep heartbeat rounds: every engine beats at the same time,
        the network settles, and the clock moves on to the next round."""
        step = interval if interval is not None else self.engines[self.names[0]].heartbeat_interval
        for _ in range(n):
            start = self.now
            self.heartbeat_all()
            self.settle()
            self.now = max(self.now, start + step)

    def start_heartbeats(self) -> None:
        """Schedule every engine's heartbeat from now on, for run_for."""
        self._heartbeats = []
        for name in self.names:
            eng = self.engines[name]
            heapq.heappush(self._heartbeats, (self.now + eng.first_heartbeat, next(self._seq), name))

    def run_for(self, seconds: float) -> None:
        """Advance the clock by `seconds`, delivering RPCs and firing scheduled
        heartbeats in time order."""
        until = self.now + round(seconds * S)
        while True:
            t_msg = self._queue[0][0] if self._queue else until + 1
            t_hb = self._heartbeats[0][0] if self._heartbeats else until + 1
            if min(t_msg, t_hb) > until:
                break
            if t_hb < t_msg:
                t, _, name = heapq.heappop(self._heartbeats)
                self.now = max(self.now, t)
                self.heartbeat(name)
                eng = self.engines[name]
                heapq.heappush(self._heartbeats, (t + eng.heartbeat_interval, next(self._seq), name))
            else:
                self._deliver_next()
        self.now = until

    # Output

    def write_traces(self, directory: Path) -> list[Path]:
        paths = []
        for name in self.names:
            path = directory / f"{name}.pb"
            writer = TraceWriter(path, name.encode())
            writer.write(self.trace[name])
            writer.close()
            paths.append(path)
        return paths

    def mesh_edges(self, topic: str) -> set[tuple[str, str]]:
        return {(a, b) for a in self.names for b in self.mesh(a, topic)}


# One engine and hand-made peers, for rule-by-rule tests.

def lone(kind: str = "gossipsub", params: Mapping[str, Any] | None = None, seed: int = 0,
         name: bytes = b"me") -> Any:
    return make_router(kind, name, seed, params or {})


def add_peers(router: Any, peers: Iterable[bytes], topics: Iterable[str] = (), protocol: str | None = None,
              now: int = 0, outbound: bool = False) -> None:
    """Connect peers (speaking `protocol`, the router's own by default) that
    announce a SUBSCRIBE for each of `topics`; `outbound`: the router dialled."""
    topics = tuple(topics)
    for peer in peers:
        router.add_peer(now, peer, protocol or router.protocol_id, outbound=outbound)
        if topics:
            router.handle_rpc(now, peer, Rpc(subscriptions=tuple(SubOpts(True, t) for t in topics)))


def sends(out: Output) -> dict[PeerId, Rpc]:
    """The RPC for each peer; fails if a peer got more than one (piggybacking)."""
    peers = [peer for peer, _ in out.sends]
    assert len(peers) == len(set(peers)), f"more than one RPC for a peer: {peers}"
    return dict(out.sends)


def control_of(out: Output, peer: PeerId) -> Control:
    rpc = sends(out).get(peer)
    return rpc.control if rpc is not None and rpc.control is not None else Control()


def grafted(out: Output) -> set[PeerId]:
    return {p for p, rpc in out.sends if rpc.control and rpc.control.graft}


def pruned(out: Output) -> set[PeerId]:
    return {p for p, rpc in out.sends if rpc.control and rpc.control.prune}


def ihave_to(out: Output) -> dict[PeerId, tuple[IHave, ...]]:
    return {p: rpc.control.ihave for p, rpc in out.sends if rpc.control and rpc.control.ihave}


def forwarded(out: Output) -> dict[PeerId, tuple[Message, ...]]:
    return {p: rpc.publish for p, rpc in out.sends if rpc.publish}


def types(out: Output) -> list[TraceType]:
    return [ev.type for ev in out.trace]


def msg(origin: bytes, seq: int, topic: str = "t", data: bytes = b"d") -> Message:
    return Message(origin, data, seq.to_bytes(8, "big"), topic)


def publish_rpc(*msgs: Message) -> Rpc:
    return Rpc(publish=msgs)


def control_rpc(*, ihave: tuple[IHave, ...] = (), iwant: tuple[IWant, ...] = (),
                graft: tuple[str, ...] = (), prune: tuple[str | Prune, ...] = (),
                idontwant: tuple[IDontWant, ...] = ()) -> Rpc:
    prunes = tuple(p if isinstance(p, Prune) else Prune(p) for p in prune)
    return Rpc(control=Control(ihave, iwant, tuple(Graft(t) for t in graft), prunes, idontwant))


def sub_rpc(topic: str, subscribe: bool = True) -> Rpc:
    return Rpc(subscriptions=(SubOpts(subscribe, topic),))


def peer_names(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i:02d}".encode() for i in range(n)]
