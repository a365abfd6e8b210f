"""Chart specs to images: matplotlib draws every chart as an SVG element for
the page (docs/report.md says why matplotlib and inline SVG).

One house style for all charts: legends outside the plot area (they never
cover data), axes labelled with units, churn markers numbered on the top edge
(the caption says what each is; beyond NUMBERED_MARKERS they are ticks there,
which the caption counts), text kept as text (the page's fonts, smaller
files), and output that is the same bytes for the same input (no dates, ids
salted with the chart's id, which also keeps ids unique within the page).
"""

from __future__ import annotations

import io
import math
import re

import matplotlib

matplotlib.use("Agg")

from matplotlib import colormaps  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import EngFormatter, MaxNLocator  # noqa: E402

from analysis.report.specs import NUMBERED_MARKERS, BarChart, Chart, GraphChart, Panels, XYChart  # noqa: E402

# Every chart of one kind is drawn at one size (no tight bounding box), so its text reads alike
WIDTH_IN = 5.0  # a panel: half the page's width
HEIGHT_IN = 2.9
TITLE_LINE_IN = 0.19  # one more line of a bold 10 pt title
MARGINS = {"left": 0.15, "right": 0.78, "bottom": 0.19, "top": 0.86}  # the right fifth: the legend's place
WIDE_IN = 10.0  # a picture across the page
GRAPH_HEIGHT_IN = 5.2
MARKER_COLOUR = "#b45309"
# A set of more lines or points than this is drawn as an image inside the SVG (text and axes stay
# vector): thousands of SVG elements are what makes a big report slow to open
RASTER_ABOVE = 300
RASTER_DPI = 160
MAX_NAMED_BARS = 30  # bars named one by one up to this many
VALUE_MAP = "viridis"  # per-node figures on the overlay (latency, lag): one colour scale everywhere
# no <metadata> block: no date (same bytes for the same input), no links to RDF vocabularies
NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e5e7eb",
    "grid.linewidth": 0.6,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "svg.fonttype": "none",
    "font.family": "sans-serif",
}


def svg(chart: Chart) -> str:
    """The chart as an <svg> element (no XML prolog), class "chart", its id."""
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": chart.id}):
        fig = _draw(chart)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata=NO_METADATA, dpi=RASTER_DPI)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    # every id inside this SVG, and every reference to one, prefixed with the chart's id: matplotlib
    # numbers its groups (axes_1, line2d_1, ...) the same in every figure, and ids are the page's
    text = re.sub(r'(\sid=")([^"]+)"', lambda m: f'{m.group(1)}{chart.id}-{m.group(2)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{chart.id}-{m.group(1)})", text)
    text = re.sub(r'(href=")#([^"]+)"', lambda m: f'{m.group(1)}#{chart.id}-{m.group(2)}"', text)
    return re.sub(r"<svg ", f'<svg class="chart" id="{chart.id}" role="img" aria-label="{_attr(chart.title)}" ',
                  text, count=1)


def _attr(s: str) -> str:
    return s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _draw(chart: Chart) -> MplFigure:
    if isinstance(chart, XYChart):
        fig = MplFigure(figsize=(WIDTH_IN, HEIGHT_IN))
        fig.subplots_adjust(**MARGINS)
        _xy(fig.add_subplot(), chart)
    elif isinstance(chart, BarChart):
        fig = MplFigure(figsize=(WIDTH_IN, HEIGHT_IN))
        fig.subplots_adjust(**MARGINS)
        _bars(fig.add_subplot(), chart)
    elif isinstance(chart, Panels):
        n = max(len(chart.charts), 1)
        # a panel title of several lines (a long implementation name) gets room above the axes
        extra_in = TITLE_LINE_IN * max((c.title.count("\n") for c in chart.charts), default=0)
        height = HEIGHT_IN + 0.4 + extra_in
        fig = MplFigure(figsize=(WIDE_IN, height))
        fig.subplots_adjust(left=0.07, right=0.98, bottom=0.17 * (HEIGHT_IN + 0.4) / height,
                            top=1 - (0.20 * (HEIGHT_IN + 0.4) + extra_in) / height, wspace=0.12)
        axes = fig.subplots(1, n, sharex=True, sharey=True, squeeze=False)[0]
        for ax, c in zip(axes, chart.charts):
            _xy(ax, c, legend=False)
        fig.suptitle(chart.title, fontweight="bold", fontsize=10, x=0.07, ha="left")
    else:
        fig = MplFigure(figsize=(WIDE_IN, GRAPH_HEIGHT_IN) if chart.wide else (WIDTH_IN, WIDTH_IN * 0.85))
        _graph(fig, chart)
    return fig


def _xy(ax, c: XYChart, legend: bool = True) -> None:
    ax.set_title(c.title, loc="left", pad=14 if c.markers else 6)
    ax.set_xlabel(c.xlabel)
    ax.set_ylabel(c.ylabel)
    drawn = False
    for line in c.lines:
        if not line.xs:
            continue
        drawn = True
        kw = {"color": line.colour, "label": line.label if line.label and not line.label.startswith("_") else None,
              "linewidth": 0.7 if line.faint else 1.6, "alpha": 0.35 if line.faint else 1.0,
              "linestyle": "--" if line.dashed else "-"}
        if line.step:
            ax.step(line.xs, line.ys, where="post", **kw)
        else:
            ax.plot(line.xs, line.ys, marker="o" if len(line.xs) <= 40 and not line.faint else None,
                    markersize=2.5, **kw)
    if c.xlim:
        ax.set_xlim(*c.xlim)
    if c.ylim:
        ax.set_ylim(*c.ylim)
    if not drawn:
        _no_data(ax)
    if len(c.markers) > NUMBERED_MARKERS:
        ax.vlines([m.x for m in c.markers], 0.97, 1.0, transform=ax.get_xaxis_transform(), colors=MARKER_COLOUR,
                  linewidth=0.6, alpha=0.4, rasterized=len(c.markers) > RASTER_ABOVE)
    else:
        for i, m in enumerate(c.markers, 1):
            ax.axvline(m.x, color=MARKER_COLOUR, linestyle=(0, (4, 3)), linewidth=1.0)
            ax.text(m.x, 1.0, str(i), transform=ax.get_xaxis_transform(), color=MARKER_COLOUR, fontsize=8,
                    ha="center", va="bottom", fontweight="bold")
    if legend and any(line.label and not line.label.startswith("_") for line in c.lines if line.xs):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _bars(ax, c: BarChart) -> None:
    ax.set_title(c.title, loc="left")
    ax.set_xlabel(c.xlabel)
    ax.set_ylabel(c.ylabel)
    n, groups = len(c.categories), max(len(c.bars), 1)
    if not n or not any(b.values for b in c.bars):
        _no_data(ax)
        return
    width = 0.8 / groups
    for g, b in enumerate(c.bars):
        xs = [i - 0.4 + width * (g + 0.5) for i in range(n)]
        ax.bar(xs, b.values, width=width, color=list(b.colours) or b.colour, label=b.label or None)
    for label, colour in c.legend:
        ax.bar([0], [0], width=0, color=colour, label=label)
    long = max(len(s) for s in c.categories) > 4
    if long and n > MAX_NAMED_BARS:  # names would overlap: the bars alone, sorted, say enough
        ax.set_xticks([])
    else:
        step = max(1, math.ceil(n / 14))
        ax.set_xticks(range(0, n, step), [c.categories[i] for i in range(0, n, step)],
                      rotation=45 if long else 0, ha="right" if long else "center")
    ax.grid(axis="x", visible=False)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if max(max(b.values, default=0) for b in c.bars) >= 10_000:
        ax.yaxis.set_major_formatter(EngFormatter(sep=""))
    if groups > 1 or c.legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _no_data(ax) -> None:
    ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="#9ca3af", fontsize=11)


