"""What a chart shows, as plain values: the report's vocabulary between the
data (analysis/report/charts.py, overlay.py) and the drawing
(analysis/report/draw.py).

A spec names its title, axes with units, series with their colours and the
churn markers; it holds no drawing code, so adding a chart is writing one
function that returns a spec, and every chart is drawn the same way
(legends outside the plot, same fonts, same marker style).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Line:
    """One series of an XY chart: `step` draws a step function (a CDF, a
    count over time), `faint` a thin translucent line among many (no legend
    entry unless labelled)."""

    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    colour: str
    step: bool = False
    faint: bool = False
    dashed: bool = False


# Up to this many churn events are drawn one dashed line each, numbered and
# listed in the caption; more (steady churn at scale: a thousand events at
# 10,000 nodes) are ticks along the top edge, counted in the caption
NUMBERED_MARKERS = 20


@dataclass(frozen=True)
class Marker:
    """A vertical line at x (a churn event), numbered on the chart and
    explained in the caption; a tick on the top edge beyond NUMBERED_MARKERS."""

    x: float
    label: str


@dataclass(frozen=True)
class XYChart:
    id: str
    title: str
    xlabel: str
    ylabel: str
    lines: tuple[Line, ...]
    markers: tuple[Marker, ...] = ()
    xlim: tuple[float, float] | None = None
    ylim: tuple[float, float] | None = None


@dataclass(frozen=True)
class Bars:
    """One series of bars; `colours` (one per bar) overrides `colour`."""

    label: str
    values: tuple[float, ...]
    colour: str
    colours: tuple[str, ...] = ()


@dataclass(frozen=True)
class BarChart:
    """Bars over categories (one group of bars per `Bars`, side by side)."""

    id: str
    title: str
    xlabel: str
    ylabel: str
    categories: tuple[str, ...]
    bars: tuple[Bars, ...]
    legend: tuple[tuple[str, str], ...] = ()  # (label, colour) when bars are coloured one by one


@dataclass(frozen=True)
class Panels:
    """Charts side by side on shared axes (one per implementation, say)."""

    id: str
    title: str
    charts: tuple[XYChart, ...]


@dataclass(frozen=True)
class Edges:
    """Line segments between positions of a graph picture, one style each."""

    label: str
    pairs: tuple[tuple[str, str], ...]
    colour: str
    width: float
    dashed: bool = False
    widths: tuple[float, ...] = ()  # per pair, instead of `width` (aggregated pictures)


@dataclass(frozen=True)
class NodeStyle:
    """How a set of nodes is drawn: by category colour, or by a value on a
    colour scale (`values`, in the order of `names`), or hollow (down)."""

    label: str
    names: tuple[str, ...]
    colour: str = "#6b7280"
    values: tuple[float, ...] = ()
    hollow: bool = False
    ringed: bool = False  # outlined red: missed deliveries
    sizes: tuple[float, ...] = ()


@dataclass(frozen=True)
class GraphChart:
    """Nodes at given positions and the edges between them. `scale` names
    what `values` measure (a colour bar); `xlabel` set means the x position
    is a quantity (time) with an axis, else the picture has no axes;
    `node_labels` are written next to the nodes (small pictures only)."""

    id: str
    title: str
    positions: dict[str, tuple[float, float]]
    edges: tuple[Edges, ...]
    nodes: tuple[NodeStyle, ...]
    scale: str | None = None
    xlabel: str | None = None
    node_labels: dict[str, str] = field(default_factory=dict)
    wide: bool = False
    side: BarChart | None = None  # a small bar chart beside the picture (recipients per hop)


Chart = XYChart | BarChart | Panels | GraphChart


@dataclass(frozen=True)
class Figure:
    """A chart with its caption (what the picture shows, how to read it)."""

    chart: Chart
    caption: str = ""
