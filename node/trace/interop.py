"""gossipsub-interop stdout (NDJSON) -> a go-libp2p-pubsub-format trace, so a
foreign node's traces/<node>.pb reads like one of ours to the analysis.

The contract (libp2p test-plans' gossipsub-interop) promises two lines: a
"PeerID" line at start and a "Received Message" line for EVERY copy a node
receives. Our adapters and our own contract entry point add extension lines
(docs/foreign-routers.md): "Published Message", "Joined"/"Left", "Peer
Added"/"Peer Removed", "Graft"/"Prune", "RPC Sent"/"RPC Received" (with the
RPC's size, or its IDONTWANT ids, or both) and "Peer Scores" (each connected
peer's score at a heartbeat, for scores/<node>.csv; not a trace event).

The mapping follows go's tracer: a node's first copy of a message is
DELIVER_MESSAGE (receivedFrom = from), later copies DUPLICATE_MESSAGE; a
publish is PUBLISH_MESSAGE then DELIVER_MESSAGE from itself. Ids in the
lines are base-10 u64s (the data's first 8 bytes, big-endian) and become
those 8 bytes; peer ids are base58 and become their multihash bytes.

A bare image logs neither its subscriptions nor its publishes, but it runs a
script the orchestrator wrote. Given the scripts it ran (one per start, in
order: each "PeerID" line starts the next), what the stream does not show is
taken from them: JOIN of its topics at its start, and each scripted publish
at start + waitUntil (how the node itself counts). The seen set starts empty
at each start, as the node's does.

Lines that are not JSON objects with "time" and "msg", or whose fields do not
parse, are counted as garbage (with the first few kept for the report), never
fatal: a node may print anything on stdout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from node.wire.codec import encode_frame
from node.wire.rpc import Control, IDontWant, Rpc
from node.engine.api import TraceEvent
from node.libp2p.identity import peer_id_from_b58
from node.trace.file import MAX_TRACE_EVENT, to_proto
from node.trace.vocab import TraceType

PEER_ID = "PeerID"
RECEIVED = "Received Message"
PUBLISHED = "Published Message"
SCORES = "Peer Scores"
MAX_SAMPLES = 5
_FRACTION = re.compile(r"^(?P<head>[^.]+)(\.(?P<frac>\d+))?(?P<zone>Z|[+-]\d\d:\d\d)$")
_RPC = {"RPC Sent": TraceType.SEND_RPC, "RPC Received": TraceType.RECV_RPC}
_TOPIC_EVENTS = {"Joined": TraceType.JOIN, "Left": TraceType.LEAVE}
_PEER_EVENTS = {"Peer Added": TraceType.ADD_PEER, "Peer Removed": TraceType.REMOVE_PEER,
                "Graft": TraceType.GRAFT, "Prune": TraceType.PRUNE}


class BadLine(ValueError):
    """A line whose fields do not parse."""


@dataclass
class Conversion:
    """What a conversion found: events written, garbage lines (with samples),
    lines of unknown kinds (by kind), starts seen and the node's peer id."""

    events: int = 0
    garbage: int = 0
    garbage_samples: list[str] = field(default_factory=list)
    unknown: dict[str, int] = field(default_factory=dict)
    starts: int = 0
    peer_id: str | None = None
    scores: list[tuple[int, list[tuple[bytes, float]]]] = field(default_factory=list)  # (time, [(peer, score)])

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "garbage": self.garbage, "garbage_samples": self.garbage_samples,
                "unknown": dict(sorted(self.unknown.items())), "starts": self.starts, "peer_id": self.peer_id}


def parse_time(text: Any) -> int:
    """RFC 3339 (nanosecond fractions allowed) -> Unix nanoseconds."""
    if not isinstance(text, str):
        raise BadLine(f"time is not a string: {text!r}")
    m = _FRACTION.match(text.strip())
    if m is None:
        raise BadLine(f"time is not RFC 3339: {text!r}")
    try:
        whole = datetime.fromisoformat(m["head"] + ("+00:00" if m["zone"] == "Z" else m["zone"]))
    except ValueError:
        raise BadLine(f"time is not RFC 3339: {text!r}") from None
    frac = (m["frac"] or "0")[:9].ljust(9, "0")
    return int(whole.timestamp()) * 1_000_000_000 + int(frac)


