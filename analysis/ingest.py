"""Trace files -> one flat Parquet table, one row per TraceEvent.

Why this shape (docs/metrics.md, "Ingestion"): the cheapest way to hand
millions of decoded events to Spark is columnar. Each trace file is decoded
by one worker of a process pool straight into Arrow columns (columnar.py:
numpy over all records at once, no Python object per event; small files and
the records it does not take, one protobuf object per event), and each
worker writes its group of trace files as one Parquet file (Spark pays a
fixed cost per file it opens: 200 small files cost it seconds); Spark then
scans the directory natively (vectorised, column-pruned).
Going through `sparkContext.parallelize(files).mapPartitions(...)` instead
would pickle every Row through Spark's Python worker protocol, which costs
several times the decoding itself on a 2-core machine.

The table keeps what every metric needs and nothing else: RPC metas are
reduced to counts (message entries, IHAVE/IWANT/GRAFT/PRUNE/IDONTWANT
entries, the ids they carry and the peers PRUNEs offer), so a SEND_RPC is one row, not one row per message entry.

Both go-libp2p-pubsub trace encodings are read: the protobuf tracer's
uvarint-delimited frames (ours too; suffix .pb) and the JSON tracer's one
object per line (suffix .json / .jsonl, protobuf JSON field names).
"""

from __future__ import annotations

import heapq
import math
import os
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis import columnar

from node.trace.vocab import (
    ADD_PEER,
    DELIVER,
    DROP_RPC,
    DUPLICATE,
    GRAFT,
    JOIN,
    KNOWN_TYPES,
    LEAVE,
    PRUNE,
    PUBLISH,
    RECV_RPC,
    REJECT,
    REMOVE_PEER,
    SEND_RPC,
)
from node.trace.file import MAX_TRACE_EVENT, PB


PB_SUFFIXES = (".pb",)
JSON_SUFFIXES = (".json", ".jsonl")
ROW_GROUP = 500_000
# Below this many bytes of traces, decoding in the calling process beats
# starting a pool.
POOL_THRESHOLD_BYTES = 8 << 20
# Up to this many events, decoded in this process, the analysis hands Spark
# the table itself (metrics.events_frame)
IN_MEMORY_MAX_EVENTS = 200_000
# Trace bytes per Parquet file the decoding workers write (several trace
# files to one Parquet file: Spark's cost per file read dwarfs a small file's)
GROUP_BYTES = 64 << 20
# Below this many bytes a .pb trace is read one protobuf object per event:
# columnar.decode's fixed cost (a few dozen numpy calls) exceeds its saving.
COLUMNAR_MIN_BYTES = 64 << 10

SCHEMA = pa.schema(
    [
        ("node", pa.string()),
        ("type", pa.int8()),
        ("ts", pa.int64()),
        ("seq", pa.int64()),  # position in its trace file: orders events with equal timestamps
        ("msg", pa.string()),  # lower-case hex message id (message events; an RPC's first message)
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
        ("n_px", pa.int32()),  # peers offered in the PRUNE entries (peer exchange)
        ("n_idontwant", pa.int32()),  # IDONTWANT entries (v1.2; ControlMeta field 5, as go numbers it)
        ("n_idontwant_ids", pa.int32()),
    ]
)
COLUMNS = [f.name for f in SCHEMA]
N_COUNTS = len(COLUMNS) - COLUMNS.index("n_msgs")  # the per-event counts, the table's last columns
# A trace file's table, and each Parquet file's row groups, are grouped by
# event type (in trace order within a type): most queries read one or a few
# types, and Spark skips the row groups whose type statistics rule them out.
TABLE_ORDER = [("type", "ascending"), ("seq", "ascending")]

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58_encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 58)
        out.append(_B58[r])
    pad = len(data) - len(data.lstrip(b"\0"))
    return "1" * pad + "".join(reversed(out))


def base58_decode(text: str) -> bytes:
    """A base58 peer id (`12D3KooW...`) back to its multihash bytes."""
    n = 0
    for ch in text:
        digit = _B58.find(ch)
        if digit < 0:
            raise ValueError(f"{ch!r} is not a base58 digit")
        n = n * 58 + digit
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


