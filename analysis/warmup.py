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

from node.codec import encode_frame
from node.engine.api import TraceEvent, TraceType
from node.tracefile import MAX_TRACE_EVENT, to_proto
from node.wire import Message, Rpc, seqno_bytes

MS = 1_000_000
TOPIC = "warm-up"
NODES = ("w0", "w1", "w2", "w3")


def warm_up_run(root: Path) -> Path:
    """A tiny run directory: four nodes JOIN a topic and GRAFT a ring; w0
    publishes one message that reaches the others (w3 once more, a duplicate)."""
    m = Message(b"w0", b"warm-up", seqno_bytes(1), TOPIC)
    rpc = Rpc(publish=(m,))
    events: dict[str, list[TraceEvent]] = {n: [TraceEvent(TraceType.JOIN, 0, topic=TOPIC)] for n in NODES}
    for i, n in enumerate(NODES):
        peer = NODES[(i + 1) % len(NODES)].encode()
        events[n].append(TraceEvent(TraceType.GRAFT, 1 * MS, peer=peer, topic=TOPIC))
    events["w0"].append(TraceEvent(TraceType.PUBLISH_MESSAGE, 10 * MS, message_id=m.id, topic=TOPIC))
    for k, (src, dst) in enumerate((("w0", "w1"), ("w1", "w2"), ("w2", "w3"), ("w1", "w3"))):
        t = (20 + 10 * k) * MS
        events[src].append(TraceEvent(TraceType.SEND_RPC, t, peer=dst.encode(), rpc=rpc))
        events[dst].append(TraceEvent(TraceType.RECV_RPC, t + 5 * MS, peer=src.encode(), rpc=rpc))
        seen = any(e.type == TraceType.DELIVER_MESSAGE for e in events[dst])
        kind = TraceType.DUPLICATE_MESSAGE if seen else TraceType.DELIVER_MESSAGE
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
