"""The report's "Under attack" section, for a run with sybils (issue 39):
how far the sybils got into the honest meshes, and whether the honest
nodes' scores told them apart. An eclipse can leave delivery whole (gossip
from honest peers outside the mesh fills in), so these pictures, not the
delivery figures, show whether a router resisted (docs/metrics.md, "Under
attack")."""

from __future__ import annotations

from analysis.honest import victim_names
from analysis.report.charts import _marker_caption, _markers, _t
from analysis.report.data import RunData
from analysis.report.specs import Figure, Line, XYChart

HONEST, SYBIL, VICTIM = "#2ca02c", "#d62728", "#9467bd"
MAX_VICTIM_LINES = 20


def figures(d: RunData) -> list[Figure | None]:
    return [mesh_sybil_share(d), scores_by_side(d)]


def mesh_sybil_share(d: RunData) -> Figure | None:
    samples = d.table("mesh_sybils")
    if not len(samples):
        return None
    samples = samples[samples["mesh"] > 0].assign(share=lambda f: f["sybils"] / f["mesh"])
    g = samples.groupby("t_s")["share"]
    lines = [Line("honest nodes: mean", _t(g.mean().index), _t(g.mean().values), HONEST),
             Line("honest nodes: max", _t(g.max().index), _t(g.max().values), HONEST, dashed=True)]
    victims = sorted(set(samples["node"]) & victim_names(d.run.topology_nodes()))
    for i, victim in enumerate(victims[:MAX_VICTIM_LINES]):
        v = samples[samples["node"] == victim].groupby("t_s")["share"].mean()
        lines.append(Line("victims" if i == 0 else "", _t(v.index), _t(v.values), VICTIM, step=True,
                          faint=len(victims) > 1))
    s = d.summary
    caption = (f"Share of sybils in each honest node's mesh, per second (metrics/mesh_sybils.parquet). Over the "
               f"workload: honest mean {_fmt(s.get('mesh_sybil_fraction_mean'))}, at the end "
               f"{_fmt(s.get('mesh_sybil_fraction_end'))}")
    if victims:
        caption += (f"; victims mean {_fmt(s.get('victim_mesh_sybil_fraction_mean'))}, at the end "
                    f"{_fmt(s.get('victim_mesh_sybil_fraction_end'))}, all-sybil mesh in "
                    f"{_fmt(s.get('victim_mesh_all_sybil_share'))} of their samples")
    return Figure(XYChart(f"r{d.index}-sybilmesh", "Sybils in honest meshes", "time (s)", "sybils / mesh peers",
                          tuple(lines), _markers(d), (0.0, d.duration_s), (0, 1.05)),
                  caption + ". " + _marker_caption(d))


def scores_by_side(d: RunData) -> Figure | None:
    sc = d.table("sybil_scores")
    if not len(sc):
        return None
    lines = []
    for side, colour in (("honest", HONEST), ("sybil", SYBIL)):
        f = sc[sc["side"] == side]
        if len(f):
            lines += [Line(f"{side} peers: p50", _t(f["t_s"]), _t(f["p50"]), colour),
                      Line(f"{side} peers: p10, p90", _t(f["t_s"]), _t(f["p10"]), colour, dashed=True),
                      Line("", _t(f["t_s"]), _t(f["p90"]), colour, dashed=True)]
    return Figure(XYChart(f"r{d.index}-sybilscores", "Scores honest nodes gave sybils and honest peers", "time (s)",
                          "score", tuple(lines), _markers(d), (0.0, d.duration_s)),
                  "Every score an honest node recorded for a connected peer at a heartbeat (scores/*.csv), per "
                  "second and side of the peer (metrics/sybil_scores.parquet). " + _marker_caption(d))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