class PeerNames:
    """Peer id bytes -> node name. `known` maps the peer ids topology.json
    lists (real libp2p ids) to their names; an id not listed is a node name
    in UTF-8 (our routers before real identities) or else a foreign peer,
    shown as libp2p shows it, in base58."""

    def __init__(self, known: dict[bytes, str] | None = None) -> None:
        self._cache: dict[bytes, str] = dict(known or {})

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
                name = base58_encode(pid)
            self._cache[pid] = name
        return name


def trace_files(trace_dir: Path) -> list[Path]:
    files = [
        p
        for p in sorted(trace_dir.iterdir())
        if p.is_file() and p.suffix in PB_SUFFIXES + JSON_SUFFIXES
    ]
    return files


@dataclass(frozen=True)
class TraceFileReport:
    """What reading one trace file found (docs/metrics.md, "Trace integrity"):
    `truncated` the file ends inside a record (a writer stopped mid-write);
    `corrupt` stretches of bytes that are not trace records, skipped until
    records could be read again; `bytes_skipped` counts both."""

    file: str
    node: str
    records: int
    bytes: int
    bytes_skipped: int
    truncated: bool
    corrupt: int
    # records per node, by the records' peer ids (one entry for a node's own
    # trace; several for a file that holds many nodes' events)
    node_records: tuple[tuple[str, int], ...] = ()

    @property
    def damaged(self) -> bool:
        return self.truncated or self.corrupt > 0


@dataclass
class _Tally:
    records: int = 0
    bytes_skipped: int = 0
    truncated: bool = False
    corrupt: int = 0


