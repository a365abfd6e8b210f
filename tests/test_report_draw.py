"""Chart specs drawn by matplotlib (analysis/report/draw.py): legends and
colour bars beside the data, never on it; the same spec gives the same
bytes; ids never collide between the charts of one page; an empty chart
says "no data"."""

from __future__ import annotations

import re
from dataclasses import replace

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection

from analysis.report.charts import _marker_caption
from analysis.report.data import RunData
from analysis.report.draw import _draw, svg
from analysis.report.specs import NUMBERED_MARKERS, Edges, GraphChart, Line, Marker, NodeStyle, XYChart
from analysis.rundir import RunDir


def xy(chart_id: str, n_lines: int = 4) -> XYChart:
    lines = tuple(Line(f"series {i}", tuple(float(x) for x in range(50)),
                       tuple(float(x * (i + 1)) for x in range(50)), f"C{i}") for i in range(n_lines))
    return XYChart(chart_id, "A chart", "time (s)", "value (ms)", lines, (Marker(10.0, "kill n1"),))


def extents(fig):
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    return renderer


def test_an_xy_legend_sits_right_of_the_plot():
    fig = _draw(xy("t-xy"))
    renderer = extents(fig)
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    plot = ax.get_window_extent(renderer)
    assert legend.x0 >= plot.x1  # beside the data, not on it
    assert legend.x1 <= fig.bbox.x1  # and inside the picture
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "value (ms)"


def test_a_graph_legend_and_colour_bar_stay_off_the_picture():
    pos = {f"n{i}": (float(i % 5), float(i // 5)) for i in range(25)}
    chart = GraphChart("t-graph", "A graph", pos,
                       (Edges("overlay (24)", tuple((f"n{i}", f"n{i + 1}") for i in range(24)), "#ccc", 0.6),),
                       (NodeStyle("", tuple(pos), values=tuple(float(i) for i in range(25))),
                        NodeStyle("missed deliveries (2)", ("n3", "n7"), values=(3.0, 7.0), ringed=True)),
                       scale="latency (ms)")
    fig = _draw(chart)
    renderer = extents(fig)
    picture, bar = fig.axes[0].get_window_extent(renderer), fig.axes[1].get_window_extent(renderer)
    legend = fig.legends[0].get_window_extent(renderer)
    assert bar.x0 >= picture.x1
    assert legend.y1 <= picture.y0 + 1  # below the picture
    assert legend.x0 >= 0 and legend.x1 <= fig.bbox.x1


def test_the_same_spec_gives_the_same_bytes_and_ids_differ_between_charts():
    a, b = svg(xy("t-a")), svg(xy("t-b"))
    assert a == svg(xy("t-a"))
    assert a.startswith('<svg class="chart" id="t-a"')
    ids_a = set(re.findall(r' id="([^"]+)"', a)) - {"t-a"}
    ids_b = set(re.findall(r' id="([^"]+)"', b)) - {"t-b"}
    assert ids_a and not ids_a & ids_b
    refs = set(re.findall(r'url\(#([^)]+)\)', a)) | set(re.findall(r'href="#([^"]+)"', a))
    assert refs and refs <= ids_a  # every reference still finds its target
    assert "<metadata" not in a and "<script" not in a


def test_an_empty_chart_says_no_data():
    assert "no data" in svg(XYChart("t-empty", "Nothing", "time (s)", "value", ()))


def test_side_by_side_panel_titles_neither_overlap_nor_run_into_the_heading():
    """subnet-blob-msg-docker's implementations: a bare image's name
    ("image:REPO/NAME:TAG", 50 characters) ran over its neighbour's title.
    Wrapped after its separators, every title stays over its own panel and
    below the figure's heading."""
    from analysis.report.charts import PANEL_TITLE_CHARS, wrapped
    from analysis.report.specs import Panels

    name = "image:gossip-testbed/contract-node:subnet-blob-msg"
    assert wrapped(name).split("\n") == ["image:gossip-testbed/", "contract-node:", "subnet-blob-msg"]
    assert wrapped("rust-libp2p") == "rust-libp2p" and max(map(len, wrapped(name).split("\n"))) <= PANEL_TITLE_CHARS
    panels = Panels("t-panels", "Latency CDF per implementation", tuple(
        XYChart(f"t-p{i}", wrapped(n), "latency (ms)", "fraction", xy("x").lines)
        for i, n in enumerate(["gossip-testbed", name, "rust-libp2p"])))
    fig = _draw(panels)
    renderer = extents(fig)
    titles = [ax._left_title.get_window_extent(renderer) for ax in fig.axes]  # set_title(loc="left")
    for left, right in zip(titles, titles[1:]):
        assert left.x1 <= right.x0  # each title ends before the next begins
    heading = fig._suptitle.get_window_extent(renderer)
    assert all(t.y1 <= heading.y0 for t in titles)


def test_a_few_churn_events_are_numbered_lines_and_many_are_ticks_the_caption_counts(tmp_path):
    def chart(n: int) -> XYChart:
        marks = tuple(Marker(1.0 + i * 0.01, f"kill n{i}") for i in range(n))
        return replace(xy("t-churn", n_lines=1), markers=marks)

    few = _draw(chart(NUMBERED_MARKERS)).axes[0]
    assert len(few.lines) == 1 + NUMBERED_MARKERS  # the series and one dashed line each
    assert [t.get_text() for t in few.texts] == [str(i) for i in range(1, NUMBERED_MARKERS + 1)]
    many = _draw(chart(1000)).axes[0]
    assert len(many.lines) == 1 and not many.texts  # no line or number per event
    rug = [c for c in many.collections if isinstance(c, LineCollection)]
    assert len(rug) == 1 and len(rug[0].get_segments()) == 1000

    def run(actions: list[str]) -> RunData:
        events = [{"kind": "churn", "t_ns": (1 + i) * 10**9, "action": a, "nodes": [f"n{i}"]} for i, a in enumerate(actions)]
        return RunData(RunDir(tmp_path, tmp_path, [], events=events), {"t0_ns": 0}, {}, 0)

    assert _marker_caption(run(["kill", "restart"])) == "Dashed lines, churn: 1 = kill n0 at 1 s; 2 = restart n1 at 2 s."
    caption = _marker_caption(run(["kill"] * 600 + ["restart"] * 400))
    assert caption == "Ticks on the top edge, churn: 1,000 events (600 kill, 400 restart) from 1 to 1000 s; events.jsonl lists each."
