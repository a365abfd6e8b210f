"""The HTML report: one self-contained file (inline CSS, inline SVG charts,
no script), so it opens offline, with JavaScript off, attaches to a CI job
and never fetches anything (docs/report.md).

Split by concept:
    data.py           what the report reads from a run directory
    charts.py         metrics -> chart specs (one function per chart)
    attack.py         the "Under attack" section of a run with sybils
    tree.py           a broadcast tree's figures (episub): side by side, and per run
    overlay.py        the overlay, meshes and per-node figures as graph specs
    dissemination.py  a message's first-delivery tree as a graph spec
    specs.py          the spec vocabulary; colours.py: one colour per group
    draw.py           specs -> SVG (matplotlib)
    tables.py         banners and tables as values
    templates/        the page (Jinja2) and its CSS
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from analysis.report import attack, charts, colours, dissemination, overlay, tables, tree
from analysis.report.data import RunData, load
from analysis.report.draw import svg
from analysis.report.specs import Figure, GraphChart, Panels
from analysis.rundir import RunDir

TEMPLATES = Path(__file__).parent / "templates"
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _drawn(figs: list[Figure | None]) -> list[dict]:
    return [{"svg": svg(f.chart), "caption": f.caption,
             "wide": isinstance(f.chart, Panels) or (isinstance(f.chart, GraphChart) and f.chart.wide)}
            for f in figs if f is not None]


def _sections(d: RunData) -> list[tuple[str, str, list[dict]]]:
    c = colours.for_nodes(d.run.topology_nodes())
    out = []
    lay = overlay.layout(d, c)
    if lay is not None:
        out.append(("network", "The network: overlay, meshes and where the slow nodes are",
                    _drawn([*overlay.mesh_pictures(d, c, lay), *overlay.per_node_pictures(d, c, lay)])))
    out.append(("spread", "A message's spread",
                _drawn([charts.reached_over_time(d, c), *dissemination.tree_pictures(d, c)])))
    if d.summary.get("sybils"):
        out.append(("attack", "Under attack: sybils in honest meshes, and their scores", _drawn(attack.figures(d))))
    if d.summary.get("tree"):
        out.append(("tree", "The broadcast tree: active views, hops and repairs", _drawn([tree.active_view_degree(d)])))
    if (panels := charts.implementation_panels(d, c)) is not None:
        out.append(("implementations", "Per implementation", _drawn([panels])))
    out.append(("charts", "Charts", _drawn([chart(d, c) for chart in charts.RUN_CHARTS])))
    return out


def _run(d: RunData) -> dict:
    sections = _sections(d)
    return {
        "index": d.index, "name": d.run.name, "banners": tables.banners(d), "experiment": tables.experiment(d),
        "cards": tables.cards(d.summary), "summary": tables.summary(d.summary),
        "expectations": tables.expectations(d.summary), "implementations": tables.implementations(d.summary),
        "sections": sections, "recovery": tables.recovery(d.summary), "fidelity": tables.fidelity_tables(d),
        "nav": [*((sid, sid) for sid, _, _ in sections), ("summary", "summary"), ("recovery", "recovery"),
                ("fidelity", "fidelity"), ("experiment", "experiment")],
    }


def render_report(runs: list[RunDir]) -> str:
    datas = [load(r, i) for i, r in enumerate(runs)]
    multi = len(datas) > 1
    first = datas[0].summary
    subtitle = (f"{len(datas)} runs compared" if multi else
                f"{first.get('backend') or 'unknown backend'} · {tables.fmt(first.get('nodes'))} nodes · "
                f"{tables.fmt(first.get('messages'))} messages")
    comparison = None
    if multi:
        heads, rows = tables.comparison(datas)
        comparison = {"heads": heads, "rows": rows, "tree": tree.comparison(datas),
                      "figures": _drawn(charts.comparison(datas))}
    return _ENV.get_template("report.html.j2").render(
        names=", ".join(d.run.name for d in datas), subtitle=subtitle, comparison=comparison,
        runs=[_run(d) for d in datas], css=(TEMPLATES / "report.css").read_text(encoding="utf-8"),
        version=datas[0].run.manifest.get("version") or "",
    )
