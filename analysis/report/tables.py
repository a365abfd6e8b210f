"""The report's words and tables as values for the page template
(analysis/report/templates/report.html.j2): banners, the experiment and
manifest, the summary cards and tables, the implementations side by side,
recovery after churn and fidelity. Numbers are formatted here (`fmt`);
the template escapes and lays out."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analysis.fidelity import fidelity
from analysis.report.data import RunData
from node.trace.vocab import RunEvent


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


@dataclass(frozen=True)
class Banner:
    danger: bool
    title: str
    text: str


Rows = list[tuple[str, str]]


def banners(d: RunData) -> list[Banner]:
    run, s = d.run, d.summary
    m = run.manifest
    out = []
    shaping = m.get("shaping") or {}
    path = shaping.get("path")
    if path == "userspace" or (path and path.startswith("userspace") and shaping.get("netem_available") is False):
        out.append(Banner(True, "Links were shaped in user space, not by the kernel.",
                          f"netem is not available on this host (shaping path {path}); delay, jitter and loss were "
                          "applied inside each node, which adds scheduling noise to every latency below. "
                          f"{shaping.get('detail') or ''}"))
    warnings = list(m.get("warnings") or []) + [
        e.get("message", "") for e in run.events if e.get("kind") == RunEvent.WARNING
    ]
    for w in dict.fromkeys(warnings):  # a warning is both logged as it happens and kept in the manifest
        lag = "lag" in str(w).lower()
        out.append(Banner(lag, "Event-loop lag:" if lag else "Warning:", str(w)))
    integrity = s.get("trace_integrity") or {}
    if integrity.get("damaged_nodes"):
        out.append(Banner(True, "Damaged traces:",
                          f"the trace files of {', '.join(integrity['damaged_nodes'])} could not be read whole "
                          f"({integrity.get('truncated', 0)} cut mid-record, {integrity.get('corrupt', 0)} with bytes "
                          f"that are not trace records, {integrity.get('bytes_skipped', 0)} bytes skipped); "
                          "deliveries and counts from them are missing, so the figures below undercount."))
    for missing in s.get("missing_files") or []:
        out.append(Banner(False, f"No {missing['file']}:", f"{missing['affects']}."))
    in_flight = s.get("in_flight") or {}
    if in_flight.get("messages_propagating_at_end"):
        out.append(Banner(False, "Stopped while messages were in flight:",
                          f"{in_flight.get('rpcs_in_flight_at_end', 0)} RPCs were still on their way and "
                          f"{in_flight.get('messages_propagating_at_end', 0)} messages still propagating when the "
                          "traces ended; a longer linger would let them arrive."))
    if (overload := overloaded(d)) is not None:
        out.append(overload)
    failed = [e for e in s.get("expectations") or [] if not e["passed"]]
    if failed:
        out.append(Banner(True, "Expectations failed:", "; ".join(f"{e['expr']} ({e['message']})" for e in failed)))
    return out


def _rows(pairs: list[tuple[str, Any]]) -> Rows:
    return [(k, fmt(v)) for k, v in pairs]


def experiment(d: RunData) -> tuple[Rows, Rows]:
    run = d.run
    m, exp = run.manifest, run.experiment
    shaping = m.get("shaping") or {}
    host = m.get("host") or {}
    routers = sorted({str(n.get("router")) for n in run.topology_nodes() if n.get("router")})
    left = [
        ("experiment", m.get("experiment") or exp.get("source")),
        ("name", run.name),
        ("backend", m.get("backend")),
        ("router", ", ".join(routers) or None),
        ("nodes", d.summary.get("nodes")),
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
        ("shaping path", shaping.get("path")),
        ("netem available", shaping.get("netem_available")),
        ("shaping detail", shaping.get("detail")),
        ("delay line", delay_line(m.get("delay_line"))),
        ("tool version", m.get("version")),
        ("host", host.get("platform")),
        ("kernel", host.get("kernel")),
        ("cpus", host.get("cpus")),
        ("memory", f"{host['memory_bytes'] / 2**30:.1f} GiB" if host.get("memory_bytes") else None),
        ("events processed", m.get("events_processed")),
        ("run directory", str(run.path)),
    ]
    return _rows(left), _rows(right)


def delay_line(stats: dict[str, Any] | None) -> str | None:
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


# Whole-run figures counted from SEND_RPC events: in a run where an
# implementation traces no RPCs of its own (rust-libp2p, a bare image) they
# count only the others' RPCs, so the report says so instead of the count
# (amplification 0 where only censoring sybils traced theirs).
RPC_FIGURES = frozenset({
    "transmissions", "amplification", "control_publish", "control_graft", "control_prune", "control_ihave",
    "control_iwant", "rpcs_sent", "rpcs_dropped", "bytes_sent", "load_gini", "load_max_over_mean",
    "rpcs_in_flight_at_end",
})


def untraced_rpcs(s: dict[str, Any]) -> list[str]:
    """The run's implementations whose traces cannot hold their RPCs
    (analysis/implementations.py lists `rpcs_sent` unavailable for them)."""
    return sorted(impl for impl, fig in (s.get("implementations") or {}).items()
                  if "rpcs_sent" in fig.get("unavailable", ()))


def _whole_run(s: dict[str, Any], key: str, f: Callable[[Any], str] = fmt) -> str:
    """One whole-run figure as the report shows it: `f` of its value, or
    "unavailable" with who traces no RPCs for a figure counted from them."""
    if key in RPC_FIGURES and (who := untraced_rpcs(s)):
        return f"{UNAVAILABLE} ({', '.join(who)}: no RPCs traced)"
    return f(s.get(key))


def cards(s: dict[str, Any]) -> Rows:
    return [(_whole_run(s, k, f), label) for label, k, f in CARDS]


SUMMARY_ROWS = [
    ("nodes", "nodes"), ("trace events", "events"), ("messages", "messages"),
    ("expected deliveries", "expected_deliveries"), ("deliveries", "deliveries"),
    ("delivery ratio", "delivery_ratio"), ("messages lost (0 deliveries)", "messages_lost"),
    ("recipients down while the message spread", "stayed_up_went_down"),
    ("delivery ratio, recipients that stayed up", "stayed_up_delivery_ratio"),
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


def summary(s: dict[str, Any]) -> tuple[Rows, Rows]:
    half = len(SUMMARY_ROWS) // 2
    return ([(label, _whole_run(s, key)) for label, key in SUMMARY_ROWS[:half]],
            [(label, _whole_run(s, key)) for label, key in SUMMARY_ROWS[half:]])


def expectations(s: dict[str, Any]) -> list[tuple[bool, str, str]]:
    return [(bool(e["passed"]), str(e["expr"]), fmt(e["actual"])) for e in s.get("expectations") or []]


IMPLEMENTATION_ROWS = [
    ("nodes", "nodes"),
    ("delivery ratio (as receivers)", "delivery_ratio"),
    ("latency p50 ms (as receivers)", "latency_p50_ms"),
    ("latency p99 ms (as receivers)", "latency_p99_ms"),
    ("duplicates per delivery", "duplicates_per_delivery"),
    ("RPCs sent", "rpcs_sent"),
    ("bytes sent", "bytes_sent"),
    # test-plans' gossipsub-interop figures (analysis/implementations.py)
    ("test-plans: p50 to disseminate ms", "dissemination_p50_ms"),
    ("test-plans: duplicates per node per message", "duplicates_per_node"),
    ("test-plans: reach (mean, worst message)", "reach"),
    ("trace events recorded", "trace_events"),
]
UNAVAILABLE = "unavailable"


def implementations(s: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The implementations of a run side by side (issue 12): their names and
    a row per figure; a figure an implementation's traces cannot supply reads
    "unavailable", never 0. A run of one implementation gets its one column
    too, since test-plans reports its three figures for every run; only a run
    directory from before implementations were recorded gets nothing."""
    impls = s.get("implementations") or {}
    if not impls:
        return [], []

    def cell(fig: dict[str, Any], key: str) -> str:
        if key in fig.get("unavailable", ()):
            return UNAVAILABLE
        v = fig.get(key)
        if key == "trace_events":
            return "all (go-format trace)" if v is None else ", ".join(v)
        if key == "reach" and v is not None:
            return f"{fmt(v)} ({fmt(fig.get('reach_min'))})"
        return fmt(v)

    return list(impls), [(label, [cell(fig, key) for fig in impls.values()]) for label, key in IMPLEMENTATION_ROWS]


