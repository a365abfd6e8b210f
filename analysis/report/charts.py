"""A run's metrics as chart specs: one function per chart, each returning a
Figure (analysis/report/specs.py). Adding a chart to a run's "Charts" is
adding a function here and its name to RUN_CHARTS; `comparison` holds the
charts over several runs (variants)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable

import numpy as np
import pandas as pd

from analysis.report.colours import Colours, palette, run_colour
from analysis.report.data import RunData, churn_marks
from analysis.report.specs import NUMBERED_MARKERS, Bars, BarChart, Figure, Line, Marker, Panels, XYChart

# control entries, each its own colour in every chart of the report
CONTROL = {"graft": "#2ca02c", "prune": "#d62728", "ihave": "#1f77b4", "iwant": "#ff7f0e"}
P50, P99, DEGREE = "#1f77b4", "#d62728", "#9467bd"
MAX_REACH_LINES = 200
REACH_POINTS = 201


def _t(values) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _markers(d: RunData) -> tuple[Marker, ...]:
    return tuple(Marker(x, label) for x, label in churn_marks(d))


def _marker_caption(d: RunData) -> str:
    marks = churn_marks(d)
    if not marks:
        return ""
    if len(marks) > NUMBERED_MARKERS:
        actions = Counter(label.split(" ", 1)[0] for _, label in marks)
        kinds = ", ".join(f"{n:,} {action}" for action, n in sorted(actions.items()))
        return (f"Ticks on the top edge, churn: {len(marks):,} events ({kinds}) from {marks[0][0]:g} to "
                f"{marks[-1][0]:g} s; events.jsonl lists each.")
    return "Dashed lines, churn: " + "; ".join(f"{i} = {label} at {x:g} s" for i, (x, label) in enumerate(marks, 1)) + "."


def latency_cdf(d: RunData, colours: Colours) -> Figure:
    cdf = d.table("latency_cdf")
    lines = (Line("", _t(cdf["latency_ms"]), _t(cdf["quantile"]), P50, step=True),) if len(cdf) else ()
    return Figure(XYChart(f"r{d.index}-cdf", "Latency CDF", "latency to a recipient (ms)",
                          "fraction of deliveries", lines, ylim=(0, 1.02)),
                  "Every delivery to an expected recipient: first delivery minus publish time.")


def delivery_ratio_over_time(d: RunData, colours: Colours) -> Figure:
    tsd = d.table("timeseries_delivery")
    lines = (Line("", _t(tsd["t_s"]), _t(tsd["delivery_ratio"]), "#2ca02c"),) if len(tsd) else ()
    return Figure(XYChart(f"r{d.index}-ratio", "Delivery ratio by publish second", "publish time (s)",
                          "delivery ratio", lines, _markers(d), (0.0, d.duration_s), (0, 1.05)),
                  _marker_caption(d))


def latency_over_time(d: RunData, colours: Colours) -> Figure:
    tsd = d.table("timeseries_delivery")
    lines = ((Line("p50", _t(tsd["t_s"]), _t(tsd["latency_p50_ms"]), P50),
              Line("p99", _t(tsd["t_s"]), _t(tsd["latency_p99_ms"]), P99)) if len(tsd) else ())
    return Figure(XYChart(f"r{d.index}-lat", "Latency by publish second", "publish time (s)", "latency (ms)",
                          lines, _markers(d), (0.0, d.duration_s)), _marker_caption(d))


def duplicates_per_message(d: RunData, colours: Colours) -> Figure:
    dh = d.table("duplicates_hist")
    cats = tuple(str(int(x)) for x in dh["duplicates"]) if len(dh) else ()
    bars = (Bars("", _t(dh["messages"]), "#8c564b"),) if len(dh) else ()
    return Figure(BarChart(f"r{d.index}-dups", "Duplicates per message", "duplicates of a message",
                           "messages", cats, bars))


def control_over_time(d: RunData, colours: Colours) -> Figure:
    tsc = d.table("timeseries_control")
    lines: tuple[Line, ...] = ()
    if len(tsc):  # seconds without any event are zeros, not gaps
        full = pd.RangeIndex(int(tsc["t_s"].min()), int(tsc["t_s"].max()) + 1, name="t_s")
        tsc = tsc.set_index("t_s").reindex(full, fill_value=0).reset_index()
        lines = tuple(Line(k.upper(), _t(tsc["t_s"]), _t(tsc[k]), c, step=True) for k, c in CONTROL.items())
    return Figure(XYChart(f"r{d.index}-ctl", "Control entries sent per second", "time (s)",
                          "entries per second", lines, _markers(d), (0.0, d.duration_s)), _marker_caption(d))


def mesh_degree_distribution(d: RunData, colours: Colours) -> Figure:
    mh = d.table("mesh_degree_hist")
    cats: tuple[str, ...] = ()
    bars: tuple[Bars, ...] = ()
    if len(mh):
        full = range(int(mh["degree"].min()), int(mh["degree"].max()) + 1)
        counts = dict(zip(mh["degree"].astype(int), mh["samples"]))
        cats = tuple(str(k) for k in full)
        bars = (Bars("", tuple(float(counts.get(k, 0)) for k in full), DEGREE),)
    return Figure(BarChart(f"r{d.index}-meshd", "Mesh degree distribution (1 s samples)", "mesh degree",
                           "samples (node-seconds)", cats, bars))


def mesh_degree_over_time(d: RunData, colours: Colours) -> Figure:
    mesh = d.table("mesh_degree")
    lines: tuple[Line, ...] = ()
    if len(mesh):
        g = mesh.groupby("t_s")["degree"]
        lines = (Line("mean", _t(g.mean().index), _t(g.mean().values), DEGREE),
                 Line("min", _t(g.min().index), _t(g.min().values), "#7f7f7f", dashed=True),
                 Line("max", _t(g.max().index), _t(g.max().values), "#17becf", dashed=True))
    return Figure(XYChart(f"r{d.index}-mesht", "Mesh degree over time", "time (s)", "mesh degree (peers)",
                          lines, _markers(d), (0.0, d.duration_s)), _marker_caption(d))


def per_node_load(d: RunData, colours: Colours) -> Figure:
    nodes = d.table("nodes")
    basis = (d.summary.get("load") or {}).get("basis", "bytes_sent")
    unit = "bytes" if basis == "bytes_sent" else "RPCs"
    cats: tuple[str, ...] = ()
    bars: tuple[Bars, ...] = ()
    if len(nodes) and basis in nodes:
        ns = nodes.sort_values(basis, ascending=False)
        cats = tuple(str(n) for n in ns["node"])
        bars = (Bars("", _t(ns[basis]), palette(0), tuple(colours.of(n) for n in cats)),)
    return Figure(BarChart(f"r{d.index}-load", f"Per-node load ({basis.replace('_', ' ')})", "nodes, most loaded first",
                           f"{unit} sent", cats, bars, tuple(colours.by_value.items())))


def reach_curves(d: RunData) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Per message with expected recipients (in publish order): the fraction
    of them that had it, read on a grid of REACH_POINTS times since its
    publish (0 to the run's slowest delivery). (grid, curves, messages)."""
    dl, msgs = d.table("deliveries"), d.table("messages")
    if not len(dl) or not len(msgs):
        return np.zeros(0), np.zeros((0, 0)), msgs
    got = dl[dl["delivered"]]
    horizon = float(got["latency_ms"].max()) if len(got) else 0.0
    grid = np.linspace(0.0, max(horizon, 1.0), REACH_POINTS)
    lat_of = {m: np.sort(g.to_numpy()) for m, g in got.groupby("msg")["latency_ms"]}
    with_exp = msgs[msgs["expected"] > 0].sort_values("publish_ts")
    curves = np.array([np.searchsorted(lat_of.get(m, np.array([])), grid, side="right") / n
                       for m, n in zip(with_exp["msg"], with_exp["expected"])]).reshape(len(with_exp), len(grid))
    return grid, curves, with_exp


