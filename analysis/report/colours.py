"""One colour per group, implementation or region, the same in every chart
of a report; one colour per run where runs (variants) are compared.

A run is coloured by what tells its nodes apart: the implementation in a
mixed run, else the group, else the region; a run of one kind of node is one
colour. The mapping is by sorted name, so the same names get the same
colours in every report.
"""

from __future__ import annotations

from dataclasses import dataclass

# matplotlib's tab10 without its grey, which the report keeps for "other" and nodes that were down
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
OTHER = "#7f7f7f"
ATTRIBUTES = ("implementation", "group", "region")


@dataclass(frozen=True)
class Colours:
    """`attribute` (implementation, group or region; None: one kind) and
    the colour of each of its values; `of` gives a node's."""

    attribute: str | None
    by_value: dict[str, str]
    node_value: dict[str, str]

    def of(self, node: str) -> str:
        return self.by_value.get(self.node_value.get(node, ""), PALETTE[0])

    def value(self, node: str) -> str:
        return self.node_value.get(node, "")


def for_nodes(topology_nodes: list[dict]) -> Colours:
    for attr in ATTRIBUTES:
        values = {str(n["name"]): str(n.get(attr)) for n in topology_nodes if n.get("name") and n.get(attr)}
        distinct = sorted(set(values.values()))
        if len(distinct) >= 2:
            return Colours(attr, {v: palette(i) for i, v in enumerate(distinct)}, values)
    return Colours(None, {}, {})


def palette(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# runs (variants) compared: matplotlib's Dark2, a family apart from the groups' tab10
RUN_PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


def run_colour(i: int) -> str:
    return RUN_PALETTE[i % len(RUN_PALETTE)]
