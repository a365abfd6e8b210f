"""The network's shape for one seed: the nodes with their seeds, regions and
uplinks, the overlay, and the latency model of every pair. resolve.py calls
these before it replays the churn and the workload on them.

Every random choice draws from its own `random.Random` derived from the seed
and a purpose string ("overlay", "latency", "node/<name>", ...), so one choice
does not shift another when a file changes elsewhere, and nothing depends on
PYTHONHASHSEED.
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, TypeVar

from orchestrator.experiment import graphs
from orchestrator.experiment.adversary import adversary_spec
from orchestrator.experiment.model import NodeSpec
from orchestrator.experiment.links import Constant, PairLinks, Regions, Uniform

if TYPE_CHECKING:  # a type only: experiment.py imports resolve.py, which imports this module
    from orchestrator.experiment.experiment import Experiment

T = TypeVar("T")

# Redraws of a random overlay until it is connected, bounded by the work they
# cost: a few for a huge overlay, a hundred for a small one.
MAX_OVERLAY_DRAWS = 100
OVERLAY_DRAW_BUDGET = 20_000_000  # edges drawn in all


def derive_rng(seed: int, *purpose: object) -> random.Random:
    """A generator for one purpose; str seeds are hashed with SHA-512 by
    `random.Random`, independent of PYTHONHASHSEED."""
    return random.Random("/".join([str(seed), *map(str, purpose)]))


def derive_seed(seed: int, *purpose: object) -> int:
    text = "/".join([str(seed), *map(str, purpose)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def nodes(exp: Experiment, seed: int) -> list[NodeSpec]:
    """Regions round-robin from the group's list, else drawn by a links
    preset's weights; uplinks the group's, else the preset's class drawn by
    weight, else `links.uplink`. Identities packed on one host
    (`identities_per_host`) all take their host's (its first identity's)."""
    out = []
    preset = exp.links.network_preset
    for g in exp.groups:
        names = g.node_names()
        pack = g.identities_per_host or 1
        for i, name in enumerate(names):
            # a packed identity is where its host is, behind its host's uplink
            first = i - i % pack
            host = names[first]
            region = g.regions[first % len(g.regions)] if g.regions else None
            uplink = g.uplink_bps if g.uplink_bps is not None else exp.links.uplink_bps
            if preset is not None:
                region = region or _weighted(derive_rng(seed, "region", host), preset.regions)
                classes = tuple((bps, weight) for _, bps, weight in preset.classes)
                uplink = uplink if uplink is not None else _weighted(derive_rng(seed, "class", host), classes)
            out.append(NodeSpec(
                name=name, group=g.name, router=g.router, params=dict(g.router_params),  # type: ignore[arg-type]
                topics=tuple(g.topics), seed=derive_seed(seed, "node", name), region=region, uplink_bps=uplink,
                memory=g.memory, cpus=g.cpus, placement=g.placement, adversary=adversary_spec(g.adversary),
                app_specific_score=g.app_specific_score or 0.0, connect_at=g.connect_at,
                host=host if pack > 1 else None,
            ))
    return out


def _weighted(rng: random.Random, choices: tuple[tuple[T, int], ...]) -> T:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def overlay(exp: Experiment, seed: int, names: list[str]) -> list[tuple[str, str]]:
    """The overlay the file asks for, plus an edge from every eclipsing
    sybil to each of its targets and, with `attack_degree: k`, to k honest
    nodes drawn for it (an adversary aims its connections)."""
    edges = _drawn_overlay(exp, seed, names)
    have = {graphs.edge(*e) for e in edges}
    sybils = {n for g in exp.groups if g.adversary is not None for n in g.node_names()}
    honest = [n for n in names if n not in sybils]
    for g in exp.groups:
        adv = g.adversary
        for sybil in g.node_names() if adv is not None else ():
            aimed = list(adv.eclipse or ())
            if adv.attack_degree:
                aimed += derive_rng(seed, "attack", sybil).sample(honest, min(adv.attack_degree, len(honest)))
            for target in aimed:
                if graphs.edge(sybil, target) not in have:
                    have.add(graphs.edge(sybil, target))
                    edges.append(graphs.edge(sybil, target))
    return edges


def _drawn_overlay(exp: Experiment, seed: int, names: list[str]) -> list[tuple[str, str]]:
    ov = exp.overlay
    if ov.type == "explicit":
        return list(ov.edges)
    if ov.type == "full":
        return graphs.full(names)
    assert ov.degree is not None
    draws = max(3, min(MAX_OVERLAY_DRAWS, OVERLAY_DRAW_BUDGET // max(1, len(names) * ov.degree)))
    for attempt in range(draws):
        rng = derive_rng(seed, "overlay", *([attempt] if attempt else []))
        if ov.type == "random":
            edges = graphs.n_connect(names, ov.degree, rng)
        else:
            try:
                edges = graphs.random_regular(names, ov.degree, rng)
            except ValueError as exc:
                raise exp.error((*ov.path, "degree"), str(exc)) from None
        if not ov.connected or graphs.components(names, edges) == 1:
            return edges
    raise exp.error(
        ov.path, f"{draws} draws of a {ov.type} overlay of degree {ov.degree} on "
        f"{len(names)} nodes were all disconnected; raise the degree or set 'connected: false'",
    )


def pair_links(exp: Experiment, seed: int, nodes: list[NodeSpec]) -> PairLinks:
    lat = exp.links.latency
    model: Constant | Uniform | Regions
    if lat.model == "constant":
        assert lat.ms is not None
        model = Constant(lat.ms)
    elif lat.model == "uniform":
        assert lat.min_ms is not None and lat.max_ms is not None
        model = Uniform(lat.min_ms, lat.max_ms, derive_seed(seed, "latency"))
    else:
        region_of = {n.name: n.region for n in nodes if n.region is not None}
        matrix = lat.pairs()
        values = list(matrix.values())
        model = Regions(matrix, region_of, round(sum(values) / len(values), 3))
    host_of = {n.name: n.host for n in nodes if n.host is not None}
    return PairLinks(model, exp.links.jitter_ms, exp.links.loss, host_of)
