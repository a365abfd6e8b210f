"""Pictures of the network: the overlay with each snapshot's meshes
(analysis/mesh.py), and per-node latency and event-loop lag laid onto it,
as GraphChart specs.

Nodes are placed once per run by networkx's spring layout (seeded with the
run's seed, so a report is the same every time), and every picture of the
run uses those places: a node sits in the same spot at the workload's start,
after each churn event and in the latency picture. Beyond AGGREGATE_ABOVE
nodes a picture of every node is a hairball; nodes are then drawn in clusters
(their group, implementation or region, else the overlay's Louvain
communities), sized by their number of nodes, with edge widths by the number
of links between clusters.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import networkx as nx

from analysis.fidelity import fidelity
from analysis.report.colours import Colours, palette
from analysis.report.data import RunData
from analysis.report.specs import Edges, Figure, GraphChart, NodeStyle

AGGREGATE_ABOVE = 300
OVERLAY, MESH, HALF_MESH, ADDED, GONE = "#d1d5db", "#111827", "#f59e0b", "#16a34a", "#dc2626"
LAYOUT_ITERATIONS = 60


@dataclass(frozen=True)
class Layout:
    """Where each node (or cluster) is drawn; `cluster_of` maps a node to
    its cluster when the picture is aggregated (empty otherwise)."""

    positions: dict[str, tuple[float, float]]
    overlay: tuple[tuple[str, str], ...]
    cluster_of: dict[str, str]
    members: dict[str, int]


def _nodes(d: RunData) -> list[str]:
    names = [str(n["name"]) for n in d.run.topology_nodes() if n.get("name")]
    nodes = d.table("nodes")
    return names or ([str(n) for n in nodes["node"]] if len(nodes) else [])


def layout(d: RunData, colours: Colours) -> Layout | None:
    names = _nodes(d)
    if not names:
        return None
    seed = int(d.run.manifest.get("seed", d.run.experiment.get("seed", 0)) or 0)
    g = nx.Graph()
    g.add_nodes_from(names)
    g.add_edges_from((str(e["a"]), str(e["b"])) for e in d.run.topology_edges())
    overlay = tuple(sorted(tuple(sorted(e)) for e in g.edges))
    if len(names) <= AGGREGATE_ABOVE:
        return Layout(_grouped(g, colours, seed), overlay, {}, {})
    cluster_of = _clusters(g, colours, seed)
    members = Counter(cluster_of.values())
    cg = nx.Graph()
    cg.add_nodes_from(members)
    for (a, b), w in Counter(tuple(sorted((cluster_of[a], cluster_of[b]))) for a, b in overlay).items():
        if a != b:
            cg.add_edge(a, b, weight=w)
    pos = nx.spring_layout(cg, seed=seed, weight="weight", iterations=LAYOUT_ITERATIONS)
    return Layout({c: (float(x), float(y)) for c, (x, y) in pos.items()}, overlay, cluster_of, dict(members))


def _grouped(g: nx.Graph, colours: Colours, seed: int) -> dict[str, tuple[float, float]]:
    """Spring layout; nodes of several groups (implementations, regions)
    each laid out apart, their groups' centres on a circle, so links within
    and between groups read apart."""
    if not colours.attribute:
        pos = nx.spring_layout(g, seed=seed, iterations=LAYOUT_ITERATIONS)
        return {n: (float(x), float(y)) for n, (x, y) in pos.items()}
    values = list(colours.by_value)
    out = {}
    for i, v in enumerate(values + [""]):
        members = [n for n in g.nodes if colours.value(n) == v or (v == "" and colours.value(n) not in values)]
        if not members:
            continue
        angle = 2 * math.pi * i / len(values)
        cx, cy = 1.4 * math.cos(angle), 1.4 * math.sin(angle)
        pos = nx.spring_layout(g.subgraph(members), seed=seed, iterations=LAYOUT_ITERATIONS)
        out.update({n: (cx + float(x), cy + float(y)) for n, (x, y) in pos.items()})
    return out


def _clusters(g: nx.Graph, colours: Colours, seed: int) -> dict[str, str]:
    if colours.attribute:
        return {n: colours.value(n) or "other" for n in g.nodes}
    communities = nx.community.louvain_communities(g, seed=seed)
    ordered = sorted((sorted(c) for c in communities), key=lambda c: (-len(c), c[0]))
    return {n: f"cluster {i + 1}" for i, c in enumerate(ordered) for n in c}


def _aggregate(lay: Layout, pairs) -> tuple[tuple[tuple[str, str], ...], tuple[float, ...], Counter]:
    """Links between nodes as links between their clusters: the cluster
    pairs, a width per pair, and the links inside each cluster."""
    between: Counter = Counter()
    inside: Counter = Counter()
    for a, b in pairs:
        ca, cb = lay.cluster_of.get(a), lay.cluster_of.get(b)
        if ca is None or cb is None:
            continue
        if ca == cb:
            inside[ca] += 1
        else:
            between[tuple(sorted((ca, cb)))] += 1
    top = max(between.values(), default=1)
    keys = tuple(sorted(between))
    return keys, tuple(0.5 + 6.0 * between[k] / top for k in keys), inside


def _cluster_sizes(lay: Layout) -> tuple[float, ...]:
    top = max(lay.members.values())
    return tuple(60.0 + 900.0 * lay.members[c] / top for c in sorted(lay.members))


def _mesh_pairs(d: RunData, snapshot: int) -> tuple[set, set]:
    """Mesh links at a snapshot as undirected pairs: both ends have each
    other in their mesh, or only one end does."""
    links = d.table("mesh_links")
    if not len(links):
        return set(), set()
    at = links[links["snapshot"] == snapshot]
    directed = {(str(a), str(b)) for a, b in zip(at["node"], at["peer"]) if b is not None}
    both = {tuple(sorted(p)) for p in directed if (p[1], p[0]) in directed}
    one = {tuple(sorted(p)) for p in directed} - both
    return both, one


def mesh_pictures(d: RunData, colours: Colours, lay: Layout) -> list[Figure]:
    """The overlay and the meshes at each snapshot (summary mesh_snapshots)."""
    out = []
    before: set = set()
    for k, snap in enumerate(d.summary.get("mesh_snapshots") or []):
        both, one = _mesh_pairs(d, k)
        down = set(snap.get("down") or ())
        title = f"Mesh at {snap['label']}" if k == 0 else f"Mesh {snap['label']}"
        if lay.cluster_of:
            out.append(_mesh_aggregated(d, colours, lay, k, title, both | one, down))
            continue
        thin = 1.0 if len(lay.positions) <= 50 else 0.4  # many nodes: thinner lines, or the mesh is a blot
        added, gone = (both - before, before - both - one) if k else (set(), set())
        edges = (Edges(f"overlay ({len(lay.overlay)})", lay.overlay, OVERLAY, 0.6),
                 Edges(f"mesh ({len(both)})", tuple(sorted(both - added)), MESH, 1.3 * thin),
                 Edges(f"mesh, one end only ({len(one)})", tuple(sorted(one)), HALF_MESH, 1.2 * thin, dashed=True),
                 Edges(f"new mesh link ({len(added)})", tuple(sorted(added)), ADDED, 2.0 * thin),
                 Edges(f"lost mesh link ({len(gone)})", tuple(sorted(gone)), GONE, 2.0 * thin, dashed=True))
        before = both
        out.append(Figure(GraphChart(f"r{d.index}-mesh{k}", title, lay.positions, edges,
                                     _category_nodes(colours, lay, down), node_labels=_labels(lay)),
                          _mesh_caption(colours, k > 0)))
    return out


def _mesh_aggregated(d: RunData, colours: Colours, lay: Layout, k: int, title: str, mesh: set,
                     down: set) -> Figure:
    keys, widths, inside = _aggregate(lay, mesh)
    okeys, owidths, _ = _aggregate(lay, lay.overlay)
    clusters = sorted(lay.members)
    downs = Counter(lay.cluster_of[n] for n in down if n in lay.cluster_of)
    labels = {c: f"{_short(c)} ({lay.members[c]}" + (f", {downs[c]} down)" if downs[c] else ")") for c in clusters}
    nodes = tuple(NodeStyle(c if colours.attribute else "", (c,), colours.by_value.get(c, palette(0)),
                            sizes=(s,)) for c, s in zip(clusters, _cluster_sizes(lay)))
    edges = (Edges("overlay links", okeys, OVERLAY, 1.0, widths=tuple(w + 2 for w in owidths)),
             Edges("mesh links (width: how many)", keys, MESH, 1.0, widths=widths))
    return Figure(GraphChart(f"r{d.index}-mesh{k}", title, lay.positions, edges, nodes, node_labels=labels),
                  f"{len(lay.cluster_of)} nodes drawn as clusters ({_basis(colours)}), sized by their nodes "
                  f"(labels: nodes, and how many were down); {sum(inside.values())} mesh links inside clusters, "
                  f"{len(mesh) - sum(inside.values())} between them (line widths).")


def _short(cluster: str) -> str:
    return cluster.replace("cluster ", "c")


def _basis(colours: Colours) -> str:
    return f"by {colours.attribute}" if colours.attribute else "the overlay's Louvain communities"


def _labels(lay: Layout) -> dict[str, str]:
    return {n: n for n in lay.positions} if len(lay.positions) <= 40 else {}


def _category_nodes(colours: Colours, lay: Layout, down: set) -> tuple[NodeStyle, ...]:
    up = [n for n in lay.positions if n not in down]
    styles = []
    if colours.attribute:
        for v, c in colours.by_value.items():
            styles.append(NodeStyle(v, tuple(n for n in up if colours.value(n) == v), c))
    else:
        styles.append(NodeStyle("node", tuple(up), palette(0)))
    if down:
        styles.append(NodeStyle(f"down ({len(down)})", tuple(sorted(down)), hollow=True))
    return tuple(styles)


def _mesh_caption(colours: Colours, changes: bool) -> str:
    by = (f"Nodes coloured by {colours.attribute}, each {colours.attribute} laid out apart. "
          if colours.attribute else "")
    diff = ("Green: mesh links made since the picture before; dashed red: mesh links lost since. "
            if changes else "")
    return (f"{by}Grey: overlay links (topology.json); black: links in both ends' meshes; dashed amber: in one "
            f"end's mesh only (a GRAFT or PRUNE on its way, refused, or not in the other end's trace: a bare "
            f"contract image records none). {diff}Hollow: nodes down at that moment.")


def per_node_pictures(d: RunData, colours: Colours, lay: Layout) -> list[Figure]:
    """Median latency as a recipient per node, and event-loop lag where the
    run measured it, on the overlay's places."""
    nodes = d.table("nodes")
    if not len(nodes):
        return []
    out = [_valued(d, lay, "nodelat", "Median latency as a recipient",
                   "median latency as a recipient (ms)",
                   {str(n): float(v) for n, v in zip(nodes["node"], nodes["latency_p50_ms"])},
                   {str(n) for n, r in zip(nodes["node"], nodes["delivery_ratio"]) if r == r and r < 1})]
    delivered = {str(r.node): int(r.delivered) for r in nodes.itertuples()} if "delivered" in nodes else {}
    s = d.summary
    f = fidelity(d.run.path, d.run.manifest, delivered, s.get("latency_p50_ms"), s.get("messages"),
                 s.get("stretch_p50"))
    lag = {str(r["node"]): float(r["lag_p99_ms"]) for r in (f or {}).get("per_node", [])
           if r.get("lag_p99_ms") is not None}
    if lag:
        out.append(_valued(d, lay, "nodelag", "Event-loop lag p99",
                           "event-loop lag p99 (ms)", lag, set()))
    return out