def reached_over_time(d: RunData, colours: Colours) -> Figure:
    """Per message: the fraction of its expected recipients that had it, by
    time since its publish; one faint line per message (at most
    MAX_REACH_LINES, evenly chosen) in its publisher's colour, the median
    over all messages in black."""
    grid, curves, with_exp = reach_curves(d)
    total = len(curves)
    keep = set(np.linspace(0, total - 1, min(total, MAX_REACH_LINES)).round().astype(int)) if total else set()
    lines = [Line("_", _t(grid), _t(ys), colours.of(list(pubs)[0] if len(pubs) else ""), step=True, faint=True)
             for i, (pubs, ys) in enumerate(zip(with_exp["publishers"], curves)) if i in keep]
    if total:
        lines.append(Line("median", _t(grid), _t(np.median(curves, axis=0)), "#111827", step=True))
    whose = f", coloured by its publisher's {colours.attribute}" if colours.attribute else ""
    sample = f" ({len(keep)} of {total} messages, evenly spread in publish time)" if len(keep) < total else ""
    return Figure(XYChart(f"r{d.index}-reach", "Fraction of subscribers reached", "time since publish (ms)",
                          "fraction of expected recipients", tuple(lines), ylim=(0, 1.02)),
                  f"One faint line per message{sample}{whose}; black: the median over messages.")


