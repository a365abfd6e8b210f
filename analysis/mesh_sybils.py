"""The sybil share of honest meshes: how far an attack got into the honest
nodes' meshes, second by second (the hardening report's "share of sybils in
honest meshes"; issue 39's `mesh_sybil_fraction`).

Why a module of its own: an eclipse is a fact about meshes, not about
deliveries. A victim can still get every message by gossip from honest
peers outside its mesh while every peer in its mesh is a sybil; delivery
figures alone cannot tell that apart from an attack that failed. This
replays the same mesh links as the mesh degree (analysis/mesh.py,
`mesh_link_changes`) and counts, per honest node and topic, the peers in its
mesh that topology.json marks as sybils.

Figures (docs/metrics.md, "Under attack") are over the workload window:
the samples at t0 + k s from the first publish until the teardown began."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from analysis.mesh import MeshLink

NS = 1_000_000_000
COLUMNS = {"t_s": "int64", "node": "object", "topic": "object", "mesh": "int32", "sybils": "int32"}


def mesh_sybil_samples(
    changes: dict[MeshLink, list[tuple[int, int, int]]], sybils: set[str], t0: int, t_end: int
) -> pd.DataFrame:
    """mesh_sybils.parquet: per honest node and topic with a mesh, and per
    second k from 0 to the end, its mesh size and how many of those peers are
    sybils, as they stood at t0 + k s (events at that instant count).
    Empty when the run has no sybils."""
    if not sybils:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in COLUMNS.items()})
    k_end = max(0, -(-(t_end - t0) // NS))
    sample_ts = t0 + np.arange(k_end + 1, dtype=np.int64) * NS
    steps: dict[tuple[str, str], list[tuple[int, int, int, int]]] = defaultdict(list)
    for (node, topic, peer), evs in changes.items():
        if node in sybils:
            continue
        state = 0
        for ts, seq, new in sorted(evs):
            if new != state:
                steps[(node, topic)].append((ts, seq, new - state, int(peer in sybils)))
                state = new
    frames = []
    for (node, topic), st in sorted(steps.items()):
        st.sort()
        ts = np.array([s[0] for s in st], dtype=np.int64)
        mesh = np.cumsum([s[2] for s in st])
        syb = np.cumsum([s[2] * s[3] for s in st])
        idx = np.searchsorted(ts, sample_ts, side="right") - 1
        have = idx >= 0
        frames.append(pd.DataFrame({
            "t_s": np.arange(k_end + 1)[have], "node": node, "topic": topic,
            "mesh": mesh[idx[have]], "sybils": syb[idx[have]],
        }))
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in COLUMNS.items()})
    return pd.concat(frames, ignore_index=True).astype(COLUMNS)


def mesh_sybil_summary(
    samples: pd.DataFrame, sybils: set[str], victims: set[str], first_publish_ns: int | None, t0: int, teardown: int
) -> dict[str, Any]:
    """summary.json's `mesh_sybil_fraction_max` and `_mean` over every honest
    node's non-empty mesh samples in the workload window, and the same of
    the victims (`victim_mesh_sybil_fraction_*`) with the share of their
    samples whose mesh held sybils only (`victim_mesh_all_sybil_share`): the
    mesh eclipsed. `_end`: the mean share at the window's last sample, where
    the attack left the meshes. Null without sybils (or victims) or without
    a publish."""
    names = ("mesh_sybil_fraction_max", "mesh_sybil_fraction_mean", "mesh_sybil_fraction_end",
             "victim_mesh_sybil_fraction_max", "victim_mesh_sybil_fraction_mean", "victim_mesh_sybil_fraction_end",
             "victim_mesh_all_sybil_share")
    out: dict[str, Any] = dict.fromkeys(names)
    if not sybils or first_publish_ns is None:
        return out
    at = t0 + samples["t_s"].to_numpy(np.int64) * NS
    window = samples[(at >= first_publish_ns) & (at < teardown) & (samples["mesh"] > 0)]
    share = window["sybils"] / window["mesh"]
    last = window["t_s"] == window["t_s"].max()
    for prefix, among in (("", pd.Series(True, index=window.index)), ("victim_", window["node"].isin(victims))):
        if among.any():
            out[f"{prefix}mesh_sybil_fraction_max"] = float(share[among].max())
            out[f"{prefix}mesh_sybil_fraction_mean"] = float(share[among].mean())
            out[f"{prefix}mesh_sybil_fraction_end"] = float(share[among & last].mean()) if (among & last).any() else None
    if out["victim_mesh_sybil_fraction_mean"] is not None:
        out["victim_mesh_all_sybil_share"] = float((share[window["node"].isin(victims)] == 1.0).mean())
    return out
