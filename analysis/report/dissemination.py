"""How one message spread, as a picture: its first-delivery tree
(first_deliveries.parquet, analysis/spread.py) for the median and the
slowest message, by time to its last recipient.

The tree is drawn against time: a node sits at the time it first had the
message (ms after the publish), joined to the peer it first got it from;
rows are in depth-first order, so a subtree is a band. The bars beside it
count recipients per hop.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from analysis.report.colours import Colours, palette
from analysis.report.data import RunData
from analysis.report.specs import BarChart, Bars, Edges, Figure, GraphChart, NodeStyle

LABELS_UP_TO = 40  # nodes named in a tree of at most this many


def chosen_messages(d: RunData) -> list[tuple[str, str]]:
    """(what, msg): the message with the median time to its last recipient,
    and the slowest, among messages delivered to someone."""
    msgs = d.table("messages")
    if not len(msgs) or "latency_max_ms" not in msgs:
        return []
    ranked = msgs[msgs["latency_max_ms"].notna()].sort_values(["latency_max_ms", "msg"])
    if not len(ranked):
        return []
    median = ranked.iloc[(len(ranked) - 1) // 2]
    slowest = ranked.iloc[-1]
    out = [("median", str(median["msg"]))]
    if slowest["msg"] != median["msg"]:
        out.append(("slowest", str(slowest["msg"])))
    return out


def tree_pictures(d: RunData, colours: Colours) -> list[Figure]:
    first = d.table("first_deliveries")
    msgs = d.table("messages")
    if not len(first):
        return []
    out = []
    for what, msg in chosen_messages(d):
        row = msgs[msgs["msg"] == msg].iloc[0]
        out.append(_tree(d, colours, what, msg, first[first["msg"] == msg], row))
    return out


def _tree(d: RunData, colours: Colours, what: str, msg: str, rows: pd.DataFrame, m) -> Figure:
    publish_ts = int(m["publish_ts"])
    publishers = [str(p) for p in m["publishers"]]
    at = {p: 0.0 for p in publishers}
    parent: dict[str, str] = {}
    hops: dict[str, int] = {p: 0 for p in publishers}
    for node, ts, frm, h in zip(rows["node"], rows["deliver_ts"], rows["from_peer"], rows["hops"]):
        node = str(node)
        if node in at:  # a publisher's own delivery
            continue
        at[node] = (int(ts) - publish_ts) / 1e6
        if frm is not None:
            parent[node] = str(frm)
        if not pd.isna(h):
            hops[node] = int(h)
    dl = d.table("deliveries")
    expected = set(dl.loc[dl["msg"] == msg, "node"].astype(str)) if len(dl) else set(at)
    # nodes not expected of it (down or unsubscribed at the publish) that passed it to no one: left out,
    # or a node that had it on restarting, seconds later, squeezes the whole tree into the left edge
    senders = set(parent.values())
    late = {n for n in at if n not in expected and n not in publishers and n not in senders}
    for n in late:
        at.pop(n)
        parent.pop(n, None)
    children: dict[str, list[str]] = defaultdict(list)
    for child, par in parent.items():
        children[par].append(child)
    roots = publishers + sorted(n for n in at if n not in parent and n not in publishers)
    order: list[str] = []
    for r in roots:  # depth first, earliest child first
        stack = [r]
        while stack:
            n = stack.pop()
            if n in order:
                continue
            order.append(n)
            stack.extend(sorted(children.get(n, ()), key=lambda c: (-at.get(c, 0.0), c)))
    positions = {n: (at.get(n, 0.0), -float(i)) for i, n in enumerate(order)}
    pairs = tuple((par, child) for child, par in parent.items() if par in positions)
    shown = [n for n in order if n not in publishers and n in expected]
    if colours.attribute:
        styles = tuple(NodeStyle(v, tuple(n for n in shown if colours.value(n) == v), c)
                       for v, c in colours.by_value.items())
    else:
        styles = (NodeStyle("recipient", tuple(shown), palette(0)),)
    styles += (NodeStyle("publisher", tuple(publishers), "#111827"),)
    unexpected = tuple(n for n in order if n not in publishers and n not in expected)
    if unexpected:
        styles += (NodeStyle("not expected (down or not subscribed at the publish)", unexpected, hollow=True),)
    per_hop = defaultdict(int)
    for n, h in hops.items():
        if n not in publishers:
            per_hop[h] += 1
    depth = max(per_hop, default=0)
    side = BarChart(f"r{d.index}-hops-{what}", "recipients per hop", "hops from the publisher", "recipients",
                    tuple(str(h) for h in range(1, depth + 1)),
                    (Bars("", tuple(float(per_hop.get(h, 0)) for h in range(1, depth + 1)), "#6b7280"),))
    title = (f"Spread of the {what} message: {int(m['delivered'])} of {int(m['expected'])} expected recipients, "
             f"{depth} hops, {float(m['latency_max_ms']):.4g} ms to the last")
    which = (f"The {what} message by time to its last expected recipient: {msg[:16]}…, published by "
             f"{', '.join(publishers)} at t = {float(m['publish_t_s']):.4g} s. "
             + (f"{len(late)} nodes not expected of it (down or not subscribed at the publish) had it later "
                "and passed it on to no one: not drawn. " if late else ""))
    labels = {n: f"{n} ({hops[n]})" if n in hops else n for n in order} if len(order) <= LABELS_UP_TO else {}
    return Figure(GraphChart(f"r{d.index}-tree-{what}", title, positions,
                             (Edges("first delivered from", pairs, "#9ca3af", 0.8),), styles,
                             xlabel="time since publish (ms)", node_labels=labels, wide=True, side=side),
                  which + "Each node at the time it first had the message, joined to the peer it came from "
                  "(trace.proto receivedFrom of its first DELIVER_MESSAGE); rows depth first"
                  + (". Labels: node (hops)." if labels else "."))