def recovery(s: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for r in s.get("recovery") or []:
        nodes = ", ".join(r["nodes"][:6]) + ("…" if len(r["nodes"]) > 6 else "")
        state = "pass" if r["recovered"] else ("fail" if r["recovered"] is False else "")
        text = fmt(r["recovery_s"]) if r["recovered"] else (
            "not recovered" if r["recovered"] is False else "no messages")
        out.append({"t": fmt(r["t_s"]), "action": str(r["action"]), "nodes": nodes, "pre": fmt(r["pre_ratio"]),
                    "min": fmt(r["min_ratio"]), "state": state, "recovery": text})
    return out


FIDELITY_COLUMNS = [("node", "node"), ("CPU (s)", "cpu_s"), ("at rest (ms/s)", "rest_ms_per_s"),
                    ("under load (ms/s)", "load_ms_per_s"), ("deliveries", "deliveries"),
                    ("per delivery (ms)", "ms_per_delivery"), ("lag p50 (ms)", "lag_p50_ms"),
                    ("lag p99 (ms)", "lag_p99_ms"), ("lag max (ms)", "lag_max_ms")]


def _fidelity(d: RunData) -> dict[str, Any] | None:
    """analysis/fidelity.py's figures for the run; None without router-cpu.json."""
    run, s, nodes = d.run, d.summary, d.table("nodes")
    delivered = ({str(r.node): int(r.delivered) for r in nodes.itertuples()}
                 if len(nodes) and "delivered" in nodes.columns else {})
    return fidelity(run.path, run.manifest, delivered, s.get("latency_p50_ms"), s.get("messages"), s.get("stretch_p50"))


def overloaded(d: RunData) -> Banner | None:
    """A banner when one message's burst does not fit the host (burst load
    above 1): later hops waited for a core, so the latencies are partly the
    host's. None when it fits or the run does not say."""
    f = _fidelity(d)
    if f is None or f["burst_load"] is None or f["burst_load"] <= 1:
        return None
    return Banner(True, "Host overloaded by each message:",
                  f"one message costs the routers {fmt(f['burst_cpu_ms'])} ms of CPU together, "
                  f"{fmt(f['burst_load'])} times what {f['host_cpus']} cores at {f['faithful_share'] * 100:.0f}% give "
                  f"in the {fmt(f['burst_spread_ms'])} ms it has to spread: later hops waited for a core, so the "
                  "latencies below are partly the host's, not the network's (the fidelity section; a time dilation "
                  f"of about {fmt(f['dilation_for_burst'])} would fit it).")


def fidelity_tables(d: RunData) -> dict[str, Any] | None:
    """Per node: the CPU its router used and its event-loop lag; the budget
    and the burst load (analysis/fidelity.py). None without router-cpu.json."""
    run = d.run
    f = _fidelity(d)
    if f is None:
        return None
    share = f"{f['faithful_share'] * 100:.0f}%"
    at_up = run.manifest.get("event_loop_lag_at_up") or {}
    budget = _rows([
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
          if at_up.get("per_node") else []),
        *([("time dilation", f"x{k:g}: the windows and rates above are the wall clock's, the rates {k:g} times lower "
                             "than the experiment's; the lag is on the experiment's clock")]
          if (k := run.manifest.get("time_dilation")) else []),
    ])
    return {"budget": budget, "columns": [label for label, _ in FIDELITY_COLUMNS],
            "rows": [[fmt(r[key]) for _, key in FIDELITY_COLUMNS] for r in f["per_node"]]}


def comparison(datas: list[RunData]) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]:
    """Runs side by side: (name, backend) per run, and a row per summary figure."""
    heads = [(d.run.name, str(d.summary.get("backend") or "")) for d in datas]
    return heads, [(label, [_whole_run(d.summary, key) for d in datas]) for label, key in SUMMARY_ROWS]