PANEL_TITLE_CHARS = 28  # a third of the page at the charts' title size


def wrapped(name: str, width: int = PANEL_TITLE_CHARS) -> str:
    """A long implementation name ("image:REPO/NAME:TAG") on lines of at
    most `width` characters, broken after its / and : separators, so side by
    side panel titles do not run into each other."""
    lines = [""]
    for part in re.findall(r"[^/:]*[/:]?", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(line for line in lines if line)


def implementation_panels(d: RunData, colours: Colours) -> Figure | None:
    """Mixed runs: each implementation's latency CDF as receivers, side by side."""
    if colours.attribute != "implementation":
        return None
    dl = d.table("deliveries")
    got = dl[dl["delivered"]] if len(dl) else dl
    charts = []
    for impl, colour in colours.by_value.items():
        lat = sorted(float(x) for n, x in zip(got.get("node", []), got.get("latency_ms", [])) if colours.value(n) == impl)
        lines = (Line(impl, (0.0, *lat), (0.0, *(k / len(lat) for k in range(1, len(lat) + 1))), colour, step=True),
                 ) if lat else ()
        charts.append(XYChart(f"r{d.index}-impl-{len(charts)}", wrapped(impl), "latency (ms)",
                              "fraction of its deliveries", lines, ylim=(0, 1.02)))
    return Figure(Panels(f"r{d.index}-impl", "Latency CDF per implementation (as receivers)", tuple(charts)),
                  "Each panel: the deliveries to that implementation's nodes; the table above has the figures.")


def scores_over_time(d: RunData, colours: Colours) -> Figure | None:
    """Routers that score (v1.1, v1.2): the distribution of every peer score
    recorded in each second; none without score files."""
    sc = d.table("scores")
    if not len(sc):
        return None
    xs = _t(sc["t_s"])
    lines = (Line("min", xs, _t(sc["min"]), "#7f7f7f", dashed=True),
             Line("p10", xs, _t(sc["p10"]), "#17becf"),
             Line("p50", xs, _t(sc["p50"]), P50),
             Line("p90", xs, _t(sc["p90"]), "#9467bd"),
             Line("max", xs, _t(sc["max"]), "#7f7f7f", dashed=True))
    return Figure(XYChart(f"r{d.index}-scores", "Peer scores over time", "time (s)", "score", lines, _markers(d),
                          (0.0, d.duration_s)),
                  "Every score a node recorded for a connected peer at a heartbeat (scores/*.csv), per second: "
                  "its distribution. " + _marker_caption(d))


def idontwant_savings(d: RunData, colours: Colours) -> Figure | None:
    """v1.2: bytes sent per second beside the most IDONTWANT can have kept
    off the wire in it (ids received x message size); none without IDONTWANT."""
    tsc, idw = d.table("timeseries_control"), d.summary.get("idontwant") or {}
    size = idw.get("message_bytes")
    if not len(tsc) or not idw.get("ids_received") or size is None:
        return None
    full = pd.RangeIndex(int(tsc["t_s"].min()), int(tsc["t_s"].max()) + 1, name="t_s")
    tsc = tsc.set_index("t_s").reindex(full, fill_value=0).reset_index()
    xs = _t(tsc["t_s"])
    lines = (Line("bytes sent", xs, _t(tsc["bytes"]), "#1f77b4", step=True),
             Line("saved, at most", xs, _t(tsc["idontwant_ids_received"] * size), "#2ca02c", step=True))
    return Figure(XYChart(f"r{d.index}-idontwant", "IDONTWANT savings per second", "time (s)", "bytes per second",
                          lines, _markers(d), (0.0, d.duration_s)),
                  f"Green: message ids received in IDONTWANTs x the {size}-byte message size, an upper bound on the "
                  "bytes they kept off the wire (docs/metrics.md, IDONTWANT). " + _marker_caption(d))


def mesh_churn(d: RunData, colours: Colours) -> Figure | None:
    """GRAFT and PRUNE trace events (mesh changes) per node, by minute of the run."""
    ch = d.table("mesh_churn")
    if not len(ch):
        return None
    n = max(1, int(d.summary.get("nodes") or 1))
    per_minute = ch.groupby("minute")[["grafts", "prunes"]].sum()
    full = range(int(per_minute.index.min()), int(per_minute.index.max()) + 1)
    per_minute = per_minute.reindex(full, fill_value=0)
    cats = tuple(f"{m}-{m + 1}" for m in full)
    bars = (Bars("GRAFT", _t(per_minute["grafts"] / n), CONTROL["graft"]),
            Bars("PRUNE", _t(per_minute["prunes"] / n), CONTROL["prune"]))
    return Figure(BarChart(f"r{d.index}-churn", "Mesh churn per node per minute", "minute of the run",
                           "mesh changes per node", cats, bars),
                  f"GRAFT / PRUNE trace events (peers added to / removed from a mesh) in each minute, over the "
                  f"run's {n} nodes; a last partial minute counts as a whole one.")


RUN_CHARTS: tuple[Callable[[RunData, Colours], Figure | None], ...] = (
    latency_cdf, delivery_ratio_over_time, latency_over_time, duplicates_per_message,
    control_over_time, mesh_degree_distribution, mesh_degree_over_time, per_node_load,
    scores_over_time, idontwant_savings, mesh_churn,
)


def comparison(datas: list[RunData]) -> list[Figure]:
    """Variants (or any runs) compared: one colour per run in every chart."""
    cdf, ratio, mesh, reach = [], [], [], []
    for i, d in enumerate(datas):
        name, c = d.run.name, run_colour(i)
        grid, curves, _ = reach_curves(d)
        if len(curves):
            reach.append(Line(name, _t(grid), _t(np.median(curves, axis=0)), c, step=True))
        if len(t := d.table("latency_cdf")):
            cdf.append(Line(name, _t(t["latency_ms"]), _t(t["quantile"]), c, step=True))
        if len(t := d.table("timeseries_delivery")):
            ratio.append(Line(name, _t(t["t_s"]), _t(t["delivery_ratio"]), c))
        if len(t := d.table("mesh_degree")):
            g = t.groupby("t_s")["degree"].mean()
            mesh.append(Line(name, _t(g.index), _t(g.values), c))
    return [
        Figure(XYChart("cmp-cdf", "Latency CDF, all runs", "latency to a recipient (ms)", "fraction of deliveries",
                       tuple(cdf), ylim=(0, 1.02))),
        Figure(XYChart("cmp-ratio", "Delivery ratio by publish second, all runs", "publish time (s)",
                       "delivery ratio", tuple(ratio), ylim=(0, 1.05))),
        Figure(XYChart("cmp-mesh", "Mean mesh degree, all runs", "time (s)", "mesh degree (peers)", tuple(mesh))),
        Figure(XYChart("cmp-reach", "Fraction of subscribers reached, all runs", "time since publish (ms)",
                       "fraction of expected recipients", tuple(reach), ylim=(0, 1.02)),
               "Per run, the median over its messages."),
    ]
