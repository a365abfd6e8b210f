"""degrade(fraction): forward only a fraction of the messages (the hardening
report's network degradation attack). The choice is per message, so a
withheld message goes to none of the sybil's peers, and it is a seeded
function of the message id, so a run repeats."""

from __future__ import annotations

from dataclasses import dataclass

from node.engine.adversary.behaviour import Passive
from node.wire.rpc import Message


@dataclass(frozen=True)
class Degrade(Passive):
    """`forward`: the share of messages still forwarded, in [0, 1]."""

    forward: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.forward <= 1.0:
            raise ValueError(f"degrade: forward must be in [0, 1], got {self.forward}")

    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        return draw >= self.forward
