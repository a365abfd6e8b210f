"""covert: behave as an honest node until a time, then switch to the
behaviours it holds (the hardening report's covert flash: sybils build up
good scores first, then all attack at once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.engine.adversary.behaviour import Behaviour
from node.engine.api import OutputBuilder
from node.wire.rpc import Control, Message

if TYPE_CHECKING:
    from node.engine.adversary.sybil import Sybil


@dataclass(frozen=True)
class Covert:
    """`at`: when the attack starts (ns of the sybil's clock); `then`: the
    behaviours from then on."""

    at: int
    then: tuple[Behaviour, ...]

    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        return now >= self.at and any(b.withholds(now, msg, draw) for b in self.then)

    def controls(self, now: int, control: Control) -> Control:
        if now >= self.at:
            for behaviour in self.then:
                control = behaviour.controls(now, control)
        return control

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        if now >= self.at:
            for behaviour in self.then:
                behaviour.attack(now, sybil, out)
