"""Shared helpers for the analysis and report tests: one Spark session for the
whole test session, and builders for small hand-made run directories.

Import the fixtures into a test module with
`from tests.spark_fixtures import spark  # noqa: F401`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format

from node.wire.codec import encode_frame
from node.engine.api import TraceEvent, TraceType
from node.trace.file import MAX_TRACE_EVENT, to_proto
from node.wire.rpc import Control, Graft, IHave, IWant, Message, Prune, Rpc, seqno_bytes

MS = 1_000_000
TOPIC = "t"

requires_java = pytest.mark.skipif(
    shutil.which("java") is None, reason="PySpark needs Java and no `java` is on PATH"
)


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.skip("PySpark needs Java and no `java` is on PATH")
    from analysis.spark import get_spark

    return get_spark("local[2]", small=True)


def msg(publisher: str, seq: int, topic: str = TOPIC) -> Message:
    return Message(publisher.encode(), b"payload-" + str(seq).encode(), seqno_bytes(seq), topic)


def mid(m: Message) -> str:
    return m.id.hex()


@dataclass
class RunBuilder:
    """Collects per-node trace events (with an optional RPC size override)
    and the run directory's JSON files, then writes them."""

    root: Path
    events: dict[str, list[tuple[TraceEvent, int | None]]] = field(default_factory=dict)
    log: list[dict] = field(default_factory=list)
    topology: dict | None = None
    manifest: dict | None = None
    experiment: dict | None = None
    # name -> libp2p peer id bytes: traces carry these instead of names and
    # topology.json lists them (issue 11); None: names, as before
    peer_ids: dict[str, bytes] | None = None

    def ev(self, node: str, type_: TraceType, t_ms: float, size: int | None = None, **kw) -> None:
        kw = {k: (v.encode() if k == "peer" and isinstance(v, str) else v) for k, v in kw.items()}
        self.events.setdefault(node, []).append((TraceEvent(type_, int(t_ms * MS), **kw), size))

    def node(self, name: str) -> None:
        self.events.setdefault(name, [])

    # conveniences mirroring what an engine and the runtime record
    def join(self, node, t_ms, topic=TOPIC):
        self.ev(node, TraceType.JOIN, t_ms, topic=topic)

    def leave(self, node, t_ms, topic=TOPIC):
        self.ev(node, TraceType.LEAVE, t_ms, topic=topic)

    def publish(self, node, t_ms, m: Message):
        self.ev(node, TraceType.PUBLISH_MESSAGE, t_ms, message_id=m.id, topic=m.topic)

    def send(self, src, dst, t_ms, m: Message, recv_ms=None, size=100, drop=False):
        """src hands an RPC carrying m to the link; dst records RECV_RPC at recv_ms."""
        rpc = Rpc(publish=(m,))
        self.ev(src, TraceType.DROP_RPC if drop else TraceType.SEND_RPC, t_ms, size, peer=dst, rpc=rpc)
        if recv_ms is not None and not drop:
            self.ev(dst, TraceType.RECV_RPC, recv_ms, size, peer=src, rpc=rpc)

    def control(self, src, dst, t_ms, recv_ms, control: Control, size=20):
        rpc = Rpc(control=control)
        self.ev(src, TraceType.SEND_RPC, t_ms, size, peer=dst, rpc=rpc)
        self.ev(dst, TraceType.RECV_RPC, recv_ms, size, peer=src, rpc=rpc)

    def deliver(self, node, t_ms, m: Message, frm: str):
        self.ev(node, TraceType.DELIVER_MESSAGE, t_ms, message_id=m.id, topic=m.topic, peer=frm)

    def duplicate(self, node, t_ms, m: Message, frm: str):
        self.ev(node, TraceType.DUPLICATE_MESSAGE, t_ms, message_id=m.id, topic=m.topic, peer=frm)

    def graft(self, node, t_ms, peer, topic=TOPIC):
        self.ev(node, TraceType.GRAFT, t_ms, peer=peer, topic=topic)

    def prune(self, node, t_ms, peer, topic=TOPIC):
        self.ev(node, TraceType.PRUNE, t_ms, peer=peer, topic=topic)

    def remove_peer(self, node, t_ms, peer):
        self.ev(node, TraceType.REMOVE_PEER, t_ms, peer=peer)

    def event(self, t_ms: float, kind: str, **fields) -> None:
        self.log.append({"t_ns": int(t_ms * MS), "kind": kind, **fields})

    def use_peer_ids(self) -> None:
        """Trace real-looking peer ids instead of names (see `peer_id`)."""
        names = sorted(set(self.events) | {n["name"] for n in (self.topology or {}).get("nodes", [])})
        self.peer_ids = {name: peer_id(name) for name in names}
        if self.topology is not None:
            from analysis.ingest import base58_encode

            for n in self.topology["nodes"]:
                n["peer_id"] = base58_encode(self.peer_ids[n["name"]])

    def protos(self, node: str):
        out = []
        ids = self.peer_ids
        for ev, size in sorted(self.events[node], key=lambda e: e[0].timestamp):
            if ids is not None and ev.peer:
                ev = replace(ev, peer=ids[ev.peer.decode()])
            pb = to_proto(ev, ids[node] if ids is not None else node.encode())
            if size is not None:
                for sub in ("sendRPC", "recvRPC", "dropRPC"):
                    if pb.HasField(sub):
                        getattr(pb, sub).size = size
            out.append(pb)
        return out

    def write(self, fmt: str = "pb", with_events: bool = True, with_topology: bool = True) -> Path:
        traces = self.root / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        for node in self.events:
            pbs = self.protos(node)
            if fmt == "pb":
                data = b"".join(encode_frame(pb.SerializeToString(), MAX_TRACE_EVENT) for pb in pbs)
                (traces / f"{node}.pb").write_bytes(data)
            else:  # go-libp2p-pubsub's JSON tracer: one object per line
                lines = [
                    json.dumps(json_format.MessageToDict(pb, use_integers_for_enums=True))
                    for pb in pbs
                ]
                (traces / f"{node}.json").write_text("\n".join(lines) + "\n")
        if with_events and self.log:
            (self.root / "events.jsonl").write_text(
                "".join(json.dumps(e) + "\n" for e in sorted(self.log, key=lambda e: e["t_ns"]))
            )
        if with_topology and self.topology is not None:
            (self.root / "topology.json").write_text(json.dumps(self.topology))
        if self.manifest is not None:
            (self.root / "manifest.json").write_text(json.dumps(self.manifest))
        if self.experiment is not None:
            (self.root / "experiment.resolved.yaml").write_text(yaml.safe_dump(self.experiment))
        return self.root


