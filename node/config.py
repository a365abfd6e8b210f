"""What a router daemon is told when it starts: one JSON file written by the
orchestrator (`testbed node --config FILE`). Frozen dataclasses so a node's
configuration is a value that can be logged, compared and replayed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from node.engine.authenticity import STRICT, Authenticity
from node.identity import Identity, identity_for_index
from node.wire import FROM_SEQNO


@dataclass(frozen=True)
class PeerAddress:
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class LinkShape:
    """User-space shaping of what this node sends to one peer (or to all, as the
    default): one-way delay, jitter, loss probability and rate."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    rate_bps: int | None = None

    def is_noop(self) -> bool:
        return not (self.delay_ms or self.jitter_ms or self.loss or self.rate_bps)


@dataclass(frozen=True)
class NodeConfig:
    name: str
    router: str
    seed: int
    listen_host: str
    listen_port: int
    control_host: str
    control_port: int
    token: str
    trace_path: str
    index: int  # the node's index in the experiment: its libp2p identity (node/identity.py)
    params: dict[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    initial_peers: tuple[PeerAddress, ...] = ()
    shaping: dict[str, LinkShape] = field(default_factory=dict)
    default_shape: LinkShape = LinkShape()
    flush_interval_ms: int = 100
    max_frame: int = 1 << 20
    queue_len: int = 256
    # Added for the trio runtime (node/runtime); all optional.
    uplink_bps: int | None = None  # user-space uplink shared by every peer (serialization delay)
    lag_path: str = ""  # event-loop lag JSON; "" means <trace_path>.lag.json
    lag_tick_ms: int = 50  # the ticker that measures loop lag and flushes the trace
    dial_backoff_ms: int = 50  # first redial delay, doubled per failure ...
    dial_backoff_max_ms: int = 2000  # ... up to this cap
    handshake_timeout_ms: int = 5000
    # The network's wire and message authenticity (the experiment's `wire:`).
    security: str = "noise"  # noise | plaintext
    authenticity: str = STRICT  # strict | author | anonymous
    message_id: str = FROM_SEQNO  # from-seqno | first-8-bytes

    @property
    def identity(self) -> Identity:
        return identity_for_index(self.index)

    @property
    def peer_id(self) -> bytes:
        return self.identity.peer_id

    def auth(self) -> Authenticity:
        """The message authenticity policy the node's engine is given."""
        return Authenticity(self.authenticity, self.message_id, self.identity)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeConfig:
        raw = json.loads(text)
        raw["topics"] = tuple(raw.get("topics", ()))
        raw["initial_peers"] = tuple(PeerAddress(**p) for p in raw.get("initial_peers", ()))
        raw["shaping"] = {k: LinkShape(**v) for k, v in raw.get("shaping", {}).items()}
        raw["default_shape"] = LinkShape(**raw.get("default_shape", {}))
        return cls(**raw)

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        return cls.from_json(path.read_text())
