"""The network's shortest paths for a router that dials on send (episub):
its links go wherever its views do, so the bound on a delivery's latency is
the shortest path over every pair's link (the experiment's latency model),
not over the overlay's contact edges. Written into topology.json
(`network_paths_ms`, from each publisher), where the analysis takes it in
place of the overlay's paths for its lower bound and stretch
(docs/metrics.md)."""

from __future__ import annotations

import math

from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.routers.kinds import kind_of


def dials_anywhere(resolved: ResolvedExperiment) -> bool:
    """Some router of the experiment connects to peers beyond its contacts."""
    return any(kind_of(n.router).engine.dials_on_send for n in resolved.nodes)


def network_paths(resolved: ResolvedExperiment) -> dict[str, dict[str, float]]:
    """One-way ms from each publisher (or injection node) to every node,
    over the complete graph of link latencies (Dijkstra, dense form: O(N^2)
    per source)."""
    names = [n.name for n in resolved.nodes]
    sources = sorted({p for pub in resolved.publishes for p in pub.via})
    weights: dict[str, list[float]] = {}
    out = {}
    for src in sources:
        dist = dict.fromkeys(names, math.inf)
        dist[src] = 0.0
        todo = set(names)
        while todo:
            u = min(todo, key=dist.__getitem__)
            todo.discard(u)
            if dist[u] == math.inf:
                break
            row = weights.get(u)
            if row is None:
                row = weights[u] = [0.0 if v == u else resolved.link(u, v).latency_ms for v in names]
            du = dist[u]
            for v, w in zip(names, row):
                if du + w < dist[v]:
                    dist[v] = du + w
        out[src] = dist
    return out
