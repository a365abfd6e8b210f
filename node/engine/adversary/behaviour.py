"""What every adversary behaviour answers: whether it withholds a message
the honest engine would send, what control it lets out of what the engine
made, and what it does on its own at each heartbeat. All take the time, so a
behaviour can wait (`Covert`); none reads a clock or a global random
generator: `draw` is the sybil's seeded per-message draw."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from node.engine.api import OutputBuilder
from node.wire.rpc import Control, Message

if TYPE_CHECKING:
    from node.engine.adversary.sybil import Sybil


class Behaviour(Protocol):
    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        """Whether the sybil keeps `msg` from a peer the engine would send it
        to. `draw` is uniform in [0, 1), the same for every copy of one
        message at one sybil."""
        ...

    def controls(self, now: int, control: Control) -> Control:
        """The control the sybil sends in place of `control`, which its
        engine made for one peer. A PRUNE left out is one the sybil never
        made: the peer stays in its mesh (Sybil._edit)."""
        ...

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        """What the sybil does at a heartbeat beyond what its engine does."""
        ...


class Passive:
    """A behaviour that only withholds, edits control or attacks inherits
    the other parts from here."""

    def withholds(self, now: int, msg: Message, draw: float) -> bool:
        return False

    def controls(self, now: int, control: Control) -> Control:
        return control

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        return None
