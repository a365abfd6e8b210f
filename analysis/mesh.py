"""Each node's mesh rebuilt from its own trace, link by link (docs/metrics.md,
"mesh degree over time" and "Mesh snapshots").

Why a module of its own: two figures replay the same mesh. The mesh degree
per second (metrics.mesh_degree) counts the links; the report's overlay
pictures need the links themselves at a few moments (the workload's start,
and after each churn event), to draw the meshes apart from the other
connections. Both read one replay, `mesh_link_changes`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from node.trace.vocab import GRAFT, LEAVE, PRUNE, REMOVE_PEER

NS = 1_000_000_000
# a run with more churn instants than this gets pictures after the first ones only
MAX_CHURN_SNAPSHOTS = 8

MeshLink = tuple[str, str, str]  # node, topic, peer: `peer` is in `node`'s mesh of `topic`


@dataclass(frozen=True)
class Snapshot:
    """A moment the mesh is pictured at: `t_ns` on the run's clock."""

    t_ns: int
    label: str


def mesh_link_changes(rows: pd.DataFrame, resets: list[tuple[str, int]]) -> dict[MeshLink, list[tuple[int, int, int]]]:
    """Per mesh link, its state changes (ts, seq, 1 in the mesh / 0 out),
    unsorted: GRAFT adds the peer, PRUNE removes it, REMOVE_PEER removes the
    peer from every topic's mesh, LEAVE empties the topic's mesh, and a reset
    (node_down: `resets`, seq -1) empties all of the node's meshes.
    `rows` are the structure events (node, type, topic, peer, ts, seq)."""
    changes: dict[MeshLink, list[tuple[int, int, int]]] = defaultdict(list)
    for node, typ, topic, peer, ts, seq in rows[rows["type"].isin([GRAFT, PRUNE])].itertuples(index=False):
        changes[(node, topic, peer)].append((int(ts), int(seq), 1 if typ == GRAFT else 0))
    by_node_peer: dict[tuple, list] = defaultdict(list)
    by_node_topic: dict[tuple, list] = defaultdict(list)
    by_node: dict[str, list] = defaultdict(list)
    for link in list(changes):
        node, topic, peer = link
        by_node_peer[(node, peer)].append(link)
        by_node_topic[(node, topic)].append(link)
        by_node[node].append(link)
    for node, typ, topic, peer, ts, seq in rows[rows["type"].isin([REMOVE_PEER, LEAVE])].itertuples(index=False):
        links = by_node_peer.get((node, peer), ()) if typ == REMOVE_PEER else by_node_topic.get((node, topic), ())
        for link in links:
            changes[link].append((int(ts), int(seq), 0))
    for node, ts in resets:
        for link in by_node.get(node, ()):
            changes[link].append((int(ts), -1, 0))
    return changes


def snapshot_times(first_publish_ns: int | None, churn: list[dict[str, Any]], t0: int, t_end: int) -> list[Snapshot]:
    """The workload's start (the first publish), then, for each churn
    instant, the mesh as it stood just before the next churn instant (or
    `t_end`, the moment the teardown began: after it every router leaves and
    prunes): after the event, once the routers had all the time they got to
    repair it. At most MAX_CHURN_SNAPSHOTS churn instants."""
    out = []
    if first_publish_ns is not None:
        out.append(Snapshot(int(first_publish_ns), f"workload start (t = {(first_publish_ns - t0) / NS:g} s)"))
    instants = sorted({int(c["t_ns"]) for c in churn})
    for i, tc in enumerate(instants[:MAX_CHURN_SNAPSHOTS]):
        what = "; ".join(_churn_words(c) for c in churn if int(c["t_ns"]) == tc)
        until = instants[i + 1] - 1 if i + 1 < len(instants) else max(t_end - 1, tc)
        out.append(Snapshot(until, f"after {what} at {(tc - t0) / NS:g} s (t = {(until - t0) / NS:.3g} s)"))
    return out


def _churn_words(c: dict[str, Any]) -> str:
    nodes = list(c.get("nodes") or [])
    return f"{c.get('action')} {nodes[0] if len(nodes) == 1 else f'{len(nodes)} nodes'}"


def mesh_links_at(changes: dict[MeshLink, list[tuple[int, int, int]]], snapshots: list[Snapshot], t0: int) -> pd.DataFrame:
    """mesh_links.parquet: per snapshot, every link in some node's mesh at
    that instant (events at the exact instant count): snapshot (its index),
    t_s, node, topic, peer."""
    rows = []
    ordered = {link: sorted(evs) for link, evs in changes.items()}
    for k, snap in enumerate(snapshots):
        for (node, topic, peer), evs in ordered.items():
            state = 0
            for ts, _seq, new in evs:
                if ts > snap.t_ns:
                    break
                state = new
            if state:
                rows.append((k, (snap.t_ns - t0) / NS, node, topic, peer))
    return pd.DataFrame(rows, columns=["snapshot", "t_s", "node", "topic", "peer"]).astype(
        {"snapshot": "int32", "t_s": "float64", "node": "object", "topic": "object", "peer": "object"}
    )
