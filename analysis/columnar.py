"""TraceEvent frames -> Arrow columns with numpy, no Python object per event.

Why: decoding the go-format trace one protobuf object per event was most of
a large analysis (25 s of 10M events). Here each nesting level of the schema
is parsed for all records at once: `fields` reads the fields of many
messages in rounds (round k reads every message's k-th field), so the
Python work grows with the nesting depth and the longest message, not with
the number of events.

This is a fast path, not a second parser: it accepts a record only when it
is sure protobuf reads it the same way (the fields the schema knows, with
their wire types; singular fields once; the sub-message the event's type
names and no other; varints of at most 9 bytes; UTF-8 strings). Every other
record is marked `slow` and ingest.py reads it with protobuf, which also
decides what is damaged, so damaged and foreign traces are read exactly as
before. The columns and their meaning are ingest.SCHEMA's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from node.trace.vocab import (
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

VARINT, LEN = 0, 2
PAD = 16  # zero bytes after the buffer: a varint read near the end stays inside the array
MAX_ROUNDS = 4096  # fields per message read here; a longer message (a huge IHAVE) goes to protobuf
SUB_FIELD_OFFSET = 4  # TraceEvent's sub-message for type t is field t + 4 (publishMessage = 4 ... prune = 16)

# A message's schema: field number -> wire type, and which fields repeat.
Schema = tuple[dict[int, int], frozenset[int]]
NONE: Schema = ({}, frozenset())
TRACE_EVENT: Schema = ({1: VARINT, 2: LEN, 3: VARINT, **{t + SUB_FIELD_OFFSET: LEN for t in range(13)}}, frozenset())
RPC_EVENT: Schema = ({1: LEN, 2: LEN, 100: VARINT}, frozenset())  # peer, meta, size (our extension)
# TraceEvent's sub-message per event type (REJECT_MESSAGE is left to protobuf)
SUB_EVENT: list[Schema] = [
    ({1: LEN, 2: LEN}, frozenset()),  # PublishMessage: id, topic
    NONE,  # RejectMessage
    ({1: LEN, 2: LEN, 3: LEN}, frozenset()),  # DuplicateMessage: id, from, topic
    ({1: LEN, 2: LEN, 3: LEN}, frozenset()),  # DeliverMessage: id, topic, from
    ({1: LEN, 2: LEN}, frozenset()),  # AddPeer: peer, proto
    ({1: LEN}, frozenset()),  # RemovePeer
    RPC_EVENT, RPC_EVENT, RPC_EVENT,  # RecvRPC, SendRPC, DropRPC
    ({1: LEN}, frozenset()),  # Join: topic
    ({2: LEN}, frozenset()),  # Leave: topic
    ({1: LEN, 2: LEN}, frozenset()),  # Graft: peer, topic
    ({1: LEN, 2: LEN}, frozenset()),  # Prune: peer, topic
]
RPC_META: Schema = ({1: LEN, 2: LEN, 3: LEN}, frozenset({1, 2}))
MESSAGE_META: Schema = ({1: LEN, 2: LEN}, frozenset())
SUB_META: Schema = ({1: VARINT, 2: LEN}, frozenset())
CONTROL_META: Schema = ({1: LEN, 2: LEN, 3: LEN, 4: LEN, 5: LEN}, frozenset({1, 2, 3, 4, 5}))
# ControlMeta's entries by its field number - 1: IHave, IWant, Graft, Prune, IDontWant
CONTROL_ENTRY: list[Schema] = [
    ({1: LEN, 2: LEN}, frozenset({2})),  # topic, message ids
    ({1: LEN}, frozenset({1})),  # message ids
    ({1: LEN}, frozenset()),  # topic
    ({1: LEN, 2: LEN}, frozenset({2})),  # topic, peers
    ({1: LEN}, frozenset({1})),  # message ids
]
COUNTS = ("n_msgs", "n_subs", "n_ihave", "n_ihave_ids", "n_iwant", "n_iwant_ids", "n_graft", "n_prune", "n_px",
          "n_idontwant", "n_idontwant_ids")


def _by_type(pairs: dict[int, int]) -> np.ndarray:
    out = np.zeros(13, dtype=np.int64)
    for t, num in pairs.items():
        out[t] = num
    return out


# the sub-message field each event type keeps its message id, topic, peer and
# another string protobuf checks in; 0 = none
MSG_FIELD = _by_type({PUBLISH: 1, DUPLICATE: 1, DELIVER: 1})
TOPIC_FIELD = _by_type({PUBLISH: 2, DUPLICATE: 3, DELIVER: 2, JOIN: 1, LEAVE: 2, GRAFT: 2, PRUNE: 2})
PEER_FIELD = _by_type({DUPLICATE: 2, DELIVER: 3, ADD_PEER: 1, REMOVE_PEER: 1, GRAFT: 1, PRUNE: 1,
                       RECV_RPC: 1, SEND_RPC: 1, DROP_RPC: 1})
OTHER_STRING_FIELD = _by_type({ADD_PEER: 2})


def as_bytes_array(buf: bytes) -> np.ndarray:
    return np.frombuffer(buf + bytes(PAD), dtype=np.uint8)


def varints(u8: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, position after, ok) of the uvarints at `pos`; not ok when one
    is longer than 9 bytes (beyond 63 bits: left to protobuf)."""
    b = u8[pos]
    value = (b & 0x7F).astype(np.uint64)
    length = np.ones(len(pos), dtype=np.int64)
    idx = np.flatnonzero(b & 0x80)
    k = 1
    while idx.size and k < 9:
        b = u8[pos[idx] + k]
        value[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        length[idx] += 1
        idx = idx[(b & 0x80) != 0]
        k += 1
    ok = np.ones(len(pos), dtype=bool)
    ok[idx] = False
    return value, pos + length, ok


@dataclass(frozen=True)
class Fields:
    """The fields of many messages, in order within each message. `owner` is
    the message's index; `val` a varint's value; `off`/`ln` a length-delimited
    payload; `bad[i]`: message i is not one this reader understands."""

    owner: np.ndarray
    num: np.ndarray
    val: np.ndarray
    off: np.ndarray
    ln: np.ndarray
    bad: np.ndarray

    def of(self, num: int) -> np.ndarray:
        """Indexes of the fields numbered `num`, in message order."""
        return np.flatnonzero(self.num == num)

    def single(self, num: int, n: int) -> np.ndarray:
        """Per message, the index of its field `num`, or -1."""
        return self.pick(np.full(n, num, dtype=np.int64))

    def pick(self, nums: np.ndarray) -> np.ndarray:
        """Per message i, the index of its (singular) field numbered nums[i], or -1."""
        at = np.full(len(nums), -1, dtype=np.int64)
        idx = np.flatnonzero(self.num == nums[self.owner])
        at[self.owner[idx]] = idx
        return at

    def count(self, num: int, n: int) -> np.ndarray:
        return np.bincount(self.owner[self.of(num)], minlength=n)


def fields(u8: np.ndarray, start: np.ndarray, end: np.ndarray, schemas: list[Schema],
           kind: np.ndarray | None = None) -> Fields:
    """Every field of the messages u8[start[i]:end[i]], message i having the
    schema schemas[kind[i]] (kind: all 0 when not given), read in rounds; a
    message with a field its schema does not list (or with another wire
    type), a malformed field, or a singular field twice is marked bad."""
    n = len(start)
    kind = np.zeros(n, dtype=np.int64) if kind is None else kind
    top = max((max(sc) for sc, _ in schemas if sc), default=0) + 1
    want = np.full((len(schemas), top), -1, dtype=np.int64)
    singular = np.zeros((len(schemas), top), dtype=bool)
    for k, (sc, repeated) in enumerate(schemas):
        for num, wt in sc.items():
            want[k, num] = wt
            singular[k, num] = num not in repeated
    bad = np.zeros(n, dtype=bool)
    cur = start.astype(np.int64)
    end = end.astype(np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    act = np.flatnonzero(cur < end)
    rounds = 0
    while act.size:
        if rounds == MAX_ROUNDS:
            bad[act] = True
            break
        rounds += 1
        tag, p1, ok = varints(u8, cur[act])
        num = (tag >> np.uint64(3)).astype(np.int64)
        wt = (tag & np.uint64(7)).astype(np.int64)
        ok &= (tag >> np.uint64(3)) < np.uint64(top)
        num = np.where(ok, num, 0)
        ok &= want[kind[act], num] == wt
        val, p2, ok2 = varints(u8, p1)
        is_len = wt == LEN
        ln = np.where(is_len, np.minimum(val, np.uint64(1 << 40)).astype(np.int64), -1)
        nxt = np.where(is_len, p2 + np.maximum(ln, 0), p2)
        ok &= ok2 & (nxt <= end[act])
        bad[act[~ok]] = True
        good = act[ok]
        parts.append((good, num[ok], np.where(is_len, 0, val)[ok], p2[ok], ln[ok]))
        cur[good] = nxt[ok]
        act = good[cur[good] < end[good]]
    if parts:
        owner, num, val, off, ln = (np.concatenate(cols) for cols in zip(*parts))
    else:
        owner = num = off = ln = np.zeros(0, dtype=np.int64)
        val = np.zeros(0, dtype=np.uint64)
    once = singular[kind[owner], num]
    for k in np.unique(num[once]).tolist():
        bad |= np.bincount(owner[once & (num == k)], minlength=n) > 1
    return Fields(owner, num, val, off, ln, bad)


def _gather(u8: np.ndarray, off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The payloads u8[off[i]:off[i]+ln[i]] end to end, and Arrow offsets."""
    ln = np.maximum(ln, 0)
    offsets = np.zeros(len(ln) + 1, dtype=np.int64)
    np.cumsum(ln, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(off - offsets[:-1], ln) + np.arange(total, dtype=np.int64)
    return u8[idx], offsets


def _validity(valid: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def binary_column(u8: np.ndarray, off: np.ndarray, ln: np.ndarray, valid: np.ndarray) -> pa.Array:
    """A binary array of the payloads; null where not `valid` (off/ln ignored there)."""
    ln = np.where(valid, ln, 0)
    data, offsets = _gather(u8, off, ln)
    return pa.Array.from_buffers(
        pa.binary(), len(ln), [_validity(valid), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


@dataclass(frozen=True)
class Mapped:
    """A column converted one distinct value at a time: value i is
    `names[indices[i]]`; `rejected[i]` when `convert` refused value i."""

    names: pa.Array
    indices: pa.Array
    rejected: np.ndarray

    def at(self, rows: np.ndarray) -> pa.Array:
        """The converted values at `rows` (positions, in the order wanted):
        reordering the indices costs nothing next to reordering strings."""
        return self.names.take(self.indices.take(pa.array(rows)))


def mapped_column(values: pa.Array, convert: Callable[[bytes], str | None]) -> Mapped:
    """`convert` applied to each distinct value (peer ids, topics, message
    ids: one per message, not per event); a value whose conversion raises
    ValueError is rejected (and null)."""
    enc = pc.dictionary_encode(values)
    out: list[str | None] = []
    rejected: list[bool] = []
    for raw in enc.dictionary.to_pylist():
        try:
            out.append(convert(raw))
            rejected.append(False)
        except ValueError:
            out.append(None)
            rejected.append(True)
    indices = enc.indices
    bad = np.asarray(rejected, dtype=bool)[indices.fill_null(0).to_numpy(zero_copy_only=False)] if out else (
        np.zeros(len(values), dtype=bool))
    return Mapped(pa.array(out, pa.string()), indices, bad & ~np.asarray(values.is_null()))


def utf8(raw: bytes) -> str:
    return raw.decode("utf-8")  # UnicodeDecodeError is a ValueError: the record goes to protobuf


@dataclass(frozen=True)
class Decoded:
    """The records understood here, as columns (ingest.SCHEMA's, with `seq`
    their index among the spans given) in ingest's table order (by type,
    then `seq`), and which spans were not (`slow`)."""

    table: pa.Table
    slow: np.ndarray


def decode(u8: np.ndarray, start: np.ndarray, end: np.ndarray, peer_name: Callable[[bytes], str | None],
           default_node: str | None, schema: pa.Schema) -> Decoded:
    """Decode the TraceEvent payloads u8[start[i]:end[i]]; `peer_name` maps
    peer id bytes to a name (None for empty)."""
    n = len(start)
    top = fields(u8, start, end, [TRACE_EVENT])
    slow = top.bad.copy()
    at_type, at_peer, at_ts = top.single(1, n), top.single(2, n), top.single(3, n)
    slow |= (at_type < 0) | (at_ts < 0)
    typ = np.where(at_type >= 0, top.val[at_type].astype(np.int64), -1)
    slow |= (typ < 0) | (typ > 12) | (typ == REJECT)  # unknown types, and the rare REJECT: protobuf's
    # exactly one sub-message, the one the type names
    subs = np.flatnonzero(top.num >= SUB_FIELD_OFFSET)
    at_sub = np.full(n, -1, dtype=np.int64)
    at_sub[top.owner[subs]] = subs
    slow |= np.bincount(top.owner[subs], minlength=n) != 1
    slow |= np.where(at_sub >= 0, top.num[at_sub] - SUB_FIELD_OFFSET, -1) != typ
    recs = np.flatnonzero(~slow)
    rtyp = typ[recs]
    sub = fields(u8, top.off[at_sub[recs]], top.off[at_sub[recs]] + top.ln[at_sub[recs]], SUB_EVENT, rtyp)
    slow[recs[sub.bad]] = True

    def column(field_of_type: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offset, length, present) per record of the sub-message field its
        type names; absent in a type that names one: empty, protobuf's default."""
        off = np.zeros(n, dtype=np.int64)
        ln = np.zeros(n, dtype=np.int64)
        has = np.zeros(n, dtype=bool)
        nums = field_of_type[rtyp]
        at = sub.pick(nums)
        found = at >= 0
        off[recs[found]] = sub.off[at[found]]
        ln[recs[found]] = sub.ln[at[found]]
        has[recs[nums > 0]] = True
        return off, ln, has

    msg_off, msg_ln, has_msg = column(MSG_FIELD)
    topic_off, topic_ln, has_topic = column(TOPIC_FIELD)
    peer_off, peer_ln, has_peer = column(PEER_FIELD)
    other_off, other_ln, _ = column(OTHER_STRING_FIELD)
    present = sub.pick(OTHER_STRING_FIELD[rtyp]) >= 0
    strings: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [  # (record, off, ln) of strings no column shows
        (recs[present], other_off[recs[present]], other_ln[recs[present]])
    ]

    counts = {c: np.zeros(n, dtype=np.int32) for c in COUNTS}
    size = np.zeros(n, dtype=np.int64)
    has_size = np.zeros(n, dtype=bool)
    is_rpc = (rtyp >= RECV_RPC) & (rtyp <= DROP_RPC)
    at = sub.pick(np.where(is_rpc, 100, 0))
    sized = at >= 0
    slow[recs[sized][sub.val[at[sized]] >= np.uint64(1 << 32)]] = True  # uint32 overflow: protobuf's rule
    size[recs[sized]] = sub.val[at[sized]].astype(np.int64)
    has_size[recs[sized]] = True
    at = sub.pick(np.where(is_rpc, 2, 0))
    with_meta = at >= 0
    mi = at[with_meta]
    _rpc_meta(u8, recs[with_meta], sub.off[mi], sub.off[mi] + sub.ln[mi], counts, slow, strings,
              msg_off, msg_ln, has_msg)

    # strings protobuf checks but no column shows
    if strings:
        recs = np.concatenate([s[0] for s in strings])
        vals = binary_column(u8, np.concatenate([s[1] for s in strings]), np.concatenate([s[2] for s in strings]),
                             np.ones(len(recs), dtype=bool))
        slow[recs[mapped_column(vals, utf8).rejected]] = True

    topic = mapped_column(binary_column(u8, topic_off, topic_ln, has_topic & ~slow), utf8)
    slow |= topic.rejected
    keep = ~slow
    # the table's rows: the records understood, grouped by type, in record order within a type
    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(typ[rows], kind="stable")]
    peer = mapped_column(binary_column(u8, peer_off, peer_ln, has_peer & keep), peer_name)
    own_off = np.where(at_peer >= 0, top.off[np.maximum(at_peer, 0)], 0)
    own_ln = np.where(at_peer >= 0, top.ln[np.maximum(at_peer, 0)], 0)
    node_col = mapped_column(binary_column(u8, own_off, own_ln, keep), peer_name).at(rows)
    if default_node is not None:
        node_col = pc.fill_null(node_col, default_node)
    msg = mapped_column(binary_column(u8, msg_off, msg_ln, has_msg & keep), bytes.hex)
    size_col = pa.Array.from_buffers(pa.int64(), len(rows), [_validity(has_size[rows]), pa.py_buffer(size[rows])])
    cols = {
        "node": node_col,
        "type": pa.array(typ[rows].astype(np.int8)),
        "ts": pa.array(top.val[at_ts[rows]].astype(np.int64)),
        "seq": pa.array(rows.astype(np.int64)),
        "msg": msg.at(rows),
        "topic": topic.at(rows),
        "peer": peer.at(rows),
        "size": size_col,
        **{c: pa.array(v[rows]) for c, v in counts.items()},
    }
    return Decoded(pa.table([cols[f.name] for f in schema], schema=schema), slow)


def _rpc_meta(u8, recs, start, end, counts, slow, strings, msg_off, msg_ln, has_msg) -> None:
    """RPCMeta of RPC events `recs`: entry counts, the first message's id, and
    every nested message checked."""
    n = len(recs)
    meta = fields(u8, start, end, [RPC_META])
    slow[recs[meta.bad]] = True
    counts["n_msgs"][recs] = meta.count(1, n)
    counts["n_subs"][recs] = meta.count(2, n)
    mm = meta.of(1)
    mf = fields(u8, meta.off[mm], meta.off[mm] + meta.ln[mm], [MESSAGE_META])
    slow[recs[meta.owner[mm[mf.bad]]]] = True
    _strings_of(mf, 2, recs[meta.owner[mm]], strings)
    # the first message entry of each meta: its id (absent: empty)
    first_owner, first_at = np.unique(meta.owner[mm], return_index=True)
    id_at = mf.single(1, len(mm))[first_at]
    with_id = id_at >= 0
    msg_off[recs[first_owner[with_id]]] = mf.off[id_at[with_id]]
    msg_ln[recs[first_owner[with_id]]] = mf.ln[id_at[with_id]]
    has_msg[recs[first_owner]] = True
    sm = meta.of(2)
    sf = fields(u8, meta.off[sm], meta.off[sm] + meta.ln[sm], [SUB_META])
    slow[recs[meta.owner[sm[sf.bad]]]] = True
    _strings_of(sf, 2, recs[meta.owner[sm]], strings)
    cm = meta.of(3)
    if not cm.size:
        return
    crecs = recs[meta.owner[cm]]
    ctl = fields(u8, meta.off[cm], meta.off[cm] + meta.ln[cm], [CONTROL_META])
    slow[crecs[ctl.bad]] = True
    for num, name in ((1, "n_ihave"), (2, "n_iwant"), (3, "n_graft"), (4, "n_prune"), (5, "n_idontwant")):
        counts[name][crecs] = ctl.count(num, len(cm))
    entry_kind = ctl.num - 1
    owners = crecs[ctl.owner]
    entries = fields(u8, ctl.off, ctl.off + ctl.ln, CONTROL_ENTRY, entry_kind)
    slow[owners[entries.bad]] = True
    topic_at = entries.pick(np.where((entry_kind == 1) | (entry_kind == 4), 0, 1))  # IWant, IDontWant: no topic
    has_topic = topic_at >= 0
    strings.append((owners[has_topic], entries.off[topic_at[has_topic]], entries.ln[topic_at[has_topic]]))
    # IHave's, IWant's and IDontWant's message ids, Prune's peers
    ids = entries.num == np.array([2, 1, 0, 2, 1])[entry_kind[entries.owner]]
    for kind, name in ((0, "n_ihave_ids"), (1, "n_iwant_ids"), (3, "n_px"), (4, "n_idontwant_ids")):
        per_entry = np.bincount(entries.owner[ids & (entry_kind[entries.owner] == kind)], minlength=len(owners))
        np.add.at(counts[name], owners, per_entry.astype(np.int32))


def _strings_of(f: Fields, num: int, owner_recs: np.ndarray, strings: list) -> None:
    idx = f.of(num)
    strings.append((owner_recs[f.owner[idx]], f.off[idx], f.ln[idx]))

