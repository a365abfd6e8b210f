"""The HTML report: one self-contained file (inline CSS, inline SVG charts
drawn here in Python, a few lines of inline JS for hover read-outs), so it
opens offline, attaches to a CI job and never fetches anything.

Reads only RUN_DIR/summary.json, the small metrics tables and the run's own
files (manifest.json, events.jsonl, topology.json)."""

from __future__ import annotations

import html
import json
import math
from typing import Any

import pandas as pd

from analysis.fidelity import fidelity
from analysis.rundir import RunDir
from node.trace_vocab import RunEvent

PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"]
W, H = 560, 260
ML, MR, MT, MB = 58, 16, 28, 42


def esc(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def fmt(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3e}"
        return f"{v:.{digits}g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=mag * 10)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks


def _tick_label(v: float) -> str:
    if abs(v) >= 10000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


class Chart:
    """A 2-D chart in SVG with axes, grid, legend and optional event markers."""

    def __init__(self, title: str, xlabel: str, ylabel: str, chart_id: str,
                 xlim: tuple[float, float] | None = None, ylim: tuple[float, float] | None = None) -> None:
        self.title, self.xlabel, self.ylabel, self.chart_id = title, xlabel, ylabel, chart_id
        self.series: list[tuple[str, list[float], list[float], str, str]] = []
        self.bars: list[tuple[list[str], list[float], str]] = []
        self.markers: list[tuple[float, str]] = []
        self.xlim, self.ylim = xlim, ylim

    def line(self, name: str, xs, ys, color: str, kind: str = "line") -> Chart:
        pts = [(float(x), float(y)) for x, y in zip(xs, ys)
               if x is not None and y is not None and not (isinstance(y, float) and math.isnan(y))]
        self.series.append((name, [p[0] for p in pts], [p[1] for p in pts], color, kind))
        return self

    def bar(self, labels, values, color: str) -> Chart:
        self.bars.append(([str(x) for x in labels], [float(v) for v in values], color))
        return self

    def mark(self, x: float, label: str) -> Chart:
        self.markers.append((float(x), label))
        return self

    def _frame(self, body: list[str], xt: list[tuple[float, str]], yt: list[tuple[float, str]]) -> str:
        pw, ph = W - ML - MR, H - MT - MB
        out = [
            f'<svg class="chart" id="{esc(self.chart_id)}" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="{esc(self.title)}" xmlns="http://www.w3.org/2000/svg">',
            f'<text class="ct" x="{ML}" y="16">{esc(self.title)}</text>',
        ]
        for y, lab in yt:
            out.append(f'<line class="grid" x1="{ML}" x2="{ML + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(f'<text class="tk" x="{ML - 6}" y="{y + 3:.1f}" text-anchor="end">{esc(lab)}</text>')
        for x, lab in xt:
            out.append(f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{MT + ph}" y2="{MT + ph + 4}"/>')
            out.append(f'<text class="tk" x="{x:.1f}" y="{MT + ph + 15}" text-anchor="middle">{esc(lab)}</text>')
        out.append(f'<line class="axis" x1="{ML}" x2="{ML + pw}" y1="{MT + ph}" y2="{MT + ph}"/>')
        out.append(f'<line class="axis" x1="{ML}" x2="{ML}" y1="{MT}" y2="{MT + ph}"/>')
        out.append(f'<text class="al" x="{ML + pw / 2}" y="{H - 6}" text-anchor="middle">{esc(self.xlabel)}</text>')
        out.append(
            f'<text class="al" transform="translate(13,{MT + ph / 2}) rotate(-90)" text-anchor="middle">'
            f"{esc(self.ylabel)}</text>"
        )
        out.extend(body)
        out.append("</svg>")
        return "".join(out)

    def _empty(self) -> str:
        return self._frame(
            [f'<text class="empty" x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text>'], [], []
        )

    def svg(self) -> str:
        pw, ph = W - ML - MR, H - MT - MB
        if self.bars:
            return self._bar_svg(pw, ph)
        xs = [x for s in self.series for x in s[1]] + [m[0] for m in self.markers]
        ys = [y for s in self.series for y in s[2]]
        if not ys:
            return self._empty()
        x0, x1 = self.xlim or (min(xs), max(xs))
        y0, y1 = self.ylim or (min(0.0, min(ys)), max(ys))
        if x1 <= x0:
            x1 = x0 + 1
        if y1 <= y0:
            y1 = y0 + 1
        xticks = _nice_ticks(x0, x1)
        yticks = _nice_ticks(y0, y1)
        if self.ylim is None:
            y1 = max(y1, yticks[-1])

        def sx(v: float) -> float:
            return ML + (v - x0) / (x1 - x0) * pw

        def sy(v: float) -> float:
            return MT + ph - (v - y0) / (y1 - y0) * ph

        body = []
        for mx, lab in self.markers:
            if x0 <= mx <= x1:
                body.append(
                    f'<line class="marker" x1="{sx(mx):.1f}" x2="{sx(mx):.1f}" y1="{MT}" y2="{MT + ph}">'
                    f"<title>{esc(lab)}</title></line>"
                )
                body.append(f'<text class="mk" x="{sx(mx) + 3:.1f}" y="{MT + 9}">{esc(lab[:18])}</text>')
        for name, sxs, sys_, color, kind in self.series:
            if not sxs:
                continue
            if kind == "step":
                d = [f"M{sx(sxs[0]):.1f},{sy(sys_[0]):.1f}"]
                for i in range(1, len(sxs)):
                    d.append(f"H{sx(sxs[i]):.1f}V{sy(sys_[i]):.1f}")
                path = "".join(d)
            else:
                path = "M" + "L".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(sxs, sys_))
            body.append(f'<path class="series" d="{path}" stroke="{color}"><title>{esc(name)}</title></path>')
            if len(sxs) <= 60 and kind != "step":
                for x, y in zip(sxs, sys_):
                    body.append(
                        f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.4" fill="{color}">'
                        f"<title>{esc(name)}: x={x:g}, y={y:.4g}</title></circle>"
                    )
        # legend
        lx = ML + 8
        for i, (name, *_rest) in enumerate(self.series):
            color = self.series[i][3]
            ly = MT + 8 + i * 14
            body.append(f'<rect x="{lx + pw - 150}" y="{ly - 7}" width="10" height="3" fill="{color}"/>')
            body.append(f'<text class="lg" x="{lx + pw - 136}" y="{ly - 2}">{esc(name[:24])}</text>')
        xt = [(sx(t), _tick_label(t)) for t in xticks if x0 <= t <= x1]
        yt = [(sy(t), _tick_label(t)) for t in yticks if y0 <= t <= y1]
        return self._frame(body, xt, yt)

    def _bar_svg(self, pw: float, ph: float) -> str:
        labels, values, _ = self.bars[0]
        if not values:
            return self._empty()
        n = len(labels)
        groups = len(self.bars)
        vmax = max(max(v for v in b[1]) if b[1] else 0 for b in self.bars) or 1.0
        yticks = _nice_ticks(0, vmax)
        y1 = max(vmax, yticks[-1])

        def sy(v: float) -> float:
            return MT + ph - v / y1 * ph

        slot = pw / n
        bw = max(0.5, slot * 0.8 / groups)
        body = []
        for g, (glabels, gvalues, color) in enumerate(self.bars):
            for i, (lab, v) in enumerate(zip(glabels, gvalues)):
                x = ML + i * slot + slot * 0.1 + g * bw
                body.append(
                    f'<rect x="{x:.2f}" y="{sy(v):.1f}" width="{bw:.2f}" height="{MT + ph - sy(v):.1f}" '
                    f'fill="{color}"><title>{esc(lab)}: {v:g}</title></rect>'
                )
        step = max(1, math.ceil(n / 12))
        xt = [(ML + i * slot + slot / 2, labels[i]) for i in range(0, n, step)]
        yt = [(sy(t), _tick_label(t)) for t in yticks if t <= y1]
        return self._frame(body, xt, yt)


# ----------------------------------------------------------------------------- data


def _table(run: RunDir, name: str) -> pd.DataFrame:
    path = run.metrics_dir / f"{name}.parquet"
    if not path.exists():
        return pd.DataFrame()
    return pd.read_parquet(path)


def _load(run: RunDir) -> dict[str, Any]:
    summary = json.loads(run.summary_path.read_text())
    return {
        "run": run,
        "summary": summary,
        "cdf": _table(run, "latency_cdf"),
        "tsd": _table(run, "timeseries_delivery"),
        "tsc": _table(run, "timeseries_control"),
        "mesh": _table(run, "mesh_degree"),
        "mesh_hist": _table(run, "mesh_degree_hist"),
        "dup_hist": _table(run, "duplicates_hist"),
        "nodes": _table(run, "nodes"),
    }


def _churn_marks(run: RunDir, t0: int) -> list[tuple[float, str]]:
    marks = []
    for e in run.events:
        if e.get("kind") == RunEvent.CHURN:
            nodes = e.get("nodes") or []
            who = ",".join(nodes[:3]) + ("…" if len(nodes) > 3 else "")
            marks.append(((e["t_ns"] - t0) / 1e9, f"{e.get('action')} {who}".strip()))
    return marks


# ----------------------------------------------------------------------------- sections


def _banners(d: dict[str, Any]) -> str:
    run: RunDir = d["run"]
    m = run.manifest
    out = []
    shaping = m.get("shaping") or {}
    path = shaping.get("path")
    if path == "userspace" or (path and path.startswith("userspace") and shaping.get("netem_available") is False):
        out.append(
            '<div class="banner danger"><strong>Links were shaped in user space, not by the kernel.</strong> '
            f"netem is not available on this host (shaping path <code>{esc(path)}</code>); delay, jitter and "
            "loss were applied inside each node, which adds scheduling noise to every latency below. "
            f"{esc(shaping.get('detail') or '')}</div>"
        )
    warnings = list(m.get("warnings") or []) + [
        e.get("message", "") for e in run.events if e.get("kind") == RunEvent.WARNING
    ]
    for w in warnings:
        lag = "lag" in str(w).lower()
        cls = "banner danger" if lag else "banner warn"
        title = "Event-loop lag: " if lag else "Warning: "
        out.append(f'<div class="{cls}"><strong>{title}</strong>{esc(w)}</div>')
    s = d["summary"]
    integrity = s.get("trace_integrity") or {}
    if integrity.get("damaged_nodes"):
        out.append(
            '<div class="banner danger"><strong>Damaged traces:</strong> the trace files of '
            + esc(", ".join(integrity["damaged_nodes"]))
            + f" could not be read whole ({integrity.get('truncated', 0)} cut mid-record, "
            f"{integrity.get('corrupt', 0)} with bytes that are not trace records, "
            f"{integrity.get('bytes_skipped', 0)} bytes skipped); deliveries and counts from them are "
            "missing, so the figures below undercount.</div>"
        )
    for missing in s.get("missing_files") or []:
        out.append(
            f'<div class="banner warn"><strong>No {esc(missing["file"])}:</strong> {esc(missing["affects"])}.</div>'
        )
    in_flight = s.get("in_flight") or {}
    if in_flight.get("messages_propagating_at_end"):
        out.append(
            '<div class="banner warn"><strong>Stopped while messages were in flight:</strong> '
            f"{in_flight.get('rpcs_in_flight_at_end', 0)} RPCs were still on their way and "
            f"{in_flight.get('messages_propagating_at_end', 0)} messages still propagating when the traces "
            "ended; a longer linger would let them arrive.</div>"
        )
    failed = [e for e in s.get("expectations") or [] if not e["passed"]]
    if failed:
        out.append(
            '<div class="banner danger"><strong>Expectations failed:</strong> '
            + "; ".join(esc(f"{e['expr']} ({e['message']})") for e in failed)
            + "</div>"
        )
    return "".join(out)


def _kv(rows: list[tuple[str, Any]]) -> str:
    return '<table class="kv">' + "".join(
        f"<tr><th>{esc(k)}</th><td>{v if isinstance(v, _Raw) else esc(fmt(v))}</td></tr>" for k, v in rows
    ) + "</table>"


class _Raw(str):
    pass


def _experiment(d: dict[str, Any]) -> str:
    run: RunDir = d["run"]
    m, exp = run.manifest, run.experiment
    shaping = m.get("shaping") or {}
    host = m.get("host") or {}
    routers = sorted({str(n.get("router")) for n in run.topology_nodes() if n.get("router")})
    left = [
        ("experiment", m.get("experiment") or exp.get("source")),
        ("name", run.name),
        ("backend", m.get("backend")),
        ("router", ", ".join(routers) or None),
        ("nodes", d["summary"].get("nodes")),
        ("overlay edges", len(run.topology_edges()) or None),
        ("seed", m.get("seed", exp.get("seed"))),
        ("clock", m.get("clock")),
        *([("time dilation", f"x{k:g}: the run went {k:g} times slower than written (links, router timers, "
                             "workload, churn); every time in this report is the experiment's")]
          if (k := m.get("time_dilation")) else []),
        ("started", m.get("started_at")),
        ("wall time (s)", m.get("wall_time_s")),
    ]
    right = [
        ("shaping path", _Raw(f"<code>{esc(shaping.get('path') or '–')}</code>")),
        ("netem available", shaping.get("netem_available")),
        ("shaping detail", shaping.get("detail")),
        ("delay line", _delay_line(m.get("delay_line"))),
        ("tool version", m.get("version")),
        ("host", host.get("platform")),
        ("kernel", host.get("kernel")),
        ("cpus", host.get("cpus")),
        ("memory", f"{host['memory_bytes'] / 2**30:.1f} GiB" if host.get("memory_bytes") else None),
        ("events processed", m.get("events_processed")),
        ("run directory", str(run.path)),
    ]
    return f'<div class="two">{_kv(left)}{_kv(right)}</div>'


def _delay_line(stats: dict[str, Any] | None) -> str | None:
    """What the host's delay line (path delayline+htb) did: packets it held and how late it let them go."""
    if not stats:
        return None
    late = stats.get("late_us") or {}
    return (f"{stats.get('shaped', 0):,} packets delayed, {stats.get('dropped_loss', 0):,} dropped for loss; "
            f"released late by {late.get('p50', 0)} us (p50), {late.get('p99', 0)} us (p99), "
            f"{late.get('max', 0)} us (max)")


CARDS = [
    ("delivery ratio", "delivery_ratio", lambda v: f"{v * 100:.3g}%" if v is not None else "–"),
    ("latency p50", "latency_p50_ms", lambda v: f"{fmt(v)} ms"),
    ("latency p99", "latency_p99_ms", lambda v: f"{fmt(v)} ms"),
    ("duplicates / msg", "duplicates_per_message", fmt),
    ("amplification", "amplification", fmt),
    ("stretch p50", "stretch_p50", fmt),
    ("messages", "messages", fmt),
    ("mesh degree", "mesh_degree_mean", fmt),
]


def _cards(s: dict[str, Any]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="cv">{esc(f(s.get(k)))}</div><div class="cl">{esc(label)}</div></div>'
        for label, k, f in CARDS
    ) + "</div>"


SUMMARY_ROWS = [
    ("nodes", "nodes"), ("trace events", "events"), ("messages", "messages"),
    ("expected deliveries", "expected_deliveries"), ("deliveries", "deliveries"),
    ("delivery ratio", "delivery_ratio"), ("messages lost (0 deliveries)", "messages_lost"),
    ("latency p50 (ms)", "latency_p50_ms"), ("latency p90 (ms)", "latency_p90_ms"),
    ("latency p99 (ms)", "latency_p99_ms"), ("latency max (ms)", "latency_max_ms"),
    ("duplicates", "duplicates"), ("duplicates per message", "duplicates_per_message"),
    ("transmissions", "transmissions"), ("amplification", "amplification"),
    ("stretch p50", "stretch_p50"), ("stretch p99", "stretch_p99"),
    ("control: publish", "control_publish"), ("control: deliver", "control_deliver"),
    ("control: graft", "control_graft"), ("control: prune", "control_prune"),
    ("control: ihave", "control_ihave"), ("control: iwant", "control_iwant"),
    ("RPCs sent", "rpcs_sent"), ("RPCs dropped", "rpcs_dropped"), ("bytes sent", "bytes_sent"),
    ("load Gini", "load_gini"), ("load max/mean", "load_max_over_mean"),
    ("mesh degree mean", "mesh_degree_mean"), ("recovery after churn, max (s)", "recovery_max_s"),
    ("DELIVER events (raw, as go's tracestat)", "deliver_events"),
    ("RPCs in flight at the end", "rpcs_in_flight_at_end"),
    ("messages propagating at the end", "messages_propagating_at_end"),
]


def _summary_table(s: dict[str, Any]) -> str:
    rows = _kv([(label, s.get(key)) for label, key in SUMMARY_ROWS[: len(SUMMARY_ROWS) // 2]])
    rows2 = _kv([(label, s.get(key)) for label, key in SUMMARY_ROWS[len(SUMMARY_ROWS) // 2:]])
    exp = s.get("expectations") or []
    exp_html = ""
    if exp:
        exp_html = '<h3>Expectations</h3><table class="grid-t"><tr><th></th><th>expectation</th><th>actual</th></tr>' + "".join(
            f'<tr><td class="{"pass" if e["passed"] else "fail"}">{"PASS" if e["passed"] else "FAIL"}</td>'
            f"<td><code>{esc(e['expr'])}</code></td><td>{esc(fmt(e['actual']))}</td></tr>"
            for e in exp
        ) + "</table>"
    return f'<div class="two">{rows}{rows2}</div>{exp_html}'


IMPLEMENTATION_ROWS = [
    ("nodes", "nodes"),
    ("delivery ratio (as receivers)", "delivery_ratio"),
    ("latency p50 ms (as receivers)", "latency_p50_ms"),
    ("latency p99 ms (as receivers)", "latency_p99_ms"),
    ("duplicates per delivery", "duplicates_per_delivery"),
    ("RPCs sent", "rpcs_sent"),
    ("bytes sent", "bytes_sent"),
    ("trace events recorded", "trace_events"),
]


def _implementations_table(s: dict[str, Any]) -> str:
    """The implementations of a mixed run side by side (issue 12); a figure
    an implementation's traces cannot supply reads "unavailable", never 0.
    Nothing for a run of one implementation."""
    impls = s.get("implementations") or {}
    if len(impls) < 2:
        return ""

    def cell(fig: dict[str, Any], key: str) -> str:
        if key in fig.get("unavailable", ()):
            return '<td class="muted">unavailable</td>'
        v = fig.get(key)
        if key == "trace_events":
            return f"<td>{esc('all (go-format trace)' if v is None else ', '.join(v))}</td>"
        return f"<td>{esc(fmt(v))}</td>"

    head = "".join(f"<th>{esc(name)}</th>" for name in impls)
    rows = "".join(
        f"<tr><th>{esc(label)}</th>{''.join(cell(fig, key) for fig in impls.values())}</tr>"
        for label, key in IMPLEMENTATION_ROWS
    )
    return f'<h3>Implementations</h3><table class="grid-t"><tr><th></th>{head}</tr>{rows}</table>'


def _recovery_table(s: dict[str, Any]) -> str:
    rec = s.get("recovery") or []
    if not rec:
        return '<p class="muted">No churn events in this run.</p>'
    rows = "".join(
        f"<tr><td>{fmt(r['t_s'])}</td><td>{esc(r['action'])}</td><td>{esc(', '.join(r['nodes'][:6]))}"
        f"{'…' if len(r['nodes']) > 6 else ''}</td><td>{fmt(r['pre_ratio'])}</td><td>{fmt(r['min_ratio'])}</td>"
        f"<td class=\"{'pass' if r['recovered'] else ('fail' if r['recovered'] is False else '')}\">"
        f"{fmt(r['recovery_s']) if r['recovered'] else ('not recovered' if r['recovered'] is False else 'no messages')}</td></tr>"
        for r in rec
    )
    return (
        '<table class="grid-t"><tr><th>t (s)</th><th>action</th><th>nodes</th><th>pre-event ratio</th>'
        f"<th>lowest ratio after</th><th>recovery (s)</th></tr>{rows}</table>"
    )


FIDELITY_COLUMNS = [("node", "node"), ("CPU (s)", "cpu_s"), ("at rest (ms/s)", "rest_ms_per_s"),
                    ("under load (ms/s)", "load_ms_per_s"), ("deliveries", "deliveries"),
                    ("per delivery (ms)", "ms_per_delivery"), ("lag p50 (ms)", "lag_p50_ms"),
                    ("lag p99 (ms)", "lag_p99_ms"), ("lag max (ms)", "lag_max_ms")]


def _fidelity(d: dict[str, Any]) -> str:
    """Per node: the CPU its router used and its event-loop lag; the budget
    and the burst load (analysis/fidelity.py)."""
    run: RunDir = d["run"]
    nodes = d["nodes"]
    delivered = ({str(r.node): int(r.delivered) for r in nodes.itertuples()}
                 if len(nodes) and "delivered" in nodes.columns else {})
    s = d["summary"]
    f = fidelity(run.path, run.manifest, delivered, s.get("latency_p50_ms"), s.get("messages"), s.get("stretch_p50"))
    if f is None:
        return '<p class="muted">No per-router CPU figures in this run (router-cpu.json: real backends only).</p>'
    share = f"{f['faithful_share'] * 100:.0f}%"
    budget = _kv([
        ("CPU source", f["source"]),
        ("host cores", f["host_cpus"]),
        ("rest window (s)", f["rest_window_s"]),
        ("load window (s)", f["load_window_s"]),
        ("CPU per router-second at rest (ms, median)", f["rest_ms_per_router_s"]),
        ("CPU per delivery (ms, median)", f["ms_per_delivery"]),
        ("deliveries per router-second", f["deliveries_per_router_s"]),
        ("CPU per router-second at this rate (ms)", f["ms_per_router_s_at_rate"]),
        (f"routers this host runs faithfully at this rate (cores at {share})", f["budget_at_rate"]),
        (f"routers this host runs faithfully at rest (cores at {share})", f["budget_at_rest"]),
        ("routers in this run", f["routers"]),
        ("CPU one message costs the routers together (ms: its deliveries x per delivery)", f["burst_cpu_ms"]),
        (f"time it has to spread in (ms on the wall: ({f['burst_spread_from'] or 'latency p50'}) x time dilation)",
         f["burst_spread_ms"]),
        (f"burst load: that CPU over the cores at {share} in that time (above 1: the latency is the host's)",
         f["burst_load"]),
        ("time dilation at which one message's burst fits (low when measured at full speed: the CPU per delivery "
         "grows with the dilation)", f["dilation_for_burst"]),
        *([("event-loop lag while the routers started, p99 median / worst (ms; not in the table below)",
            f"{fmt(at_up.get('p99_median_ms'))} / {fmt(at_up.get('p99_max_ms'))}")]
          if (at_up := run.manifest.get("event_loop_lag_at_up") or {}).get("per_node") else []),
        *([("time dilation", f"x{k:g}: the windows and rates above are the wall clock's, the rates {k:g} times lower "
                             "than the experiment's; the lag is on the experiment's clock")]
          if (k := run.manifest.get("time_dilation")) else []),
    ])
    head = "".join(f"<th>{esc(label)}</th>" for label, _ in FIDELITY_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{esc(fmt(r[key]))}</td>" for _, key in FIDELITY_COLUMNS) + "</tr>"
                   for r in f["per_node"])
    return (f"{budget}<details><summary>per node ({len(f['per_node'])})</summary>"
            f'<table class="grid-t"><tr>{head}</tr>{rows}</table></details>')


def _charts(d: dict[str, Any], idx: int) -> list[str]:
    s, run = d["summary"], d["run"]
    t0 = int(s.get("t0_ns") or 0)
    marks = _churn_marks(run, t0)
    pre = f"r{idx}"
    charts = []

    cdf = d["cdf"]
    c = Chart("Latency CDF", "latency to a recipient (ms)", "fraction of deliveries", f"{pre}-cdf", ylim=(0, 1))
    if len(cdf):
        c.line("latency", cdf["latency_ms"], cdf["quantile"], PALETTE[0])
    charts.append(c.svg())

    tsd = d["tsd"]
    dur = s.get("duration_s") or 0
    xlim = (0.0, max(1.0, float(dur)))
    c = Chart("Delivery ratio by publish second", "time (s)", "delivery ratio", f"{pre}-ratio", xlim=xlim, ylim=(0, 1.05))
    if len(tsd):
        c.line("delivery ratio", tsd["t_s"], tsd["delivery_ratio"], PALETTE[2])
    for x, lab in marks:
        c.mark(x, lab)
    charts.append(c.svg())

    c = Chart("Latency by publish second", "time (s)", "latency (ms)", f"{pre}-lat", xlim=xlim)
    if len(tsd):
        c.line("p50", tsd["t_s"], tsd["latency_p50_ms"], PALETTE[0])
        c.line("p99", tsd["t_s"], tsd["latency_p99_ms"], PALETTE[1])
    for x, lab in marks:
        c.mark(x, lab)
    charts.append(c.svg())

    dh = d["dup_hist"]
    c = Chart("Duplicates per message", "duplicates of a message", "messages", f"{pre}-dups")
    if len(dh):
        c.bar(dh["duplicates"].astype(int), dh["messages"], PALETTE[3])
    charts.append(c.svg())

    tsc = d["tsc"]
    if len(tsc):  # seconds without any event are zeros, not gaps
        full = pd.RangeIndex(int(tsc["t_s"].min()), int(tsc["t_s"].max()) + 1, name="t_s")
        tsc = tsc.set_index("t_s").reindex(full, fill_value=0).reset_index()
    c = Chart("Control messages sent per second", "time (s)", "entries / s", f"{pre}-ctl", xlim=xlim)
    if len(tsc):
        for i, col in enumerate(("graft", "prune", "ihave", "iwant")):
            c.line(col.upper(), tsc["t_s"], tsc[col], PALETTE[(i + 4) % len(PALETTE)])
    for x, lab in marks:
        c.mark(x, lab)
    charts.append(c.svg())

    mh = d["mesh_hist"]
    c = Chart("Mesh degree distribution (1 s samples)", "mesh degree", "samples", f"{pre}-meshd")
    if len(mh):
        full = range(int(mh["degree"].min()), int(mh["degree"].max()) + 1)
        counts = dict(zip(mh["degree"].astype(int), mh["samples"]))
        c.bar(list(full), [counts.get(k, 0) for k in full], PALETTE[4])
    charts.append(c.svg())

    mesh = d["mesh"]
    c = Chart("Mesh degree over time", "time (s)", "degree", f"{pre}-mesht", xlim=xlim)
    if len(mesh):
        g = mesh.groupby("t_s")["degree"]
        c.line("mean", g.mean().index, g.mean().values, PALETTE[4])
        c.line("min", g.min().index, g.min().values, PALETTE[7])
        c.line("max", g.max().index, g.max().values, PALETTE[5])
    for x, lab in marks:
        c.mark(x, lab)
    charts.append(c.svg())

    nodes = d["nodes"]
    basis = (s.get("load") or {}).get("basis", "bytes_sent")
    c = Chart(f"Per-node load ({basis.replace('_', ' ')}, sorted)", "node", basis.replace("_", " "), f"{pre}-load")
    if len(nodes) and basis in nodes:
        ns = nodes.sort_values(basis, ascending=False)
        c.bar(ns["node"], ns[basis], PALETTE[0])
    charts.append(c.svg())
    return charts


def _run_section(d: dict[str, Any], idx: int, heading: bool) -> str:
    s = d["summary"]
    charts = "".join(f'<div class="panel">{c}</div>' for c in _charts(d, idx))
    title = f"<h2>{esc(d['run'].name)}</h2>" if heading else ""
    return (
        f'<section class="run" id="run-{idx}">{title}{_banners(d)}'
        f"<h3>Experiment and manifest</h3>{_experiment(d)}"
        f"<h3>Summary</h3>{_cards(s)}{_summary_table(s)}{_implementations_table(s)}"
        f'<h3>Charts</h3><div class="charts">{charts}</div>'
        f"<h3>Recovery after churn</h3>{_recovery_table(s)}"
        f"<h3>Fidelity</h3>{_fidelity(d)}</section>"
    )


def _comparison(datas: list[dict[str, Any]]) -> str:
    names = [d["run"].name for d in datas]
    head = "".join(f"<th>{esc(n)}<br><span class='muted'>{esc(d['summary'].get('backend') or '')}</span></th>"
                   for n, d in zip(names, datas))
    rows = "".join(
        f"<tr><th>{esc(label)}</th>" + "".join(f"<td>{esc(fmt(d['summary'].get(key)))}</td>" for d in datas) + "</tr>"
        for label, key in SUMMARY_ROWS
    )
    table = f'<table class="grid-t cmp"><tr><th>metric</th>{head}</tr>{rows}</table>'
    c = Chart("Latency CDF, all runs", "latency (ms)", "fraction of deliveries", "cmp-cdf", ylim=(0, 1))
    r = Chart("Delivery ratio by publish second, all runs", "time (s)", "delivery ratio", "cmp-ratio", ylim=(0, 1.05))
    a = Chart("Mean mesh degree, all runs", "time (s)", "degree", "cmp-mesh")
    for i, d in enumerate(datas):
        color = PALETTE[i % len(PALETTE)]
        if len(d["cdf"]):
            c.line(names[i], d["cdf"]["latency_ms"], d["cdf"]["quantile"], color)
        if len(d["tsd"]):
            r.line(names[i], d["tsd"]["t_s"], d["tsd"]["delivery_ratio"], color)
        if len(d["mesh"]):
            g = d["mesh"].groupby("t_s")["degree"].mean()
            a.line(names[i], g.index, g.values, color)
    charts = "".join(f'<div class="panel">{x.svg()}</div>' for x in (c, r, a))
    return f'<section id="comparison"><h2>Comparison</h2>{table}<div class="charts">{charts}</div></section>'


CSS = """
:root{--fg:#111827;--mut:#6b7280;--bd:#e5e7eb;--bg:#f9fafb;--acc:#2563eb}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);background:var(--bg)}
header{background:#111827;color:#fff;padding:18px 32px}header h1{margin:0;font-size:20px;font-weight:600}
header .sub{color:#9ca3af;font-size:13px;margin-top:2px}main{max-width:1240px;margin:0 auto;padding:8px 32px 48px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:2px solid var(--bd);padding-bottom:4px}
h3{font-size:14px;text-transform:uppercase;letter-spacing:.04em;color:var(--mut);margin:22px 0 8px}
.banner{padding:10px 14px;border-radius:6px;margin:10px 0;border:1px solid}
.banner.danger{background:#fef2f2;border-color:#fca5a5;color:#7f1d1d}
.banner.warn{background:#fffbeb;border-color:#fcd34d;color:#78350f}
.banner.info{background:#eff6ff;border-color:#93c5fd;color:#1e3a8a}
.two{display:grid;grid-template-columns:1fr 1fr;gap:16px}
table{border-collapse:collapse;background:#fff;width:100%}
.kv th{width:45%;text-align:left;font-weight:500;color:var(--mut)}.kv th,.kv td{padding:4px 10px;border-bottom:1px solid var(--bd)}
.kv td{font-variant-numeric:tabular-nums;word-break:break-all}
.grid-t th,.grid-t td{padding:5px 10px;border:1px solid var(--bd);text-align:left;font-variant-numeric:tabular-nums}
.grid-t th{background:#f3f4f6;font-weight:600}
.cmp td{text-align:right}
.pass{color:#15803d;font-weight:600}.fail{color:#b91c1c;font-weight:700}
.cards{display:grid;grid-template-columns:repeat(8,1fr);gap:10px;margin-bottom:14px}
.card{background:#fff;border:1px solid var(--bd);border-radius:8px;padding:10px 12px}
.cv{font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}.cl{color:var(--mut);font-size:12px}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:14px}
.panel{background:#fff;border:1px solid var(--bd);border-radius:8px;padding:6px}
svg.chart{width:100%;height:auto;display:block}
svg .ct{font-size:13px;font-weight:600;fill:#111827}svg .tk{font-size:10px;fill:#6b7280}
svg .al{font-size:11px;fill:#374151}svg .lg{font-size:10px;fill:#374151}svg .mk{font-size:9px;fill:#b45309}
svg .grid{stroke:#eef0f3}svg .axis{stroke:#9ca3af}svg .tick{stroke:#9ca3af}
svg .series{fill:none;stroke-width:1.8}svg .marker{stroke:#d97706;stroke-dasharray:4 3;stroke-width:1.2}
svg .empty{font-size:13px;fill:#9ca3af}
code{background:#f3f4f6;padding:1px 4px;border-radius:3px;font-size:12px}
.muted{color:var(--mut);font-weight:400}
#readout{position:fixed;pointer-events:none;background:#111827;color:#fff;font-size:12px;padding:3px 7px;border-radius:4px;display:none}
footer{color:var(--mut);font-size:12px;margin-top:32px}
@media (max-width:900px){.charts,.two{grid-template-columns:1fr}.cards{grid-template-columns:repeat(4,1fr)}}
"""

JS = """
(function(){
  var tip=document.getElementById('readout');
  document.querySelectorAll('svg.chart [data-t], svg.chart circle, svg.chart rect').forEach(function(el){
    var t=el.querySelector('title'); if(!t) return;
    el.addEventListener('mousemove',function(e){tip.textContent=t.textContent;tip.style.display='block';
      tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';});
    el.addEventListener('mouseleave',function(){tip.style.display='none';});
  });
  var n=document.querySelectorAll('svg.chart').length;
  document.body.setAttribute('data-report-ready', String(n));
})();
"""


def render_report(runs: list[RunDir]) -> str:
    datas = [_load(r) for r in runs]
    multi = len(datas) > 1
    names = ", ".join(d["run"].name for d in datas)
    body = []
    if multi:
        body.append(_comparison(datas))
    for i, d in enumerate(datas):
        body.append(_run_section(d, i, heading=True))
    version = datas[0]["run"].manifest.get("version") or ""
    sub = (
        f"{len(datas)} runs compared" if multi
        else f"{esc(datas[0]['summary'].get('backend') or 'unknown backend')} · "
             f"{fmt(datas[0]['summary'].get('nodes'))} nodes · {fmt(datas[0]['summary'].get('messages'))} messages"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>gossip-testbed report: {esc(names)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>gossip-testbed report — {esc(names)}</h1><div class='sub'>{sub}</div></header>"
        f"<main>{''.join(body)}<footer>gossip-testbed {esc(version)} · self-contained report: no external "
        "resources · metric definitions in docs/metrics.md</footer></main>"
        f"<div id='readout'></div><script>{JS}</script></body></html>"
    )
