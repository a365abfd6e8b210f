"""bad boy: the hardening report's sybil, which takes every mesh place it
can get. At every heartbeat it GRAFTs each topic peer it is connected to;
it never PRUNEs (a peer that grafts it stays, however full its mesh), never
gossips (no IHAVE), and regrafts a peer that pruned it once `regraft` has
passed since that PRUNE (the report's one minute, v1.1's PruneBackoff, so a
bad boy breaks no backoff). With `Censor` it is the report's attacker
("forwards nothing once attacking"); our other sybils keep their engine's
mesh between D_low and D_high, which is why they hold fewer mesh places."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.engine.adversary.behaviour import Passive
from node.engine.api import NS, OutputBuilder
from node.wire.rpc import Control

if TYPE_CHECKING:
    from node.engine.adversary.sybil import Sybil

REPORT_REGRAFT = 60 * NS


@dataclass(frozen=True)
class BadBoy(Passive):
    regraft: int = REPORT_REGRAFT  # ns from a PRUNE to the GRAFT back

    def controls(self, now: int, control: Control) -> Control:
        if not (control.prune or control.ihave):
            return control
        return dataclasses.replace(control, prune=(), ihave=())

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        for topic in sorted(sybil.topics()):
            for peer in sorted(sybil.topic_peers(topic)):
                pruned = sybil.pruned_at.get((topic, peer))
                if pruned is None or now >= pruned + self.regraft:
                    sybil.force_graft(out, peer, topic)
