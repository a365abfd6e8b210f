"""censor: accept messages and never forward them, either everyone's or
only those of chosen publishers (the hardening report's censorship attack,
and the half of its eclipse that starves the victim). Messages the sybil
publishes itself still go out. Its engine's gossip still advertises what it
withholds, so it breaks the IHAVE promises it makes, which v1.1's P7 scores."""

from __future__ import annotations

from dataclasses import dataclass

from node.engine.adversary.behaviour import Passive
from node.wire.rpc import Message, PeerId


@dataclass(frozen=True)
class Censor(Passive):
    """`publishers`: the origins whose messages are withheld; None: all."""

    publishers: frozenset[PeerId] | None = None

    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        return self.publishers is None or msg.from_peer in self.publishers
