"""A sybil node's behaviours (node/engine/adversary/) from its resolved
`AdversarySpec`: node names become peer ids, and `start`, in workload
seconds, becomes the engine clock's time, so every runner that hosts
sybils builds the same ones."""

from __future__ import annotations

from collections.abc import Mapping

from node.engine.adversary import (
    Behaviour, Censor, Covert, Degrade, Eclipse, GraftDuringBackoff, IHaveFlood, IWantFlood,
)
from node.engine.api import NS
from node.wire.rpc import PeerId
from orchestrator.experiment.model import AdversarySpec


def sybil_behaviours(spec: AdversarySpec | None, peer_id: Mapping[str, PeerId], origin: int) -> tuple[Behaviour, ...]:
    """`peer_id`: every node's by name; `origin`: the engine time (ns) of
    workload t=0. No spec: an honest node, no behaviours."""
    if spec is None:
        return ()
    out: list[Behaviour] = []
    if spec.censor:
        out.append(Censor())
    if spec.censor_publishers:
        out.append(Censor(frozenset(peer_id[n] for n in spec.censor_publishers)))
    if spec.degrade is not None:
        out.append(Degrade(spec.degrade))
    if spec.eclipse:
        out.append(Eclipse(frozenset(peer_id[n] for n in spec.eclipse)))
    if spec.ihave_flood is not None:
        out.append(IHaveFlood(spec.ihave_flood))
    if spec.iwant_flood is not None:
        out.append(IWantFlood(spec.iwant_flood))
    if spec.graft_during_backoff:
        out.append(GraftDuringBackoff())
    if spec.start > 0:
        return (Covert(origin + round(spec.start * NS), tuple(out)),)
    return tuple(out)
