"""The gossipsub-interop contract's pure rules, kept free of libp2p so the
project's own tests can check them against node/ (this directory's programs
run in .venv-pylibp2p, which may never import the project's node package:
py-libp2p needs protobuf<7).

- identity: the ed25519 seed is the node id as a little-endian u32,
  zero-padded to 32 bytes (node/libp2p/identity.py's rule);
- message id: the first 8 bytes of the data, on the wire exactly as they are
  (node/wire/rpc.py's `first-8-bytes`), logged as a base-10 big-endian u64;
- published data: the sequence number as a big-endian u64, then `msg-<seq>:`
  repeated, cut to the size (node/wire/rpc.py's workload_data);
- stdout: one JSON object per line with an RFC3339 "time" (ns precision).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


def ed25519_seed(node_id: int) -> bytes:
    if not 0 <= node_id < 1 << 32:
        raise ValueError(f"node id {node_id} is not a u32")
    return node_id.to_bytes(4, "little") + bytes(28)


def message_id(data: bytes) -> bytes:
    return data[:8]


def logged_id(msg_id: bytes) -> str:
    return str(int.from_bytes(msg_id, "big"))


def workload_data(seq: int, size: int) -> bytes:
    head = f"msg-{seq}:".encode()
    return (seq.to_bytes(8, "big") + head * (size // len(head) + 1))[:size]


def rfc3339_now() -> str:
    ns = time.time_ns()
    seconds, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{frac:09d}Z"


class Lines:
    """The NDJSON stream on stdout: the contract's lines and our extension
    lines, each flushed at once (a container's log or a file appended to)."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out

    def emit(self, msg: str, **fields: Any) -> None:
        self.out.write(json.dumps({"time": rfc3339_now(), "msg": msg, **fields}) + "\n")
        self.out.flush()
