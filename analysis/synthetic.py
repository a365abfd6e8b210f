"""A synthetic gossipsub-like run directory of about N trace events, its
frames encoded by hand: the analysis benchmark's data
(bench/bench_analysis.py) and the Connect server's large warm-up run
(analysis/warming.py).

Why by hand: the TraceEvent wire format is small, and building one protobuf
object per event would take ten times longer (a million events: 2 s here).
The run is seeded, so the same N gives the same files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from node.wire.codec import encode_uvarint

TOPIC = b"blocks"
MS = 1_000_000


def _f(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + encode_uvarint(len(payload)) + payload


def _v(tag: int, value: int) -> bytes:
    return bytes([tag]) + encode_uvarint(value)


SIZE_TAG = encode_uvarint(100 << 3)  # the gossip-testbed size extension, field 100


def _ev(type_: int, peer: bytes, ts: int, body: bytes = b"") -> bytes:
    payload = _v(0x08, type_) + _f(0x12, peer) + _v(0x18, ts) + body
    return encode_uvarint(len(payload)) + payload


def _meta_msgs(ids: list[bytes]) -> bytes:
    return b"".join(_f(0x0A, _f(0x0A, i) + _f(0x12, TOPIC)) for i in ids)


def _rpc_body(field_tag: int, peer: bytes, meta: bytes, size: int) -> bytes:
    return _f(field_tag, _f(0x0A, peer) + _f(0x12, meta) + SIZE_TAG + encode_uvarint(size))


def generate(root: Path, events: int, nodes: int = 200, seed: int = 1) -> dict:
    """A gossipsub-like run: every message reaches ~98% of the nodes over a
    random overlay, with duplicates, IHAVE/IWANT gossip and mesh GRAFTs."""
    rng = random.Random(seed)
    names = [f"n{i}".encode() for i in range(nodes)]
    per_msg = nodes * 9  # about 9 events per node per message (see below)
    n_msgs = max(1, events // per_msg)
    traces = root / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    out: dict[bytes, list[bytes]] = {n: [] for n in names}
    count = 0
    for n in names:
        out[n].append(_ev(9, n, 0, _f(0x6A, _f(0x0A, TOPIC))))
        for p in rng.sample(names, 6):
            if p != n:
                out[n].append(_ev(11, n, 100 * MS, _f(0x7A, _f(0x0A, p) + _f(0x12, TOPIC))))
                count += 1
        count += 1
    for k in range(n_msgs):
        pub = names[k % nodes]
        mid = pub + k.to_bytes(8, "big")
        t_pub = 1_000 * MS + k * 20 * MS
        out[pub].append(_ev(0, pub, t_pub, _f(0x22, _f(0x0A, mid) + _f(0x12, TOPIC))))
        meta = _meta_msgs([mid])
        count += 1
        for n in names:
            if n == pub or rng.random() < 0.02:  # ~2% never get it
                continue
            t = t_pub + int(rng.lognormvariate(4.0, 0.4) * MS)
            frm = names[rng.randrange(nodes)]
            out[frm].append(_ev(7, frm, t - 5 * MS, _rpc_body(0x5A, n, meta, 180)))
            out[n].append(_ev(6, n, t, _rpc_body(0x52, frm, meta, 180)))
            out[n].append(_ev(3, n, t, _f(0x3A, _f(0x0A, mid) + _f(0x12, TOPIC) + _f(0x1A, frm))))
            count += 3
            for _ in range(2):  # two duplicates on average
                d = t + int(rng.expovariate(1 / 20) * MS)
                out[frm].append(_ev(7, frm, d - 5 * MS, _rpc_body(0x5A, n, meta, 180)))
                out[n].append(_ev(6, n, d, _rpc_body(0x52, frm, meta, 180)))
                out[n].append(_ev(2, n, d, _f(0x32, _f(0x0A, mid) + _f(0x12, frm) + _f(0x1A, TOPIC))))
                count += 3
        if k % 10 == 0:  # gossip: an IHAVE from the publisher to a few peers
            for p in rng.sample(names, 3):
                ctl = _f(0x1A, _f(0x0A, _f(0x0A, TOPIC) + _f(0x12, mid)))
                out[pub].append(_ev(7, pub, t_pub + 900 * MS, _rpc_body(0x5A, p, ctl, 60)))
                count += 1
    for n, frames in out.items():
        (traces / f"{n.decode()}.pb").write_bytes(b"".join(frames))
    (root / "manifest.json").write_text(json.dumps({
        "tool": "gossip-testbed", "backend": "sim", "name": f"synthetic-{events}", "clock": "virtual", "t0_ns": 0,
        "shaping": {"path": "virtual"}, "nodes": nodes, "warnings": [],
    }))
    (root / "events.jsonl").write_text(
        json.dumps({"t_ns": 0, "kind": "run_start"}) + "\n"
        + json.dumps({"t_ns": 1_000 * MS + n_msgs * 20 * MS + 2_000 * MS, "kind": "run_end"}) + "\n"
    )
    return {"events": count, "messages": n_msgs, "nodes": nodes}
