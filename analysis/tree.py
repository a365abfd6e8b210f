"""The tree figures of a router that builds a broadcast tree (episub), from
its trace extension (tree/<node>.csv, node/trace/tree.py) beside the go
traces: hops per delivery and tree depth per message, eager against lazy
transmissions, repairs and their times, and the active-view degree over
time. go's trace format carries
none of hops, views or repairs, so these come from the extension; the
files grow with deliveries and view changes, and the driver reads them
with pandas. docs/metrics.md, "Tree figures", defines every one."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from node.trace import tree as ext

NS = 1_000_000_000
TYPES = {"time_ns": "int64", "event": "object", "topic": "object", "peer": "object", "message_id": "object",
         "hops": "float64", "link": "object"}
DEGREE_COLUMNS = {"t_s": "int64", "nodes": "int64", "mean": "float64", "random_mean": "float64",
                  "near_mean": "float64"}


def read_tree(run_path: Path) -> pd.DataFrame:
    """Every tree file's rows with the recording node (the file's stem), in
    each file's order; empty when the run has none. A row a kill cut short
    (no event or time) is left out."""
    frames = []
    for p in sorted((run_path / ext.TREE_DIR).glob("*.csv")):
        f = pd.read_csv(p, dtype={"topic": str, "peer": str, "message_id": str, "link": str, "event": str},
                        keep_default_na=False, na_values={"hops": [""], "time_ns": [""]})
        f = f[f["event"].isin(ext.EVENTS) & f["time_ns"].notna()]
        frames.append(f.assign(node=p.stem))
    if not frames:
        return pd.DataFrame({**{c: pd.Series([], dtype=t) for c, t in TYPES.items()},
                             "node": pd.Series([], dtype="object")})
    rows = pd.concat(frames, ignore_index=True)
    return rows.astype(TYPES)


def hops_and_depth(rows: pd.DataFrame) -> tuple[dict[str, Any], pd.DataFrame]:
    """Hops per delivery (the hopcount each received first copy came with:
    the node's depth in that message's tree) and, per message, the tree's
    depth (its deepest delivery) and its received deliveries
    (tree_messages.parquet)."""
    got = rows[(rows["event"] == ext.DELIVER) & (rows["hops"] > 0)]
    hops = got["hops"].to_numpy(dtype=np.int64)
    per_msg = (got.groupby("message_id")["hops"].agg(depth="max", deliveries="size").reset_index()
               .rename(columns={"message_id": "msg"}).astype({"depth": "int64", "deliveries": "int64"}))
    depth = per_msg["depth"].to_numpy(dtype=np.int64)
    figures = {
        "deliveries": int(len(hops)),
        "hops_mean": float(hops.mean()) if len(hops) else None,
        **{f"hops_{k}": _quantile(hops, q) for k, q in (("p50", 0.5), ("p90", 0.9))},
        "hops_max": int(hops.max()) if len(hops) else None,
        "depth_p50": _quantile(depth, 0.5),
        "depth_max": int(depth.max()) if len(depth) else None,
    }
    return figures, per_msg


def _quantile(values: np.ndarray, q: float) -> float | None:
    """numpy's default (linear) quantile; None for no values."""
    return float(np.quantile(values, q)) if len(values) else None


def repairs(rows: pd.DataFrame) -> dict[str, Any]:
    """GRAFTs sent for missing messages, and each repair: a (node, message)
    with at least one such GRAFT, repaired when the message then arrived;
    its time is from the missing mark (the first IHAVE announcing it) to the
    first delivery."""
    key = ["node", "message_id"]
    grafts = rows[rows["event"] == ext.GRAFT]
    asked = grafts[key].drop_duplicates()
    marked = rows[rows["event"] == ext.MISSING].groupby(key)["time_ns"].min().rename("marked")
    arrived = rows[rows["event"] == ext.DELIVER].groupby(key)["time_ns"].min().rename("arrived")
    r = asked.join(marked, on=key).join(arrived, on=key)
    done = r[r["arrived"].notna() & r["marked"].notna()]
    times = ((done["arrived"] - done["marked"]) / NS).to_numpy(dtype=np.float64)
    return {
        "grafts": int(len(grafts)),
        "repairs": int(len(r)),
        "repaired": int(len(done)),
        "unrepaired": int(r["arrived"].isna().sum()),
        "repair_p50_s": _quantile(times, 0.5),
        "repair_p90_s": _quantile(times, 0.9),
        "repair_max_s": float(times.max()) if len(times) else None,
    }


def active_view_degree(rows: pd.DataFrame, sampled: list[tuple[str, str, list[tuple[int, int]]]],
                       resets: list[tuple[str, int]], t0: int, t_end: int) -> pd.DataFrame:
    """Per node and topic, its active view rebuilt from neighbor_up and
    neighbor_down (emptied when the node is lost), sampled at t0 + k
    seconds inside its `sampled` intervals (node, topic, [(start, end)]:
    up and subscribed): the samples (t_s, node, topic, random, near)."""
    views = rows[rows["event"].isin((ext.NEIGHBOR_UP, ext.NEIGHBOR_DOWN))]
    by_key = {k: g for k, g in views.groupby(["node", "topic"], sort=False)}
    lost: dict[str, list[int]] = defaultdict(list)
    for node, ts in resets:
        lost[node].append(ts)
    k_end = max(0, math.ceil((t_end - t0) / NS))
    frames = []
    for node, topic, intervals in sampled:
        changes = by_key.get((node, topic))
        samples = _view_samples(changes, lost.get(node, []), t0, k_end)
        keep = [k for k in range(k_end + 1) if any(s <= t0 + k * NS < e for s, e in intervals)]
        frames.append(pd.DataFrame([(k, node, topic, *samples[k]) for k in keep],
                                   columns=["t_s", "node", "topic", "random", "near"]))
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["t_s", "node", "topic", "random", "near"]).astype(
            {"t_s": "int64", "random": "int64", "near": "int64"})
    return pd.concat(frames, ignore_index=True).astype({"t_s": "int64", "random": "int64", "near": "int64"})