def _uvarint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None when `buf` ends inside the varint or
    it is longer than 10 bytes."""
    value = shift = 0
    for i in range(pos, min(len(buf), pos + 10)):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    return None


def _record_at(buf: bytes, pos: int, max_len: int):
    """The TraceEvent framed at `pos` and the position after it; None when
    the bytes there are not a well-formed record (a record has a known type
    and a timestamp, as every tracer writes them)."""
    first = buf[pos]
    if first < 0x80:  # the common case: a record shorter than 128 bytes
        length, start = first, pos + 1
    else:
        head = _uvarint(buf, pos)
        if head is None:
            return None
        length, start = head
    end = start + length
    if length > max_len or end > len(buf):
        return None
    ev = PB()
    try:
        ev.ParseFromString(buf[start:end])
    except Exception:  # protobuf's DecodeError and friends
        return None
    if ev.type not in KNOWN_TYPES or not (ev.HasField("timestamp") and ev.HasField("type")):
        return None
    return ev, end


def _cut_record(buf: bytes, pos: int, max_len: int) -> bool:
    """The bytes from `pos` to the end (just after a whole record) are the
    start of a record the file was cut inside: a length header that runs past
    the end, or is itself cut."""
    head = _uvarint(buf, pos)
    if head is None:
        return len(buf) - pos < 10
    length, start = head
    return length <= max_len and start + length > len(buf)


def _resync(buf: bytes, pos: int, max_len: int) -> int:
    """The first position after `pos` where two well-formed records follow
    each other (or one ends the file): where reading can resume."""
    for cand in range(pos + 1, len(buf)):
        got = _record_at(buf, cand, max_len)
        if got is None:
            continue
        end = got[1]
        if end == len(buf) or _record_at(buf, end, max_len) is not None:
            return cand
    return len(buf)


def _past_damage(buf: bytes, pos: int, tally: _Tally) -> int:
    """No record at `pos`: counts the damage and returns where reading
    resumes (the end when the file was cut inside a record)."""
    if tally.records and _cut_record(buf, pos, MAX_TRACE_EVENT):  # after a record, not in noise
        tally.truncated = True
        tally.bytes_skipped += len(buf) - pos
        return len(buf)
    nxt = _resync(buf, pos, MAX_TRACE_EVENT)
    tally.corrupt += 1
    tally.bytes_skipped += nxt - pos
    return nxt


def _pb_events(path: Path, tally: _Tally) -> Iterator:
    buf = path.read_bytes()
    pos = 0
    while pos < len(buf):
        got = _record_at(buf, pos, MAX_TRACE_EVENT)
        if got is not None:
            ev, pos = got
            tally.records += 1
            yield ev
            continue
        pos = _past_damage(buf, pos, tally)


def _json_events(path: Path, tally: _Tally) -> Iterator:
    from google.protobuf import json_format

    data = path.read_bytes()
    lines = data.split(b"\n")
    last = len(lines) - 1
    while last >= 0 and not lines[last].strip():
        last -= 1
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        ev = PB()
        try:
            json_format.Parse(line.decode("utf-8"), ev, ignore_unknown_fields=True)
            ok = ev.HasField("type") and ev.type in KNOWN_TYPES
        except (json_format.ParseError, ValueError):
            ok = False
        if ok:
            tally.records += 1
            yield ev
        elif i == last and not data.endswith(b"\n"):  # the tracer was stopped mid-write
            tally.truncated = True
            tally.bytes_skipped += len(raw)
        else:
            tally.corrupt += 1
            tally.bytes_skipped += len(raw) + 1


def iter_events(path: Path, tally: _Tally | None = None) -> Iterator:
    """The TraceEvent protobufs in a trace file of either encoding; what could
    not be read is counted in `tally`, never raised: a damaged trace still
    gives every record it holds."""
    tally = tally if tally is not None else _Tally()
    if path.suffix in PB_SUFFIXES:
        return _pb_events(path, tally)
    return _json_events(path, tally)


def event_row(ev, names: PeerNames, default_node: str | None, seq: int) -> tuple:
    """One TraceEvent protobuf as a row of SCHEMA's columns: the reader for
    JSON traces and for the records columnar.decode leaves to protobuf."""
    t = ev.type
    msg = topic = peer = size = None
    counts = (0,) * N_COUNTS
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
        sub, to = {SEND_RPC: (ev.sendRPC, "sendTo"), RECV_RPC: (ev.recvRPC, "receivedFrom"),
                   DROP_RPC: (ev.dropRPC, "sendTo")}[t]
        peer = names(getattr(sub, to))
        if sub.HasField("size"):
            size = sub.size
        meta = sub.meta
        carried = meta.messages
        msg = carried[0].messageID.hex() if carried else None
        ctl = meta.control
        counts = (
            len(carried), len(meta.subscription),
            len(ctl.ihave), sum(len(x.messageIDs) for x in ctl.ihave),
            len(ctl.iwant), sum(len(x.messageIDs) for x in ctl.iwant),
            len(ctl.graft), len(ctl.prune), sum(len(x.peers) for x in ctl.prune),
            len(ctl.idontwant), sum(len(x.messageIDs) for x in ctl.idontwant),
        )
    elif t == GRAFT:
        topic, peer = ev.graft.topic, names(ev.graft.peerID)
    elif t == PRUNE:
        topic, peer = ev.prune.topic, names(ev.prune.peerID)
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
    return (names(ev.peerID) or default_node, t, ev.timestamp, seq, msg, topic, peer, size, *counts)


def rows_table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_arrays(
        [pa.array(col, f.type) for col, f in zip(zip(*rows), SCHEMA)] if rows else
        [pa.array([], f.type) for f in SCHEMA],
        schema=SCHEMA,
    )


def reference_table(path: Path, default_node: str | None = None, names: PeerNames | None = None) -> pa.Table:
    """A trace file's table built one protobuf object per event: what
    decode_file must equal (tests), and the reader of JSON traces."""
    names = names or PeerNames()
    return rows_table([event_row(ev, names, default_node, i) for i, ev in enumerate(iter_events(path))])


def _walk(buf: bytes, u8: np.ndarray, pos: int, max_len: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Frames from `pos` while their length headers parse and fit: frame
    starts, payload starts, and where the walk stopped (a frame ends where
    the next starts). The one loop over records left in Python, a few
    integer steps each (a numpy pointer-doubling walk measured 15x slower);
    the payload starts are read from the headers afterwards, with numpy."""
    n = len(buf)
    starts = array("q")
    add = starts.append
    while pos < n:
        first = buf[pos]
        if first < 0x80:
            end = pos + 1 + first
            if end > n:
                break
        else:
            head = _uvarint(buf, pos)
            if head is None or head[0] > max_len or head[1] + head[0] > n:
                break
            end = head[1] + head[0]
        add(pos)
        pos = end
    at = np.frombuffer(starts, dtype=np.int64)
    return at, columnar.varints(u8, at)[1], pos


