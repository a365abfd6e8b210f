"""What every adversary behaviour answers: whether it withholds a message
the honest engine would send, and what it does on its own at each heartbeat.
Both take the time, so a behaviour can wait (`Covert`); neither reads a clock
or a global random generator: `draw` is the sybil's seeded per-message draw."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from node.engine.api import OutputBuilder
from node.wire.rpc import Message

if TYPE_CHECKING:
    from node.engine.adversary.sybil import Sybil


class Behaviour(Protocol):
    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        """Whether the sybil keeps `msg` from a peer the engine would send it
        to. `draw` is uniform in [0, 1), the same for every copy of one
        message at one sybil."""
        ...

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        """What the sybil does at a heartbeat beyond what its engine does."""
        ...


class Passive:
    """A behaviour that only withholds, or only attacks, inherits the other
    half from here."""

    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        return False

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        return None