def _view_samples(changes: pd.DataFrame | None, lost: list[int], t0: int, k_end: int) -> list[tuple[int, int]]:
    """(random, near) links at each t0 + k s: the view after every change
    and loss at or before that instant."""
    steps = [(int(ts), 0, "", "") for ts in lost]
    if changes is not None:
        steps += [(int(ts), 1, ev, peer + "\0" + link) for ts, ev, peer, link in
                  zip(changes["time_ns"], changes["event"], changes["peer"], changes["link"])]
    steps.sort(key=lambda s: (s[0], s[1]))
    view: dict[str, str] = {}
    out, i = [], 0
    for k in range(k_end + 1):
        while i < len(steps) and steps[i][0] <= t0 + k * NS:
            _ts, kind, ev, peer_link = steps[i]
            peer, _, link = peer_link.partition("\0")
            if kind == 0:
                view.clear()
            elif ev == ext.NEIGHBOR_UP:
                view[peer] = link
            else:
                view.pop(peer, None)
            i += 1
        randoms = sum(1 for link in view.values() if link == ext.RANDOM)
        out.append((randoms, len(view) - randoms))
    return out


def degree_over_time(samples: pd.DataFrame) -> pd.DataFrame:
    """tree_degree.parquet: per second, the nodes sampled and their mean
    active-view degree, random and near links."""
    if not len(samples):
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in DEGREE_COLUMNS.items()})
    s = samples.assign(degree=samples["random"] + samples["near"])
    g = s.groupby("t_s")
    out = pd.DataFrame({"nodes": g.size(), "mean": g["degree"].mean(), "random_mean": g["random"].mean(),
                        "near_mean": g["near"].mean()}).reset_index()
    return out.astype(DEGREE_COLUMNS)[list(DEGREE_COLUMNS)]


def degree_figures(samples: pd.DataFrame) -> dict[str, Any]:
    degree = (samples["random"] + samples["near"]).to_numpy(dtype=np.int64)
    return {
        "active_degree_mean": float(degree.mean()) if len(degree) else None,
        "active_degree_min": int(degree.min()) if len(degree) else None,
        "active_degree_max": int(degree.max()) if len(degree) else None,
        "active_random_mean": float(samples["random"].mean()) if len(degree) else None,
        "active_near_mean": float(samples["near"].mean()) if len(degree) else None,
    }


def sample_intervals(nodes: set[str], subscriptions: list[tuple[str, str, int, int]],
                     down: list[tuple[str, int, int]]) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """Per node of `nodes` and topic: the intervals it was subscribed and up."""
    downs: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for node, start, end in down:
        downs[node].append((start, end))
    out = []
    for node, topic, start, end in sorted(subscriptions):
        if node not in nodes:
            continue
        pieces = [(start, end)]
        for d_start, d_end in sorted(downs.get(node, ())):
            pieces = [q for s, e in pieces for q in ((s, min(e, d_start)), (max(s, d_end), e)) if q[0] < q[1]]
        out.append((node, topic, pieces))
    return out


def tree_summary(run_path: Path, per_node: pd.DataFrame, subscriptions: list[tuple[str, str, int, int]],
                 down: list[tuple[str, int, int]], resets: list[tuple[str, int]], span: tuple[int, int], out_dir: Path) -> dict[str, Any] | None:
    """summary.json's `tree` (None for a run without tree files), with
    tree_messages.parquet and tree_degree.parquet written. `span`: (t0, t_end)."""
    rows = read_tree(run_path)
    if not len(rows):
        return None
    t0, t_end = span
    hops, per_msg = hops_and_depth(rows)
    per_msg.to_parquet(out_dir / "tree_messages.parquet", index=False)
    nodes = set(rows["node"])
    samples = active_view_degree(rows, sample_intervals(nodes, subscriptions, down), resets, t0, t_end)
    degree_over_time(samples).to_parquet(out_dir / "tree_degree.parquet", index=False)
    mine = per_node[per_node["node"].isin(nodes)]
    eager, lazy = int(mine["msgs_sent"].sum()), int(mine["ihave_ids_sent"].sum())
    got = hops["deliveries"]
    return {
        "nodes": len(nodes),
        **hops,
        "eager_transmissions": eager,
        "lazy_ids": lazy,
        "eager_per_delivery": eager / got if got else None,
        "lazy_per_delivery": lazy / got if got else None,
        **repairs(rows),
        "neighbor_ups": int((rows["event"] == ext.NEIGHBOR_UP).sum()),
        "neighbor_downs": int((rows["event"] == ext.NEIGHBOR_DOWN).sum()),
        **degree_figures(samples),
    }
