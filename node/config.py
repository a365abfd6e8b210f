"""What a router daemon is told when it starts: one JSON file written by the
orchestrator (`testbed node --config FILE`). Frozen dataclasses so a node's
configuration is a value that can be logged, compared and replayed.

A node is a libp2p peer: its identity is derived from its experiment `index`
(node/libp2p/identity.py), peers are known by peer id (base58 text in the file), and
`peer_names` gives the experiment's names for the peers it may meet, so that
status and the control endpoint keep speaking names. A router that asks for
connections of its own (episub dials whom its views send to; gossipsub
v1.1+ dials the peers PX names) is also given `address_book`, where to dial
every other node of the experiment: the experiment is its peerstore, as a
libp2p host's is filled by discovery."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from node.dilation import DilatedClock
from node.engine.adversary.spec import SybilSpec
from node.engine.authenticity import STRICT, Authenticity
from node.libp2p.identity import Identity, ed25519_seed_for_index, identity_for_index, peer_id_from_b58
from node.wire.rpc import FROM_SEQNO


SECURITY_PROTOCOLS = ("noise", "plaintext")


@dataclass(frozen=True)
class PeerAddress:
    """A peer to dial, and the peer id (base58) it must prove it has."""

    name: str
    host: str
    port: int
    peer_id: str


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
    index: int  # the node's index in the experiment: its libp2p identity
    params: dict[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    initial_peers: tuple[PeerAddress, ...] = ()
    shaping: dict[str, LinkShape] = field(default_factory=dict)  # by peer id (base58)
    default_shape: LinkShape = LinkShape()
    max_frame: int = 1 << 20
    queue_len: int = 256
    # Added for the trio runtime (node/runtime); all optional.
    uplink_bps: int | None = None  # user-space uplink shared by every peer (serialization delay)
    lag_path: str = ""  # event-loop lag JSON; "" means <trace_path>.lag.json
    scores_path: str = ""  # per-heartbeat peer scores (node/trace/scores.py); "" records none
    tree_path: str = ""  # episub's tree extension (node/trace/tree.py); "" records none
    dial_backoff_ms: int = 50  # first redial delay, doubled per failure ...
    dial_backoff_max_ms: int = 2000  # ... up to this cap
    handshake_timeout_ms: int = 5000
    security: str = "noise"  # the libp2p security protocol: noise or plaintext
    peer_names: dict[str, str] = field(default_factory=dict)  # peer id (base58) -> name
    address_book: tuple[PeerAddress, ...] = ()  # where to dial a peer the engine asks for (dial on send, PX)
    # The network's message authenticity (the experiment's `wire:`).
    authenticity: str = STRICT  # strict | author | anonymous
    message_id: str = FROM_SEQNO  # from-seqno | first-8-bytes
    validation_delay: dict[str, float] = field(default_factory=dict)  # seconds per topic (the experiment's)
    # Time dilation (node/dilation.py): wall seconds per experiment second,
    # and the wall time (ns) where the two clocks agree.
    time_dilation: float = 1.0
    clock_epoch_ns: int = 0
    # A sybil's behaviours (docs/adversaries.md): the experiment's `adversary`
    # keys with node names as peer ids (base58); None for an honest node.
    adversary: dict[str, Any] | None = None
    # P5 this node's router gives its peers (gossipsub v1.1+), by peer id (base58); peers not named: 0.
    app_specific_scores: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.security not in SECURITY_PROTOCOLS:
            raise ValueError(f"security must be one of {', '.join(SECURITY_PROTOCOLS)}, not {self.security!r}")
        ed25519_seed_for_index(self.index)  # ValueError when it is no u32
        DilatedClock(self.clock_epoch_ns, self.time_dilation)  # ValueError when the dilation is out of range
        keyed = [("initial_peers", p.peer_id) for p in self.initial_peers]
        keyed += [("address_book", p.peer_id) for p in self.address_book]
        keyed += [("shaping", k) for k in self.shaping] + [("peer_names", k) for k in self.peer_names]
        keyed += [(f"adversary.{key}", k) for key in ("eclipse", "censor_publishers")
                  for k in (self.adversary or {}).get(key, ())]
        keyed += [("app_specific_scores", k) for k in self.app_specific_scores]
        for where, text in keyed:
            try:
                peer_id_from_b58(text)
            except ValueError as exc:
                raise ValueError(f"{where}: {text!r} is not a peer id ({exc})") from None

    @property
    def identity(self) -> Identity:
        return identity_for_index(self.index)

    @property
    def clock(self) -> DilatedClock:
        """The clock of the node's engine, traces and lag."""
        return DilatedClock(self.clock_epoch_ns, self.time_dilation)

    @property
    def peer_id(self) -> bytes:
        """The node's libp2p peer id (the multihash bytes traces carry)."""
        return self.identity.peer_id

    def sybil(self) -> SybilSpec | None:
        """The node's sybil behaviours, None for an honest node."""
        if self.adversary is None:
            return None
        ids = {key: frozenset(peer_id_from_b58(k) for k in self.adversary.get(key, ()))
               for key in ("eclipse", "censor_publishers")}
        return SybilSpec(**{**self.adversary, **ids})

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
        raw["address_book"] = tuple(PeerAddress(**p) for p in raw.get("address_book", ()))
        raw["shaping"] = {k: LinkShape(**v) for k, v in raw.get("shaping", {}).items()}
        raw["default_shape"] = LinkShape(**raw.get("default_shape", {}))
        return cls(**raw)

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        return cls.from_json(path.read_text())
