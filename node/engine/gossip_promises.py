"""gossipsub v1.1's IWANT promises ("Spam Protection Measures"): for every IWANT
sent in answer to an IHAVE, one message id chosen at random is tracked; if no
valid copy of it arrives from anyone within IWantFollowupTime, the peer that
advertised it broke its promise and earns a behavioural penalty (P7)."""

from __future__ import annotations

import random
from collections import Counter

from node.wire.rpc import MessageId, PeerId


class GossipPromises:
    def __init__(self, followup_ns: int) -> None:
        self.followup_ns = followup_ns
        self._promises: dict[MessageId, dict[PeerId, int]] = {}

    def add(self, now: int, rng: random.Random, peer: PeerId, ids: tuple[MessageId, ...]) -> None:
        if not ids:
            return
        mid = ids[rng.randrange(len(ids))]
        self._promises.setdefault(mid, {}).setdefault(peer, now + self.followup_ns)

    def fulfil(self, mid: MessageId) -> None:
        """A copy of the message arrived (valid, or invalid in a way the score
        already punishes)."""
        self._promises.pop(mid, None)

    def broken(self, now: int) -> Counter[PeerId]:
        """Promises past their deadline, counted per peer and forgotten."""
        count: Counter[PeerId] = Counter()
        for mid in list(self._promises):
            peers = self._promises[mid]
            for peer in [p for p, deadline in peers.items() if deadline < now]:
                count[peer] += 1
                del peers[peer]
            if not peers:
                del self._promises[mid]
        return count

    def __len__(self) -> int:
        return sum(len(peers) for peers in self._promises.values())
