"""The spec's two caches: `seen` (a timed cache of message ids, seen_ttl) and
`mcache` (messages in history windows, one window per heartbeat)."""

from __future__ import annotations

from node.wire.rpc import Message, MessageId


class SeenCache:
    """Message ids with an expiry; ids expire in the order they were added
    because time only moves forward, so sweeping from the oldest is enough."""

    def __init__(self, ttl_ns: int) -> None:
        self.ttl_ns = ttl_ns
        self._expiry: dict[MessageId, int] = {}

    def _sweep(self, now: int) -> None:
        expiry = self._expiry
        while expiry:
            oldest = next(iter(expiry))
            if expiry[oldest] > now:
                return
            del expiry[oldest]

    def add(self, now: int, mid: MessageId) -> None:
        self._sweep(now)
        self._expiry.pop(mid, None)
        self._expiry[mid] = now + self.ttl_ns

    def has(self, now: int, mid: MessageId) -> bool:
        expires = self._expiry.get(mid)
        return expires is not None and expires > now

    def __len__(self) -> int:
        return len(self._expiry)


class MessageCache:
    """mcache: `put`, `get`, `get_gossip_ids(topic)` over the newest
    `gossip` windows, and `shift` that drops the window older than `history`.
    `get_for_peer` also counts how often each peer was sent a message in
    answer to IWANT (gossipsub v1.1 limits retransmissions)."""

    def __init__(self, history: int, gossip: int) -> None:
        if not 0 < gossip <= history:
            raise ValueError(f"mcache_gossip ({gossip}) must be between 1 and mcache_len ({history})")
        self.history = history
        self.gossip = gossip
        self._msgs: dict[MessageId, Message] = {}
        self._windows: list[list[tuple[MessageId, str]]] = [[]]
        self._peer_counts: dict[MessageId, dict[bytes, int]] = {}

    def put(self, msg: Message) -> None:
        mid = msg.id
        if mid not in self._msgs:
            self._msgs[mid] = msg
            self._windows[0].append((mid, msg.topic))

    def get(self, mid: MessageId) -> Message | None:
        return self._msgs.get(mid)

    def get_for_peer(self, mid: MessageId, peer: bytes) -> tuple[Message | None, int]:
        """The message and how many times `peer` has now asked for it."""
        msg = self._msgs.get(mid)
        if msg is None:
            return None, 0
        counts = self._peer_counts.setdefault(mid, {})
        counts[peer] = counts.get(peer, 0) + 1
        return msg, counts[peer]

    def get_gossip_ids(self, topic: str) -> tuple[MessageId, ...]:
        return tuple(
            mid
            for window in self._windows[: self.gossip]
            for mid, msg_topic in window
            if msg_topic == topic
        )

    def shift(self) -> None:
        if len(self._windows) >= self.history:
            for mid, _ in self._windows.pop():
                self._msgs.pop(mid, None)
                self._peer_counts.pop(mid, None)
        self._windows.insert(0, [])

    def __len__(self) -> int:
        return len(self._msgs)
