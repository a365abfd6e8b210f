"""Adversarial groups, the rules that need the whole file: the nodes an
adversary names exist and are not sybils themselves, and sybils run one of
our gossipsub engines (the behaviours ride on its mesh and mcache). Also the
resolved form, `AdversarySpec`, that the runners read."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orchestrator.experiment.model import AdversarySpec
from orchestrator.experiment.parts import Adversary, Group
from orchestrator.experiment.yamlsrc import Path_
from orchestrator.errors import InputError

SYBIL_ROUTERS = ("meshsub", "gossipsub", "gossipsub-v1.1", "gossipsub-v1.2")


def check_adversaries(groups: Sequence[Group], err: Callable[[Path_, str], InputError]) -> None:
    sybils = {n for g in groups if g.adversary is not None for n in g.node_names()}
    names = {n for g in groups for n in g.node_names()}
    for g in groups:
        adv = g.adversary
        if adv is None:
            continue
        if g.router not in SYBIL_ROUTERS:
            raise err((*g.path, "router"), f"group {g.name!r} is adversarial: sybils run one of our gossipsub engines "
                                           f"({', '.join(SYBIL_ROUTERS)}), not {g.router}")
        for key in ("eclipse", "censor_publishers"):
            for i, name in enumerate(getattr(adv, key) or ()):
                if name not in names:
                    raise err((*adv.path, key, i), f"no node is named {name!r}")
                if name in sybils:
                    raise err((*adv.path, key, i), f"{name} is a sybil itself; name honest nodes")


def adversary_spec(adv: Adversary | None) -> AdversarySpec | None:
    if adv is None:
        return None
    return AdversarySpec(
        censor=adv.censor, censor_publishers=tuple(adv.censor_publishers or ()), degrade=adv.degrade,
        eclipse=tuple(adv.eclipse or ()), ihave_flood=adv.ihave_flood, iwant_flood=adv.iwant_flood,
        graft_during_backoff=adv.graft_during_backoff,
        bad_boy=adv.bad_boy, invalid_messages=adv.invalid_messages, start=adv.start,
    )
