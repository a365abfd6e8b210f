"""What a sybil does, resolved to peer ids: the one place that turns an
experiment file's `adversary:` keys into behaviours, for every runner that
hosts sybils (the simulator, and the router daemon on the process and
docker backends). `start` stays in workload seconds because a real backend
learns when the workload starts only once its nodes run: until it is told
(`origin`), a covert sybil is honest."""

from __future__ import annotations

from dataclasses import dataclass

from node.engine.adversary.bad_boy import BadBoy
from node.engine.adversary.behaviour import Behaviour
from node.engine.adversary.censor import Censor
from node.engine.adversary.covert import Covert
from node.engine.adversary.degrade import Degrade
from node.engine.adversary.eclipse import Eclipse
from node.engine.adversary.spam import GraftDuringBackoff, IHaveFlood, InvalidMessages, IWantFlood
from node.engine.api import NS
from node.wire.rpc import PeerId

NEVER = 1 << 62  # a covert sybil's switch before it knows when the workload starts


@dataclass(frozen=True)
class SybilSpec:
    censor: bool = False
    censor_publishers: frozenset[PeerId] = frozenset()
    degrade: float | None = None  # the share of messages still forwarded
    eclipse: frozenset[PeerId] = frozenset()
    ihave_flood: int | None = None
    iwant_flood: int | None = None
    graft_during_backoff: bool = False
    bad_boy: bool = False
    invalid_messages: int | None = None  # forged messages per heartbeat
    start: float = 0.0  # workload seconds; later than 0: covert until then

    def behaviours(self, origin: int | None) -> tuple[Behaviour, ...]:
        """`origin`: the engine time (ns) of workload t=0, None while unknown."""
        out: list[Behaviour] = []
        if self.censor:
            out.append(Censor())
        if self.censor_publishers:
            out.append(Censor(self.censor_publishers))
        if self.degrade is not None:
            out.append(Degrade(self.degrade))
        if self.eclipse:
            out.append(Eclipse(self.eclipse))
        if self.ihave_flood is not None:
            out.append(IHaveFlood(self.ihave_flood))
        if self.iwant_flood is not None:
            out.append(IWantFlood(self.iwant_flood))
        if self.graft_during_backoff:
            out.append(GraftDuringBackoff())
        if self.bad_boy:
            out.append(BadBoy())
        if self.invalid_messages is not None:
            out.append(InvalidMessages(self.invalid_messages))
        if self.start > 0:
            return (Covert(NEVER if origin is None else origin + round(self.start * NS), tuple(out)),)
        return tuple(out)
