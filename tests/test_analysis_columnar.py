"""The columnar decoder (analysis/columnar.py, issue 14) reads every trace
exactly as one protobuf object per event does (ingest.reference_table): the
same rows, and the same records, skipped bytes, truncation and corruption
counts, on sim traces, hand-made odd records and damaged files."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis import ingest
from node.wire.codec import encode_uvarint
from node.proto import trace_pb2

QUICK = Path(__file__).parent / "fixtures" / "analysis_before" / "quick" / "traces"
PB = trace_pb2.TraceEvent


@pytest.fixture(autouse=True)
def columnar_always(monkeypatch):
    monkeypatch.setattr(ingest, "COLUMNAR_MIN_BYTES", 0)


def assert_same(path: Path, tmp_path: Path, known: dict[bytes, str] | None = None) -> ingest.TraceFileReport:
    out = tmp_path / f"{path.stem}.parquet"
    report = ingest.decode_file(path, out, path.stem, known)
    tally = ingest._Tally()
    names = ingest.PeerNames(known)
    want = ingest.rows_table(
        [ingest.event_row(ev, names, path.stem, i) for i, ev in enumerate(ingest.iter_events(path, tally))]
    ).sort_by(ingest.TABLE_ORDER)
    got = pq.read_table(out)
    assert got.schema == want.schema
    for col in want.column_names:
        assert got[col].to_pylist() == want[col].to_pylist(), f"{path.name}: column {col} differs"
    assert (report.records, report.bytes_skipped, report.truncated, report.corrupt) == (
        tally.records, tally.bytes_skipped, tally.truncated, tally.corrupt)
    return report


def frame(ev: PB | bytes) -> bytes:
    raw = ev if isinstance(ev, bytes) else ev.SerializeToString()
    return encode_uvarint(len(raw)) + raw


def test_sim_traces_read_alike(tmp_path):
    for path in sorted(QUICK.glob("*.pb")):
        assert assert_same(path, tmp_path).records > 0


def test_concatenated_traces_with_known_peer_ids(tmp_path):
    """Many nodes' records in one file, peer ids named from topology.json."""
    big = tmp_path / "all.pb"
    big.write_bytes(b"".join(p.read_bytes() for p in sorted(QUICK.glob("*.pb"))))
    topo = [{"name": f"node-{i}", "peer_id": ingest.base58_encode(pid)}
            for i, pid in enumerate(sorted({ev.peerID for ev in ingest.iter_events(big)}))]
    report = assert_same(big, tmp_path, ingest.known_peer_ids(topo))
    assert report.records > 2500 and not report.damaged


def odd_records() -> list[bytes]:
    """Records protobuf reads but the fast path must leave to it, around plain ones."""
    me, peer, mid = b"\x00\x24me", b"\x00\x24peer", bytes(range(8))

    def ev(type_: int, ts: int = 5) -> PB:
        e = PB()
        e.type, e.peerID, e.timestamp = type_, me, ts
        return e

    out = []
    d = ev(3)
    d.deliverMessage.messageID, d.deliverMessage.topic, d.deliverMessage.receivedFrom = mid, "t", peer
    out.append(frame(d))
    out.append(frame(d.SerializeToString() + b"\xa0\x01\x07"))  # unknown field 20
    out.append(frame(b"\x18\x05" + d.SerializeToString()[2:] + b"\x08\x03"))  # type last, and twice
    bare = ev(3)
    bare.deliverMessage.SetInParent()  # no id, topic or sender
    out.append(frame(bare))
    r = ev(1)
    r.rejectMessage.messageID, r.rejectMessage.reason, r.rejectMessage.topic = mid, "bad", "t"
    out.append(frame(r))
    neg = ev(9, ts=-7)
    neg.join.topic = "t"
    out.append(frame(neg))
    nojoin = ev(9)  # no Join sub-message at all
    out.append(frame(nojoin))
    two = ev(10)
    two.leave.topic = "t"
    two.join.topic = "u"  # a second sub-message
    out.append(frame(two))
    s = ev(7)
    s.sendRPC.sendTo = peer
    s.sendRPC.size = 99
    m = s.sendRPC.meta
    m.messages.add(topic="t")  # the first message entry without an id
    m.messages.add(messageID=mid, topic="t")
    m.subscription.add(subscribe=True, topic="t")
    ctl = m.control
    ctl.ihave.add(topic="t", messageIDs=[mid, mid[::-1]])
    ctl.ihave.add(topic="t", messageIDs=[mid])
    ctl.iwant.add(messageIDs=[mid])
    ctl.graft.add(topic="t")
    ctl.prune.add(topic="t", peers=[peer])
    out.append(frame(s))
    nometa = ev(6)
    nometa.recvRPC.receivedFrom = peer
    out.append(frame(nometa))
    empty_ctl = ev(8)
    empty_ctl.dropRPC.sendTo = peer
    empty_ctl.dropRPC.meta.control.SetInParent()
    out.append(frame(empty_ctl))
    huge = ev(7)
    huge.sendRPC.sendTo = peer
    out.append(frame(huge.SerializeToString() + b"\xa0\x06" + encode_uvarint(1 << 33)))  # size past uint32
    a = ev(4)
    a.addPeer.peerID, a.addPeer.proto = peer, "/meshsub/1.1.0"
    out.append(frame(a))
    g = ev(11)
    g.graft.peerID, g.graft.topic = peer, "t"
    out.append(frame(g))
    out.append(frame(b"\x08\x0d\x12\x02me\x18\x05"))  # type 13: not a record
    out.append(frame(b"\x08\xc8\x01\x12\x02me\x18\x05"))  # type 200: nor this
    out.append(frame(d))
    return out