def message_id_bytes(value: Any) -> bytes:
    """The contract's base-10 message id -> the 8 id bytes (big-endian u64)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not text.isdigit() or int(text) >= 1 << 64:
        raise BadLine(f"message id is not a base-10 u64: {value!r}")
    return int(text).to_bytes(8, "big")


def _peer(value: Any) -> bytes:
    if not isinstance(value, str):
        raise BadLine(f"peer id is not a string: {value!r}")
    try:
        return peer_id_from_b58(value)
    except ValueError as exc:
        raise BadLine(f"bad peer id {value!r}: {exc}") from None


def _text(line: dict[str, Any], key: str) -> str:
    value = line.get(key)
    if not isinstance(value, str):
        raise BadLine(f"{key!r} is not a string: {value!r}")
    return value


def _idontwant(value: Any) -> Rpc:
    """An RPC that carries IDONTWANT for these contract ids (and nothing the
    line does not show)."""
    if not isinstance(value, list):
        raise BadLine(f"idontwant is not a list of message ids: {value!r}")
    return Rpc(control=Control(idontwant=(IDontWant(tuple(message_id_bytes(v) for v in value)),)))


def _scores(value: Any) -> list[tuple[bytes, float]]:
    if not isinstance(value, dict):
        raise BadLine(f"scores is not an object of peer ids: {value!r}")
    rows = []
    for peer, score in value.items():
        if not isinstance(score, (int, float)) or isinstance(score, bool):
            raise BadLine(f"score of {peer!r} is not a number: {score!r}")
        rows.append((_peer(peer), float(score)))
    return rows


def _size(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
        raise BadLine(f"size is not a u32: {value!r}")
    return value


class _Converter:
    def __init__(self, scripts: Sequence[Sequence[dict[str, Any]]], shows_publishes: bool, shows_joins: bool) -> None:
        self.scripts = scripts
        self.shows_publishes = shows_publishes
        self.shows_joins = shows_joins
        self.self_id = b""
        self.seen: set[bytes] = set()
        self.topic = ""  # a Received Message without a topic: the script's one topic, if it has one
        self.events: list[tuple[int, int, TraceEvent, int | None]] = []  # (ts, order, event, rpc size)
        self.result = Conversion()

    def add(self, ev: TraceEvent, size: int | None = None) -> None:
        self.events.append((ev.timestamp, len(self.events), ev, size))

    def publish(self, t: int, mid: bytes, topic: str) -> None:
        self.seen.add(mid)
        self.add(TraceEvent(TraceType.PUBLISH_MESSAGE, t, mid, topic))
        self.add(TraceEvent(TraceType.DELIVER_MESSAGE, t, mid, topic, peer=self.self_id))

    def start(self, t: int, line: dict[str, Any]) -> None:
        self.result.peer_id = _text(line, "id")
        self.self_id = _peer(self.result.peer_id)
        self.seen = set()
        script = self.scripts[self.result.starts] if self.result.starts < len(self.scripts) else ()
        self.result.starts += 1
        topics = [i["topicID"] for i in script if i.get("type") == "subscribeToTopic"]
        self.topic = topics[0] if len(topics) == 1 else ""
        waited = 0
        for instr in script:
            kind = instr.get("type")
            if kind == "subscribeToTopic" and not self.shows_joins:
                self.add(TraceEvent(TraceType.JOIN, t, topic=instr["topicID"]))
            elif kind == "waitUntil":
                waited = int(instr["elapsedSeconds"])
            elif kind == "publish" and not self.shows_publishes:
                self.publish(t + waited * 1_000_000_000, message_id_bytes(instr["messageID"]), instr["topicID"])

    def line(self, line: dict[str, Any]) -> None:
        t = parse_time(line.get("time"))
        msg = line["msg"]
        if msg == PEER_ID:
            self.start(t, line)
        elif msg == RECEIVED:  # from and topic are only a SHOULD in the contract
            mid = message_id_bytes(line.get("id"))
            topic = _text(line, "topic") if "topic" in line else self.topic
            peer = _peer(line.get("from")) if "from" in line else b""
            kind = TraceType.DUPLICATE_MESSAGE if mid in self.seen else TraceType.DELIVER_MESSAGE
            self.seen.add(mid)
            self.add(TraceEvent(kind, t, mid, topic, peer=peer))
        elif msg == PUBLISHED:
            self.publish(t, message_id_bytes(line.get("id")), _text(line, "topic"))
        elif msg in _TOPIC_EVENTS:
            self.add(TraceEvent(_TOPIC_EVENTS[msg], t, topic=_text(line, "topic")))
        elif msg in _PEER_EVENTS:
            topic = _text(line, "topic") if msg in ("Graft", "Prune") else ""
            protocol = _text(line, "protocol") if msg == "Peer Added" else ""
            self.add(TraceEvent(_PEER_EVENTS[msg], t, topic=topic, peer=_peer(line.get("peer")), protocol=protocol))
        elif msg in _RPC:
            if "size" not in line and "idontwant" not in line:
                raise BadLine("an RPC line with neither size nor idontwant")
            rpc = _idontwant(line["idontwant"]) if "idontwant" in line else None
            size = _size(line["size"]) if "size" in line else None
            self.add(TraceEvent(_RPC[msg], t, peer=_peer(line.get("peer")), rpc=rpc), size)
        elif msg == SCORES:
            self.result.scores.append((t, _scores(line.get("scores"))))
        else:
            self.result.unknown[str(msg)] = self.result.unknown.get(str(msg), 0) + 1

    def frames(self, fallback_id: bytes) -> bytes:
        out = []
        for _, _, ev, size in sorted(self.events, key=lambda e: e[:2]):
            pb = to_proto(ev, self.self_id or fallback_id)
            if size is not None:
                (pb.sendRPC if ev.type == TraceType.SEND_RPC else pb.recvRPC).size = size
            out.append(encode_frame(pb.SerializeToString(), MAX_TRACE_EVENT))
        self.result.events = len(out)
        return b"".join(out)


def _parsed(raw: str) -> dict[str, Any] | None:
    try:
        line = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(line, dict) or "time" not in line or not isinstance(line.get("msg"), str):
        return None
    return line


def convert(
    lines: Iterable[str], out: Path, self_id: bytes, scripts: Sequence[Sequence[dict[str, Any]]] = (),
) -> Conversion:
    """Write `out` (a trace file) from a node's stdout `lines`; `self_id` is
    its peer id where no PeerID line says it; `scripts`: what it was told to
    run at each start (bare images), else nothing."""
    parsed: list[tuple[str, dict[str, Any] | None]] = [(raw, _parsed(raw)) for raw in lines if raw.strip()]
    kinds = {line["msg"] for _, line in parsed if line is not None}
    conv = _Converter(scripts, PUBLISHED in kinds, "Joined" in kinds)
    for raw, line in parsed:
        try:
            if line is None:
                raise BadLine("not a JSON object with time and msg")
            conv.line(line)
        except (BadLine, KeyError, TypeError, ValueError):
            conv.result.garbage += 1
            if len(conv.result.garbage_samples) < MAX_SAMPLES:
                conv.result.garbage_samples.append(raw.strip()[:200])
    data = conv.frames(self_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return conv.result
