"""A sybil's resolved `AdversarySpec` in the engine's terms: node names
become peer ids (node/engine/adversary/spec.py builds the behaviours), so
every runner that hosts sybils builds the same ones."""

from __future__ import annotations

from collections.abc import Mapping

from node.engine.adversary import Behaviour
from node.engine.adversary.spec import SybilSpec
from node.wire.rpc import PeerId
from orchestrator.experiment.model import AdversarySpec


def sybil_spec(spec: AdversarySpec, peer_id: Mapping[str, PeerId]) -> SybilSpec:
    """`peer_id`: every node's by name."""
    return SybilSpec(
        censor=spec.censor, censor_publishers=frozenset(peer_id[n] for n in spec.censor_publishers),
        degrade=spec.degrade, eclipse=frozenset(peer_id[n] for n in spec.eclipse), ihave_flood=spec.ihave_flood,
        iwant_flood=spec.iwant_flood, graft_during_backoff=spec.graft_during_backoff,
        bad_boy=spec.bad_boy, invalid_messages=spec.invalid_messages, start=spec.start,
    )


def sybil_behaviours(spec: AdversarySpec | None, peer_id: Mapping[str, PeerId], origin: int) -> tuple[Behaviour, ...]:
    """`origin`: the engine time (ns) of workload t=0. No spec: an honest
    node, no behaviours."""
    return () if spec is None else sybil_spec(spec, peer_id).behaviours(origin)