def _graph(fig: MplFigure, c: GraphChart) -> None:
    """Nodes and edges at fixed places; the title above, the legend below
    and the colour bar to the right of the picture, never on it."""
    valued = [v for st in c.nodes for v in st.values if not math.isnan(v)]
    norm = Normalize(min(valued), max(valued) if max(valued) > min(valued) else min(valued) + 1) if valued else None
    right = 0.88 if (norm is not None and c.scale) else 0.98
    fig.subplots_adjust(left=0.05 if c.xlabel else 0.02, right=right, top=0.90,
                        bottom=0.20 if c.xlabel else 0.19, wspace=0.15)
    if c.side is not None:
        ax, side = fig.subplots(1, 2, gridspec_kw={"width_ratios": [4, 1]})
        _bars(side, c.side)
    else:
        ax = fig.add_subplot()
    fig.text(0.01, 0.97, c.title, fontsize=10, fontweight="bold", va="top", ha="left")
    pos = c.positions
    for e in c.edges:
        segs = [(pos[a], pos[b]) for a, b in e.pairs if a in pos and b in pos]
        if not segs:
            continue
        widths = list(e.widths) if e.widths else e.width
        ax.add_collection(LineCollection(segs, colors=e.colour, linewidths=widths, label=e.label,
                                         linestyles="--" if e.dashed else "-", zorder=1,
                                         rasterized=len(segs) > RASTER_ABOVE))
    base = max(6.0, min(60.0, 3000.0 / max(len(pos), 1)))
    cmap = colormaps[VALUE_MAP]
    for st in c.nodes:
        xy = [pos[name] for name in st.names if name in pos]
        if not xy:
            continue
        sizes = list(st.sizes) if st.sizes else base
        xs, ys = [p[0] for p in xy], [p[1] for p in xy]
        if st.hollow:
            ax.scatter(xs, ys, s=sizes, facecolors="white", edgecolors="#6b7280", linewidths=1.0,
                       label=st.label or None, zorder=2)
            continue
        colours = (["#d1d5db" if math.isnan(v) else cmap(norm(v)) for v in st.values] if st.values
                   else st.colour)
        ax.scatter(xs, ys, s=sizes, c=colours, edgecolors="#dc2626" if st.ringed else "white",
                   linewidths=1.4 if st.ringed else 0.4, label=st.label or None, zorder=3,
                   rasterized=len(xs) > RASTER_ABOVE)
    for name, text in c.node_labels.items():
        if name in pos:
            ax.annotate(text, pos[name], xytext=(3, 3), textcoords="offset points", fontsize=7, color="#374151")
    if norm is not None and c.scale:
        from matplotlib.cm import ScalarMappable

        cax = fig.add_axes((0.90, 0.15, 0.015, 0.7))
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax).set_label(c.scale)
    ax.autoscale_view()
    if c.xlabel:
        ax.set_xlabel(c.xlabel)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        ax.grid(axis="y", visible=False)
    else:
        ax.set_axis_off()
        ax.set_aspect("equal", adjustable="datalim")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(len(handles), 5 if c.wide else 2),
                   markerscale=1.5 if base < 20 else 1.0)
