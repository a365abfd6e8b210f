"""floodsub: forward every new message to every known peer in the topic except
the one it came from and its origin (gossipsub spec, 'In the beginning was
floodsub'); a seen cache stops the flood from looping."""

from __future__ import annotations

from dataclasses import dataclass

from node.engine.api import FLOODSUB_ID, OutputBuilder
from node.engine.pubsub import PubSubRouter
from node.wire.rpc import Message, PeerId


@dataclass(frozen=True)
class FloodSubParams:
    seen_ttl: float = 120.0

    def check(self) -> None:
        if self.seen_ttl <= 0:
            raise ValueError("seen_ttl must be positive")


class FloodSubRouter(PubSubRouter[FloodSubParams]):
    protocol_id = FLOODSUB_ID
    supported_protocols = frozenset({FLOODSUB_ID})

    def _forward(self, out: OutputBuilder, msg: Message, received_from: PeerId | None) -> None:
        excluded = self._excluded(msg, received_from)
        for peer in sorted(self.topic_peers(msg.topic) - excluded):
            out.forward(peer, msg)