def _valued(d: RunData, lay: Layout, key: str, title: str, scale: str, value: dict[str, float],
            missed: set[str]) -> Figure:
    if lay.cluster_of:
        clusters = sorted(lay.members)
        per: dict[str, list[float]] = {c: [] for c in clusters}
        for n, v in value.items():
            if n in lay.cluster_of and not math.isnan(v):
                per[lay.cluster_of[n]].append(v)
        med = tuple(sorted(v)[len(v) // 2] if v else math.nan for v in (per[c] for c in clusters))
        keys, widths, _ = _aggregate(lay, lay.overlay)
        miss = Counter(lay.cluster_of[n] for n in missed if n in lay.cluster_of)
        labels = {c: f"{_short(c)} ({lay.members[c]}" + (f", {miss[c]} missed some)" if miss[c] else ")")
                  for c in clusters}
        return Figure(GraphChart(f"r{d.index}-{key}", f"{title}, per cluster", lay.positions,
                                 (Edges("overlay links", keys, OVERLAY, 1.0, widths=widths),),
                                 (NodeStyle("", tuple(clusters), values=med, sizes=_cluster_sizes(lay)),),
                                 scale=scale, node_labels=labels),
                      "Clusters as in the overlay pictures; colour: the median over the cluster's nodes.")
    names = tuple(lay.positions)
    styles = [NodeStyle("", names, values=tuple(value.get(n, math.nan) for n in names))]
    if missed:
        styles.append(NodeStyle(f"missed deliveries ({len(missed)})", tuple(sorted(missed)),
                                values=tuple(value.get(n, math.nan) for n in sorted(missed)), ringed=True))
    return Figure(GraphChart(f"r{d.index}-{key}", title, lay.positions,
                             (Edges("overlay link", lay.overlay, OVERLAY, 0.6),), tuple(styles), scale=scale,
                             node_labels=_labels(lay)),
                  "Same places as the overlay pictures; grey: no figure for that node (a publisher only, or down).")
