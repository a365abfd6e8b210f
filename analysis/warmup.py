"""One throwaway analysis a new Spark Connect server runs before
`testbed spark start` returns.

Why: a server's first analysis costs several times a later one: classes
load, the JIT compiles, the query paths run for the first time (a 3k-event
analysis: 15.5 server CPU seconds first, about 3 from the second on). Paying
that while the server starts, on a run nobody waits for, is what lets the
user's first analysis be warm. The run is four nodes and one message over
the same stages as a real one, written to a temporary directory and removed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from node.wire.codec import encode_frame
from node.engine.api import TraceEvent, TraceType
from node.trace.file import MAX_TRACE_EVENT, to_proto
from node.wire.rpc import Message, Rpc, seqno_bytes

MS = 1_000_000
TOPIC = "warm-up"
NODES = ("w0", "w1", "w2", "w3")


def warm_up_run(root: Path, messages: int = 1) -> Path:
    """A tiny run directory: four nodes JOIN a topic and GRAFT a ring; each
    message, published by the nodes in turn, reaches the other three over
    the ring (the last of them once more, a duplicate): 13 events per message."""
    events: dict[str, list[TraceEvent]] = {n: [TraceEvent(TraceType.JOIN, 0, topic=TOPIC)] for n in NODES}
    for i, n in enumerate(NODES):
        peer = NODES[(i + 1) % len(NODES)].encode()
        events[n].append(TraceEvent(TraceType.GRAFT, 1 * MS, peer=peer, topic=TOPIC))
    for k in range(messages):
        ring = NODES[k % len(NODES):] + NODES[:k % len(NODES)]
        m = Message(ring[0].encode(), b"warm-up", seqno_bytes(k + 1), TOPIC)
        rpc = Rpc(publish=(m,))
        t0 = 10 * MS + k * 100 * MS
        events[ring[0]].append(TraceEvent(TraceType.PUBLISH_MESSAGE, t0, message_id=m.id, topic=TOPIC))
        reached: set[str] = set()
        for hop, (a, b) in enumerate(((0, 1), (1, 2), (2, 3), (1, 3))):
            src, dst = ring[a], ring[b]
            t = t0 + (10 + 10 * hop) * MS
            events[src].append(TraceEvent(TraceType.SEND_RPC, t, peer=dst.encode(), rpc=rpc))
            events[dst].append(TraceEvent(TraceType.RECV_RPC, t + 5 * MS, peer=src.encode(), rpc=rpc))
            kind = TraceType.DUPLICATE_MESSAGE if dst in reached else TraceType.DELIVER_MESSAGE
            reached.add(dst)
            events[dst].append(TraceEvent(kind, t + 5 * MS, message_id=m.id, topic=TOPIC, peer=src.encode()))
    traces = root / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    for node, evs in events.items():
        frames = (encode_frame(to_proto(e, node.encode()).SerializeToString(), MAX_TRACE_EVENT) for e in evs)
        (traces / f"{node}.pb").write_bytes(b"".join(frames))
    return root


def warm_up(remote: str) -> None:
    """Analyse a tiny run through the Connect server at `remote`."""
    from analysis import run_analysis

    with tempfile.TemporaryDirectory(prefix="testbed-spark-warm-up-") as tmp:
        run_analysis(warm_up_run(Path(tmp)), spark_remote=remote)