def _pb_table(path: Path, names: PeerNames, default_node: str | None, tally: _Tally) -> pa.Table:
    """A .pb trace's table: frames walked, decoded by columnar.decode, the
    records it leaves to protobuf read with `_record_at`; the first of those
    protobuf rejects, and a walk that stops before the end, are damage,
    handled as `_pb_events` handles it (the same records, the same tally)."""
    buf = path.read_bytes()
    u8 = columnar.as_bytes_array(buf)
    pieces: list[pa.Table] = []
    slow_rows: list[tuple] = []
    pos = 0
    while pos < len(buf):
        starts, payloads, stop = _walk(buf, u8, pos, MAX_TRACE_EVENT)
        ends = np.append(starts[1:], stop)
        dec = columnar.decode(u8, payloads, ends, names, default_node, SCHEMA)
        cut = len(starts)
        for i in np.flatnonzero(dec.slow).tolist():
            got = _record_at(buf, int(starts[i]), MAX_TRACE_EVENT)
            if got is None:
                cut = i
                break
            slow_rows.append(event_row(got[0], names, default_node, tally.records + i))
        fast = dec.table.filter(pc.less(dec.table["seq"], cut))
        pieces.append(fast.set_column(3, "seq", pc.add(fast["seq"], tally.records)))
        tally.records += cut
        pos = int(starts[cut]) if cut < len(starts) else stop
        if pos >= len(buf):
            break
        pos = _past_damage(buf, pos, tally)
    table = pa.concat_tables([*pieces, rows_table(slow_rows)]) if pieces else rows_table(slow_rows)
    if slow_rows or len(pieces) > 1:
        table = table.sort_by(TABLE_ORDER)
    return table


def decode_table(
    path: Path, default_node: str | None = None, known: dict[bytes, str] | None = None
) -> tuple[pa.Table, TraceFileReport]:
    """One trace file's table (SCHEMA); `known` maps peer ids to node names.
    Also returns what was read and what could not be."""
    names = PeerNames(known)
    tally = _Tally()
    if path.suffix in PB_SUFFIXES and path.stat().st_size >= COLUMNAR_MIN_BYTES:
        table = _pb_table(path, names, default_node, tally)  # in TABLE_ORDER
    else:
        table = rows_table(
            [event_row(ev, names, default_node, i) for i, ev in enumerate(iter_events(path, tally))]
        ).sort_by(TABLE_ORDER)
    # the node whose trace this is, by its first record
    owner = table["node"][pc.index(table["seq"], pc.min(table["seq"])).as_py()].as_py() if len(table) else None
    per_node = pc.value_counts(table["node"]).to_pylist() if len(table) else []
    return table, TraceFileReport(
        file=path.name,
        node=owner or default_node or path.stem,
        records=tally.records,
        bytes=path.stat().st_size,
        bytes_skipped=tally.bytes_skipped,
        truncated=tally.truncated,
        corrupt=tally.corrupt,
        node_records=tuple(sorted((c["values"], c["counts"]) for c in per_node if c["values"] is not None)),
    )


def decode_file(
    path: Path, out_path: Path, default_node: str | None = None, known: dict[bytes, str] | None = None
) -> TraceFileReport:
    """Decode one trace file into `out_path` (Parquet); see decode_table."""
    table, report = decode_table(path, default_node, known)
    write_events([table], out_path)
    return report


def write_events(tables: list[pa.Table], out_path: Path) -> None:
    """Trace files' tables (each in TABLE_ORDER) as one Parquet file whose
    row groups each hold one event type: every table's rows of a type are
    written together (slices, not copies), type after type."""
    types = [t["type"].to_numpy() for t in tables]
    with pq.ParquetWriter(out_path, SCHEMA, compression="snappy") as out:
        for typ in sorted(set().union(*(np.unique(t).tolist() for t in types))):
            bounds = [np.searchsorted(t, [typ, typ + 1]) for t in types]
            out.write_table(
                pa.concat_tables([tab.slice(lo, hi - lo) for tab, (lo, hi) in zip(tables, bounds)]),
                row_group_size=ROW_GROUP,
            )


def _decode_group(paths: list[str], known: dict[bytes, str]) -> tuple[list[pa.Table], list[TraceFileReport]]:
    tables, reports = [], []
    for path in paths:
        table, report = decode_table(Path(path), Path(path).stem, known)
        tables.append(table)
        reports.append(report)
    return tables, reports


def _decode_job(args: tuple[list[str], str, dict[bytes, str]]) -> list[TraceFileReport]:
    """Decode a group of trace files into one Parquet file: Spark pays a
    fixed cost per file it reads, far more than a small trace's decoding."""
    paths, out, known = args
    tables, reports = _decode_group(paths, known)
    write_events(tables, Path(out))
    return reports


