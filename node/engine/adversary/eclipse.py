"""eclipse(targets): aim GRAFTs at a victim set. At every heartbeat the
sybil grafts each target it is connected to and that shares the topic,
whether or not the target pruned it or asked it to back off; aiming the
connections themselves is the topology's job (the experiment connects
sybils to their targets). Combined with `Censor` the victim's mesh fills
with peers that forward nothing: the hardening report's eclipse attack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.engine.adversary.behaviour import Passive
from node.engine.api import OutputBuilder
from node.wire.rpc import PeerId

if TYPE_CHECKING:
    from node.engine.adversary.sybil import Sybil


@dataclass(frozen=True)
class Eclipse(Passive):
    targets: frozenset[PeerId]

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        for topic in sorted(sybil.topics()):
            for peer in sorted(self.targets):
                sybil.force_graft(out, peer, topic)
