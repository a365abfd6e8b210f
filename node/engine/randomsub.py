"""randomsub: forward every new message to at most D peers of the topic chosen
at random per message, the baseline the gossipsub paper compares meshes with.
No mesh, no control messages."""

from __future__ import annotations

from dataclasses import dataclass

from node.engine.api import FLOODSUB_ID, RANDOMSUB_ID, OutputBuilder
from node.engine.pubsub import PubSubRouter, sample_sorted
from node.wire.rpc import Message, PeerId


@dataclass(frozen=True)
class RandomSubParams:
    D: int = 6
    seen_ttl: float = 120.0

    def check(self) -> None:
        if self.D < 1:
            raise ValueError("D must be at least 1")
        if self.seen_ttl <= 0:
            raise ValueError("seen_ttl must be positive")


class RandomSubRouter(PubSubRouter[RandomSubParams]):
    protocol_id = RANDOMSUB_ID
    supported_protocols = frozenset({RANDOMSUB_ID, FLOODSUB_ID})

    def _forward(self, out: OutputBuilder, msg: Message, received_from: PeerId | None) -> None:
        candidates = self.topic_peers(msg.topic) - self._excluded(msg, received_from)
        for peer in sorted(sample_sorted(self.rng, candidates, self.params.D)):
            out.forward(peer, msg)
