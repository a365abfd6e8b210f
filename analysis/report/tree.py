"""The report's tree figures, for runs of a router that builds a broadcast
tree (episub; summary `tree`, docs/metrics.md "Tree figures"): a table
setting every run side by side with those figures, when the runs compared
differ in router, and each tree run's active-view degree over time. A
tree is judged by its depth, its eager against lazy traffic and how fast
it is repaired, which the delivery figures alone do not show."""

from __future__ import annotations

from typing import Any

from analysis.report.charts import _marker_caption, _markers, _t
from analysis.report.data import RunData
from analysis.report.specs import Figure, Line, XYChart
from analysis.report.tables import fmt

ALL, RANDOM, NEAR = "#1f77b4", "#2ca02c", "#ff7f0e"

# (label, flat summary key): the tree's own figures, then the ones every router has
ROWS = [
    ("router", "router"), ("delivery ratio", "delivery_ratio"),
    ("latency p50 / p99 (ms)", ("latency_p50_ms", "latency_p99_ms")),
    ("stretch p50 / p99", ("stretch_p50", "stretch_p99")),
    ("duplicates per delivery", "duplicates_per_delivery"),
    ("payload copies sent per delivery", "amplification"),
    ("hops per delivery p50 / p90 / max", ("tree_hops_p50", "tree_hops_p90", "tree_hops_max")),
    ("tree depth per message p50 / max", ("tree_depth_p50", "tree_depth_max")),
    ("eager: GOSSIP copies per delivery", "tree_eager_per_delivery"),
    ("lazy: IHAVE ids per delivery", "tree_lazy_per_delivery"),
    ("GRAFTs for missing messages", "tree_grafts"),
    ("repairs (repaired / never arrived)", ("tree_repaired", "tree_unrepaired")),
    ("time to repair p50 / max (s)", ("tree_repair_p50_s", "tree_repair_max_s")),
    ("nodes lost (never repaired)", ("repair_after_loss_losses", "repair_after_loss_unrepaired")),
    ("time to repair after a node lost p50 / max (s)", ("repair_after_loss_p50_s", "repair_after_loss_max_s")),
    ("lost nodes that fed others: children (never repaired)", ("subtree_repair_losses", "subtree_repair_children",
                                                                "subtree_repair_unrepaired")),
    ("their children's wait for a message p50 / max (s)", ("subtree_repair_p50_s", "subtree_repair_max_s")),
    ("that message's latency at the children p50 / max (ms)", ("subtree_repair_first_latency_p50_ms",
                                                                "subtree_repair_first_latency_max_ms")),
    ("active-view degree mean / random / near links", ("tree_active_degree_mean", "tree_active_random_mean",
                                                 "tree_active_near_mean")),
    ("mesh degree mean (episub: eager links)", "mesh_degree_mean"),
]


def router_of(d: RunData) -> str:
    """The run's router, or its routers joined (topology.json)."""
    return "+".join(sorted({str(n.get("router")) for n in d.run.topology_nodes()})) or "–"


def _cell(d: RunData, key: str | tuple[str, ...]) -> str:
    if key == "router":
        return router_of(d)
    if isinstance(key, tuple):
        return " / ".join(fmt(d.summary.get(k)) for k in key)
    return fmt(d.summary.get(key))


def comparison(datas: list[RunData]) -> list[tuple[str, list[str]]] | None:
    """The side-by-side rows, for runs of which at least one built a tree
    and whose routers differ; None otherwise."""
    if not any(d.summary.get("tree") for d in datas) or len({router_of(d) for d in datas}) < 2:
        return None
    return [(label, [_cell(d, key) for d in datas]) for label, key in ROWS]


def active_view_degree(d: RunData) -> Figure | None:
    f = d.table("tree_degree")
    tree: dict[str, Any] = d.summary.get("tree") or {}
    if not len(f):
        return None
    lines = (Line("active view", _t(f["t_s"]), _t(f["mean"]), ALL),
             Line("random links", _t(f["t_s"]), _t(f["random_mean"]), RANDOM, dashed=True),
             Line("near links", _t(f["t_s"]), _t(f["near_mean"]), NEAR, dashed=True))
    caption = (f"Mean active-view degree of the nodes up and subscribed, per second (metrics/tree_degree.parquet); "
               f"over the run {fmt(tree.get('active_degree_mean'))} (min {fmt(tree.get('active_degree_min'))}, "
               f"max {fmt(tree.get('active_degree_max'))}), {fmt(tree.get('neighbor_ups'))} neighbours up, "
               f"{fmt(tree.get('neighbor_downs'))} down. Hops per delivery p50 / p90 / max "
               f"{fmt(tree.get('hops_p50'))} / {fmt(tree.get('hops_p90'))} / {fmt(tree.get('hops_max'))}; "
               f"{fmt(tree.get('repaired'))} messages repaired by GRAFT")
    return Figure(XYChart(f"r{d.index}-activeview", "Active-view degree over time", "time (s)", "neighbours",
                          lines, _markers(d), (0.0, d.duration_s)),
                  caption + ". " + _marker_caption(d))