def peer_id(name: str) -> bytes:
    """A libp2p peer id's shape: the identity multihash (0x00, length 36) of a
    protobuf-encoded ed25519 public key (KeyType 1, 32 bytes), which base58
    shows as 12D3KooW...; the 32 key bytes here are a hash of the name, since
    the analysis only maps ids to names and never checks keys."""
    key = hashlib.sha256(name.encode()).digest()
    return b"\x00\x24\x08\x01\x12\x20" + key


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


# ---------------------------------------------------------------- the worked example

NODES = ["A", "B", "C", "D", "E"]
M1, M2, M3, M4, M5 = msg("A", 1), msg("B", 1), msg("A", 2), msg("A", 3), msg("A", 4)


def worked_example(root: Path) -> RunBuilder:
    """Five nodes on topic t; every value is worked out in docs/metrics.md's
    example and in test_analysis_metrics.py.

    overlay (one-way ms): A-B 10, B-C 10, A-C 30, C-D 5, B-E 20
    A..D JOIN at 0; E JOINs late at 2500; D is killed at 3000 (churn);
    C LEAVEs at 4000 (churn). Messages:
      m1 A@1000 -> B 1012, C 1025 (+dup from A 1040), D 1030
      m2 B@2000 -> A 2010, C 2015; C->D dropped (never arrives at D)
      m3 A@3500 -> B 3520 (+dup 3545), C 3540, E 3560 (+dup 3570)
      m4 A@5000 -> dropped on A->B: never arrives
      m5 A@6200 -> B 6210, E 6240
    """
    b = RunBuilder(root)
    for n in "ABCD":
        b.join(n, 0)
    b.join("E", 2500)
    b.node("E")
    # mesh
    b.graft("A", 500, "B"); b.graft("A", 500, "C")  # noqa: E702
    b.graft("B", 500, "A"); b.graft("B", 600, "C")  # noqa: E702
    b.graft("C", 500, "A"); b.graft("C", 600, "B"); b.graft("C", 700, "D")  # noqa: E702
    b.graft("D", 700, "C")
    b.graft("E", 2600, "B"); b.graft("B", 2600, "E")  # noqa: E702
    b.remove_peer("C", 3200, "D")
    b.leave("C", 4000)
    b.prune("C", 4000, "A"); b.prune("C", 4000, "B")  # noqa: E702
    b.prune("B", 4010, "C"); b.prune("A", 4010, "C")  # noqa: E702
    # control RPCs
    b.control("A", "B", 500, 505, Control(graft=(Graft(TOPIC),)))
    b.control("B", "A", 500, 505, Control(graft=(Graft(TOPIC),)))
    b.control("A", "E", 3000, 3005, Control(ihave=(IHave(TOPIC, (M1.id, M2.id)),)))
    b.control("E", "A", 3010, 3015, Control(iwant=(IWant((M2.id,)),)))
    b.control("C", "B", 4000, 4005, Control(prune=(Prune(TOPIC),)))
    # m1
    b.publish("A", 1000, M1)
    b.send("A", "B", 1001, M1, 1012); b.deliver("B", 1012, M1, "A")  # noqa: E702
    b.send("B", "C", 1013, M1, 1025); b.deliver("C", 1025, M1, "B")  # noqa: E702
    b.send("A", "C", 1001, M1, 1040); b.duplicate("C", 1040, M1, "A")  # noqa: E702
    b.send("C", "D", 1026, M1, 1030); b.deliver("D", 1030, M1, "C")  # noqa: E702
    # m2
    b.publish("B", 2000, M2)
    b.send("B", "A", 2001, M2, 2010); b.deliver("A", 2010, M2, "B")  # noqa: E702
    b.send("B", "C", 2001, M2, 2015); b.deliver("C", 2015, M2, "B")  # noqa: E702
    b.send("C", "D", 2016, M2, drop=True)
    # m3
    b.publish("A", 3500, M3)
    b.send("A", "B", 3501, M3, 3520); b.deliver("B", 3520, M3, "A")  # noqa: E702
    b.send("B", "C", 3521, M3, 3540); b.deliver("C", 3540, M3, "B")  # noqa: E702
    b.send("B", "E", 3521, M3, 3560); b.deliver("E", 3560, M3, "B")  # noqa: E702
    b.send("C", "B", 3541, M3, 3545); b.duplicate("B", 3545, M3, "C")  # noqa: E702
    b.send("C", "E", 3541, M3, 3570); b.duplicate("E", 3570, M3, "C")  # noqa: E702
    # m4
    b.publish("A", 5000, M4)
    b.send("A", "B", 5001, M4, drop=True)
    # m5
    b.publish("A", 6200, M5)
    b.send("A", "B", 6201, M5, 6210); b.deliver("B", 6210, M5, "A")  # noqa: E702
    b.send("B", "E", 6211, M5, 6240); b.deliver("E", 6240, M5, "B")  # noqa: E702

    b.event(0, "run_start")
    b.event(0, "all_up", nodes=5)
    for t, m, node in ((1000, M1, "A"), (2000, M2, "B"), (3500, M3, "A"), (5000, M4, "A"), (6200, M5, "A")):
        b.event(t, "publish", node=node, via=[node], topic=TOPIC, message_id=mid(m), size=9, seq=0)
    b.event(3000, "churn", action="kill", nodes=["D"])
    b.event(3000, "node_down", node="D", cause="kill")
    b.event(4000, "churn", action="leave", nodes=["C"], topic=TOPIC)
    b.event(7000, "run_end")
    b.topology = {
        "nodes": [
            {"name": n, "group": "default", "router": "gossipsub", "topics": [TOPIC], "region": None,
             "uplink_bps": None}
            for n in NODES
        ],
        "edges": [
            {"a": "A", "b": "B", "latency_ms": 10.0, "jitter_ms": 0.0, "loss": 0.0},
            {"a": "B", "b": "C", "latency_ms": 10.0, "jitter_ms": 0.0, "loss": 0.0},
            {"a": "A", "b": "C", "latency_ms": 30.0, "jitter_ms": 0.0, "loss": 0.0},
            {"a": "C", "b": "D", "latency_ms": 5.0, "jitter_ms": 0.0, "loss": 0.0},
            {"a": "B", "b": "E", "latency_ms": 20.0, "jitter_ms": 0.0, "loss": 0.0},
        ],
    }
    b.manifest = {
        "tool": "gossip-testbed", "version": "0.1.0", "backend": "sim", "experiment": "worked.yaml",
        "name": "worked-example", "seed": 1, "clock": "virtual", "t0_ns": 0,
        "started_at": "2025-01-01T00:00:00Z", "wall_time_s": 0.5,
        "shaping": {"path": "virtual", "netem_available": None, "detail": "simulated links"},
        "host": {"platform": "linux", "cpus": 2, "memory_bytes": 24 << 30, "kernel": "6.1"},
        "events_processed": 100, "nodes": 5, "warnings": [],
    }
    b.experiment = {
        "name": "worked-example", "seed": 1,
        "expectations": ["delivery_ratio >= 0.7", "latency_ms.p99 < 100"],
    }
    return b
