"""Trace files -> one flat Parquet table, one row per TraceEvent.

Why this shape (docs/metrics.md, "Ingestion"): decoding protobuf is Python
work, and the cheapest way to hand millions of decoded events to Spark is
columnar. Each trace file is decoded by one worker of a process pool into
Python column lists, turned into Arrow arrays and written as Parquet row
groups; Spark then scans the directory natively (vectorised, column-pruned).
Going through `sparkContext.parallelize(files).mapPartitions(...)` instead
would pickle every Row through Spark's Python worker protocol, which costs
several times the decoding itself on a 2-core machine.

The table keeps what every metric needs and nothing else: RPC metas are
reduced to counts (message entries, IHAVE/IWANT/GRAFT/PRUNE entries and the
ids they carry), so a SEND_RPC is one row, not one row per message entry.

Both go-libp2p-pubsub trace encodings are read: the protobuf tracer's
uvarint-delimited frames (ours too; suffix .pb) and the JSON tracer's one
object per line (suffix .json / .jsonl, protobuf JSON field names).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from node.errors import InputError
from node.trace_vocab import (
    ADD_PEER,
    DELIVER,
    DROP_RPC,
    DUPLICATE,
    GRAFT,
    JOIN,
    LEAVE,
    PRUNE,
    PUBLISH,
    RECV_RPC,
    REJECT,
    REMOVE_PEER,
    SEND_RPC,
)

PB_SUFFIXES = (".pb",)
JSON_SUFFIXES = (".json", ".jsonl")
ROW_GROUP = 500_000
# Below this many bytes of traces, decoding in the calling process beats
# starting a pool.
POOL_THRESHOLD_BYTES = 8 << 20

SCHEMA = pa.schema(
    [
        ("node", pa.string()),
        ("type", pa.int8()),
        ("ts", pa.int64()),
        ("seq", pa.int64()),  # position in its trace file: orders events with equal timestamps
        ("msg", pa.string()),  # lower-case hex message id (message events)
        ("topic", pa.string()),
        ("peer", pa.string()),  # receivedFrom / sendTo / added, removed, grafted, pruned peer
        ("size", pa.int64()),  # RPC bytes (gossip-testbed extension), null when absent
        ("n_msgs", pa.int32()),  # publish entries in the RPC meta
        ("n_subs", pa.int32()),
        ("n_ihave", pa.int32()),
        ("n_ihave_ids", pa.int32()),
        ("n_iwant", pa.int32()),
        ("n_iwant_ids", pa.int32()),
        ("n_graft", pa.int32()),
        ("n_prune", pa.int32()),
    ]
)
COLUMNS = [f.name for f in SCHEMA]

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _base58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 58)
        out.append(_B58[r])
    pad = len(data) - len(data.lstrip(b"\0"))
    return "1" * pad + "".join(reversed(out))


class PeerNames:
    """Peer id bytes -> name: our ids are node names in UTF-8; a go peer id
    (a multihash) is shown as libp2p shows it, in base58."""

    def __init__(self) -> None:
        self._cache: dict[bytes, str] = {}

    def __call__(self, pid: bytes) -> str | None:
        if not pid:
            return None
        name = self._cache.get(pid)
        if name is None:
            try:
                name = pid.decode("utf-8")
                if not name.isprintable():
                    raise ValueError
            except ValueError:
                name = _base58(pid)
            self._cache[pid] = name
        return name


def trace_files(trace_dir: Path) -> list[Path]:
    files = [
        p
        for p in sorted(trace_dir.iterdir())
        if p.is_file() and p.suffix in PB_SUFFIXES + JSON_SUFFIXES
    ]
    return files


def iter_events(path: Path) -> Iterator:
    """The TraceEvent protobufs in a trace file of either encoding."""
    from node.tracefile import PB, read_trace

    if path.suffix in PB_SUFFIXES:
        yield from read_trace(path)
        return
    from google.protobuf import json_format

    def parse(line: str, lineno: int, last: bool):
        ev = PB()
        try:
            json_format.Parse(line, ev, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError) as exc:
            if last:  # a truncated last line: the tracer was killed mid-write
                return None
            raise InputError(f"{path}:{lineno}: not a TraceEvent JSON object: {exc}") from None
        return ev

    with open(path, encoding="utf-8") as f:
        pending: tuple[str, int] | None = None
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if pending is not None:
                yield parse(*pending, last=False)
            pending = (line, lineno)
        if pending is not None:
            ev = parse(*pending, last=True)
            if ev is not None:
                yield ev


class _Columns:
    def __init__(self) -> None:
        self.cols: dict[str, list] = {c: [] for c in COLUMNS}

    def __len__(self) -> int:
        return len(self.cols["ts"])

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.cols, schema=SCHEMA)


def decode_file(path: Path, out_path: Path, default_node: str | None = None) -> tuple[str, int]:
    """Decode one trace file into `out_path` (Parquet). Returns (path, events)."""
    names = PeerNames()
    writer: pq.ParquetWriter | None = None
    total = 0
    cols = _Columns()
    c = cols.cols
    a_node, a_type, a_ts, a_msg, a_topic, a_peer, a_size, a_seq = (
        c["node"], c["type"], c["ts"], c["msg"], c["topic"], c["peer"], c["size"], c["seq"],
    )
    a_nm, a_ns, a_ih, a_ihi, a_iw, a_iwi, a_g, a_p = (
        c["n_msgs"], c["n_subs"], c["n_ihave"], c["n_ihave_ids"], c["n_iwant"],
        c["n_iwant_ids"], c["n_graft"], c["n_prune"],
    )
    zeros = (a_nm, a_ns, a_ih, a_ihi, a_iw, a_iwi, a_g, a_p)

    def flush() -> None:
        nonlocal writer, cols, c
        if writer is None:
            writer = pq.ParquetWriter(out_path, SCHEMA, compression="snappy")
        writer.write_table(cols.table(), row_group_size=ROW_GROUP)
        for lst in c.values():
            lst.clear()

    for ev in iter_events(path):
        t = ev.type
        a_node.append(names(ev.peerID) or default_node)
        a_type.append(t)
        a_ts.append(ev.timestamp)
        a_seq.append(total)
        msg = topic = peer = size = None
        if t == DELIVER:
            sub = ev.deliverMessage
            msg, topic, peer = sub.messageID.hex(), sub.topic, names(sub.receivedFrom)
        elif t == DUPLICATE:
            sub = ev.duplicateMessage
            msg, topic, peer = sub.messageID.hex(), sub.topic, names(sub.receivedFrom)
        elif t == PUBLISH:
            sub = ev.publishMessage
            msg, topic = sub.messageID.hex(), sub.topic
        elif RECV_RPC <= t <= DROP_RPC:
            if t == SEND_RPC:
                sub = ev.sendRPC
                peer = names(sub.sendTo)
            elif t == RECV_RPC:
                sub = ev.recvRPC
                peer = names(sub.receivedFrom)
            else:
                sub = ev.dropRPC
                peer = names(sub.sendTo)
            if sub.HasField("size"):
                size = sub.size
            meta = sub.meta
            a_nm.append(len(meta.messages))
            a_ns.append(len(meta.subscription))
            if meta.HasField("control"):
                ctl = meta.control
                ih, iw = ctl.ihave, ctl.iwant
                a_ih.append(len(ih))
                a_ihi.append(sum(len(x.messageIDs) for x in ih) if ih else 0)
                a_iw.append(len(iw))
                a_iwi.append(sum(len(x.messageIDs) for x in iw) if iw else 0)
                a_g.append(len(ctl.graft))
                a_p.append(len(ctl.prune))
            else:
                a_ih.append(0)
                a_ihi.append(0)
                a_iw.append(0)
                a_iwi.append(0)
                a_g.append(0)
                a_p.append(0)
            a_msg.append(None)
            a_topic.append(None)
            a_peer.append(peer)
            a_size.append(size)
            total += 1
            if len(a_ts) >= ROW_GROUP:
                flush()
            continue
        elif t == GRAFT:
            sub = ev.graft
            topic, peer = sub.topic, names(sub.peerID)
        elif t == PRUNE:
            sub = ev.prune
            topic, peer = sub.topic, names(sub.peerID)
        elif t == JOIN:
            topic = ev.join.topic
        elif t == LEAVE:
            topic = ev.leave.topic
        elif t == ADD_PEER:
            peer = names(ev.addPeer.peerID)
        elif t == REMOVE_PEER:
            peer = names(ev.removePeer.peerID)
        elif t == REJECT:
            sub = ev.rejectMessage
            msg, topic, peer = sub.messageID.hex(), sub.topic, names(sub.receivedFrom)
        a_msg.append(msg)
        a_topic.append(topic)
        a_peer.append(peer)
        a_size.append(None)
        for z in zeros:
            z.append(0)
        total += 1
        if len(a_ts) >= ROW_GROUP:
            flush()
    if len(cols) or writer is None:
        flush()
    assert writer is not None
    writer.close()
    return str(path), total


def _decode_job(args: tuple[str, str, str]) -> tuple[str, int]:
    path, out, default_node = args
    return decode_file(Path(path), Path(out), default_node)


@dataclass
class IngestResult:
    events_dir: Path
    files: int
    events: int


def ingest(
    files: Iterable[Path], out_dir: Path, workers: int | None = None, progress=None
) -> IngestResult:
    """Decode every trace file into `out_dir/part-NNNNN.parquet`, in parallel
    over files (largest first, so one big file does not finish last).
    `progress(done_files, total_files)` is called as files finish."""
    files = sorted(files, key=lambda p: p.stat().st_size, reverse=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.parquet"):
        old.unlink()
    jobs = [
        (str(p), str(out_dir / f"part-{i:05d}.parquet"), p.stem) for i, p in enumerate(files)
    ]
    total_bytes = sum(p.stat().st_size for p in files)
    workers = workers or os.cpu_count() or 1
    events = 0
    done = 0
    if progress:
        progress(0, len(jobs))
    if workers <= 1 or len(jobs) <= 1 or total_bytes < POOL_THRESHOLD_BYTES:
        for job in jobs:
            events += _decode_job(job)[1]
            done += 1
            if progress:
                progress(done, len(jobs))
    else:
        # spawn, not fork: the caller may already hold a JVM gateway and threads.
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=get_context("spawn")) as pool:
            for _, n in pool.map(_decode_job, jobs, chunksize=1):
                events += n
                done += 1
                if progress:
                    progress(done, len(jobs))
    return IngestResult(out_dir, len(jobs), events)
