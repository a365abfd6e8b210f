"""gossipsub v1.1's PRUNE backoff ("PRUNE Backoff and Peer Exchange"): after a
PRUNE, in either direction, neither side grafts the other on that topic until
the backoff expires. Times are nanoseconds."""

from __future__ import annotations

from node.wire.rpc import PeerId


class Backoff:
    """Expiry per (topic, peer); an entry only ever moves later."""

    def __init__(self) -> None:
        self._until: dict[str, dict[PeerId, int]] = {}

    def add(self, topic: str, peer: PeerId, until: int) -> None:
        peers = self._until.setdefault(topic, {})
        if peers.get(peer, 0) < until:
            peers[peer] = until

    def until(self, topic: str, peer: PeerId) -> int | None:
        return self._until.get(topic, {}).get(peer)

    def active(self, now: int, topic: str, peer: PeerId, slack: int = 0) -> bool:
        """Backed off at `now`; `slack` extends the period (the spec's slack
        for the offset to the heartbeat that clears the backoff)."""
        until = self.until(topic, peer)
        return until is not None and now < until + slack

    def clear_expired(self, now: int, slack: int = 0) -> None:
        for topic in list(self._until):
            peers = self._until[topic]
            for peer in [p for p, until in peers.items() if until + slack <= now]:
                del peers[peer]
            if not peers:
                del self._until[topic]