def _groups(files: list[Path], n: int) -> list[list[Path]]:
    """`files` (largest first) in `n` groups of about equal bytes, the
    largest group first: each file to the group with the fewest bytes so far."""
    groups: list[tuple[int, int, list[Path]]] = [(0, i, []) for i in range(n)]
    for p in files:
        size, i, members = heapq.heappop(groups)
        members.append(p)
        heapq.heappush(groups, (size + p.stat().st_size, i, members))
    return [members for _, _, members in sorted(groups, key=lambda g: (-g[0], g[1])) if members]


def in_memory_table(tables: list[pa.Table]) -> pa.Table:
    """The trace files' tables as one table of one chunk. Spark's
    createDataFrame reads an Arrow table's record batches as a stream and
    ends at the first empty one: a large .pb trace's table ends in an empty
    chunk (_pb_table appends the records left to protobuf, usually none),
    so of a 100-node run's 101 chunks, the second empty, it kept the first
    469 of 30,993 events (issue 38). One contiguous chunk cannot be cut
    short; metrics.compute checks all the same (analysis/completeness.py)."""
    return pa.concat_tables(tables).combine_chunks() if tables else rows_table([])


def known_peer_ids(topology_nodes: list[dict]) -> dict[bytes, str]:
    """Peer id bytes -> name from topology.json's per-node `peer_id` (base58);
    nodes without one (runs from before real identities) are skipped."""
    out = {}
    for node in topology_nodes:
        pid, name = node.get("peer_id"), node.get("name")
        if isinstance(pid, str) and pid and name:
            try:
                out[base58_decode(pid)] = str(name)
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class IngestResult:
    """Where the decoded events are (Parquet files in `events_dir`; also
    `table`, the events themselves, when a small run was decoded in this
    process), how many trace files and events, and what each file held."""

    events_dir: Path
    files: int
    events: int
    reports: tuple[TraceFileReport, ...]
    table: pa.Table | None = None

    def node_records(self) -> dict[str, int]:
        """Records decoded per node, over every trace file."""
        out: dict[str, int] = {}
        for report in self.reports:
            for node, n in report.node_records:
                out[node] = out.get(node, 0) + n
        return out


def ingest(
    files: Iterable[Path],
    out_dir: Path,
    workers: int | None = None,
    progress=None,
    known: dict[bytes, str] | None = None,
) -> IngestResult:
    """Decode every trace file into a few `out_dir/part-NNNNN.parquet`, one
    per group of trace files of about GROUP_BYTES (as many groups as workers,
    or a multiple; one group when decoded in this process), in parallel over
    the groups (largest first, so one big group does not finish last).
    `known` maps peer ids to node names (known_peer_ids).
    `progress(done_files, total_files)` is called as files finish."""
    files = sorted(files, key=lambda p: p.stat().st_size, reverse=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.parquet"):
        old.unlink()
    known = known or {}
    total_bytes = sum(p.stat().st_size for p in files)
    workers = workers or os.cpu_count() or 1
    in_process = workers <= 1 or len(files) <= 1 or total_bytes < POOL_THRESHOLD_BYTES
    if in_process:
        n_groups = 1
    else:
        n_groups = min(len(files), workers * max(1, math.ceil(total_bytes / (workers * GROUP_BYTES))))
    jobs = [
        ([str(p) for p in group], str(out_dir / f"part-{i:05d}.parquet"), known)
        for i, group in enumerate(_groups(files, n_groups))
    ]
    reports: list[TraceFileReport] = []
    decoded: list[pa.Table] | None = None  # the tables, when decoded here
    if progress:
        progress(0, len(files))
    if in_process:
        decoded = []
        for paths, out, _ in jobs:
            tables, reps = _decode_group(paths, known)
            write_events(tables, Path(out))
            decoded.extend(tables)
            reports.extend(reps)
            if progress:
                progress(len(reports), len(files))
    else:
        # spawn, not fork: the caller may already hold a JVM gateway and threads.
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=get_context("spawn")) as pool:
            for reps in pool.map(_decode_job, jobs, chunksize=1):
                reports.extend(reps)
                if progress:
                    progress(len(reports), len(files))
    reports.sort(key=lambda r: r.file)
    events = sum(r.records for r in reports)
    small = decoded is not None and events <= IN_MEMORY_MAX_EVENTS
    table = in_memory_table(decoded) if small else None
    return IngestResult(out_dir, len(files), events, tuple(reports), table)