def test_odd_records_read_alike(tmp_path):
    path = tmp_path / "odd.pb"
    path.write_bytes(b"".join(odd_records()))
    report = assert_same(path, tmp_path)
    assert report.corrupt == 1  # the type-13 and type-200 records, side by side


@pytest.mark.parametrize("seed", range(12))
def test_damaged_traces_read_alike(tmp_path, seed):
    """Cut, spliced with garbage, bytes flipped: the same records survive and
    the same damage is counted."""
    rng = random.Random(seed)
    data = bytearray(b"".join(p.read_bytes() for p in sorted(QUICK.glob("n1*.pb"))) + b"".join(odd_records()))
    kind = seed % 3
    if kind == 0:
        data = data[: rng.randrange(len(data) // 2, len(data))]
    elif kind == 1:
        at = rng.randrange(len(data))
        data[at:at] = rng.randbytes(rng.randrange(1, 300))
    for _ in range(rng.randrange(1, 6)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    path = tmp_path / f"damaged-{seed}.pb"
    path.write_bytes(bytes(data))
    assert_same(path, tmp_path)


def test_random_bytes_read_alike(tmp_path):
    path = tmp_path / "noise.pb"
    path.write_bytes(random.Random(3).randbytes(5000))
    assert assert_same(path, tmp_path).records == 0


def test_each_row_group_holds_one_event_type(tmp_path):
    """What lets Spark skip the row groups of the types a query does not
    read: every row group's type statistics have min == max."""
    files = sorted(QUICK.glob("*.pb"))
    res = ingest.ingest(files, tmp_path / "events", workers=1)
    seen = 0
    for part in sorted((tmp_path / "events").glob("*.parquet")):
        meta = pq.ParquetFile(part).metadata
        type_col = meta.schema.names.index("type")
        types = []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(type_col).statistics
            assert stats.has_min_max and stats.min == stats.max, f"{part.name}: row group {g} mixes types"
            types.append(stats.min)
            seen += meta.row_group(g).num_rows
        assert types == sorted(types) and len(set(types)) > 3
    assert seen == res.events


def test_a_small_run_decoded_here_is_also_handed_over_as_the_table(tmp_path, monkeypatch):
    files = sorted(QUICK.glob("*.pb"))
    res = ingest.ingest(files, tmp_path / "small", workers=1)
    assert res.table is not None and res.table.num_rows == res.events
    assert res.table.sort_by(ingest.TABLE_ORDER).equals(pq.read_table(tmp_path / "small").sort_by(ingest.TABLE_ORDER))
    monkeypatch.setattr(ingest, "IN_MEMORY_MAX_EVENTS", res.events - 1)
    assert ingest.ingest(files, tmp_path / "larger", workers=1).table is None  # too many events: the files only
