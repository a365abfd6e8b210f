"""How faithful a real run was, from the run itself: what CPU each router
used, its event-loop lag, and the budget: how many routers this host can
run at this message rate before they compete for the cores.

Why it matters: a router that waits for a core adds that wait to every
latency it reports. The event-loop lag (manifest.json, event_loop_lag)
shows the waits that happened; the CPU figures (router-cpu.json, written by
orchestrator/records/router_cpu.py at "up", at the first publish ("workload") and
at "down") show what each router costs, so the budget can be given for a
run of any size:

- at rest: CPU per router-second over [up, workload] (no messages yet);
- per delivery: the CPU of [workload, down] less the rest rate times its
  length, over the messages the node delivered;
- per router-second at this rate: rest + per delivery x deliveries per
  second, the run's own rate;
- budget: host cores x FAITHFUL_SHARE / that figure. FAITHFUL_SHARE keeps
  cores idle a third of the time: a queue's waiting time grows as
  1 / (1 - utilisation), so beyond about 70 % busy the waits (the lag) grow
  faster than the work.
- burst: the budget is an average, and messages are not. One message costs
  the routers together its deliveries (every subscriber's: the run's
  deliveries over its messages) x per-delivery CPU, and they must spend it
  while it spreads. At the network's own speed it spreads in about its
  shortest paths' time: the run's latency p50 over its stretch p50 (latency
  over the shortest overlay path, per delivery), which overload does not
  inflate, times the dilation on the wall clock. The burst load is that CPU
  over cores x FAITHFUL_SHARE x that time: above 1 the later hops wait for a
  core and the host, not the network, sets the latency. The time dilation
  at which one message's burst fits is the run's dilation times the load.
  Measured at full speed it comes out low: spread-out frames cost a router
  more wake-ups, so the CPU per delivery grows with the dilation. Measured
  at 250 routers on two cores (scale-250.yaml): 2.5 ms per delivery and a
  load of 7.8 at full speed (lag p99 415 ms at the median node); at dilation
  12, over seven runs on three days, 4.0-7.3 ms and 0.97-1.79 (the edge: each
  passed its latency bound with lag p99 6.3-17.7 ms at the worst node; the
  routers' CPU in the workload varied by a third between runs of one code).
  Without the stretch, the run's latency p50 stands in for the spread: under
  overload that time is inflated and the dilation is a lower bound.

Everything is None where the run does not say (no router-cpu.json: a
simulated run, or a run from before it existed).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CPU_FILE = "router-cpu.json"
FAITHFUL_SHARE = 0.7
MIN_REST_S = 1.0  # a shorter rest window says too little about the rest rate
NS = 1e9


@dataclass(frozen=True)
class NodeFidelity:
    node: str
    cpu_s: float | None  # CPU the router used from up to down
    rest_ms_per_s: float | None  # CPU at rest, ms per second
    load_ms_per_s: float | None  # CPU per second over [workload, down]
    deliveries: int | None
    ms_per_delivery: float | None
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None


def _samples(run_dir: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    try:
        doc = json.loads((Path(run_dir) / CPU_FILE).read_text())
    except (OSError, ValueError):
        return {}, {}
    if not isinstance(doc, dict):
        return {}, {}
    return doc, {s["at"]: s for s in doc.get("samples") or [] if isinstance(s, dict) and "at" in s}


def _delta(a: dict[str, Any] | None, b: dict[str, Any] | None, node: str) -> float | None:
    """CPU between two samples; None when either lacks the node or the counter
    went back (the router was restarted in between)."""
    if a is None or b is None:
        return None
    x, y = (a.get("cpu_s") or {}).get(node), (b.get("cpu_s") or {}).get(node)
    if x is None or y is None or y < x:
        return None
    return float(y) - float(x)


def _span(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if a is None or b is None:
        return None
    return (int(b["t_ns"]) - int(a["t_ns"])) / NS


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fidelity(run_dir: Path, manifest: dict[str, Any], deliveries: dict[str, int],
             latency_p50_ms: float | None = None, messages: int | None = None,
             stretch_p50: float | None = None) -> dict[str, Any] | None:
    """The fidelity section's figures: per node, the budget and the burst.
    `deliveries` are each node's delivered messages (the analysis' nodes
    table), `latency_p50_ms`, `messages` and `stretch_p50` the run's
    (summary.json; without `messages` every router is taken to receive
    every message)."""
    doc, at = _samples(run_dir)
    if not at:
        return None
    up, work, down = at.get("up"), at.get("workload"), at.get("down")
    rest_from, rest_to = (up, work) if work is not None else (up, down)
    rest_s, load_s = _span(rest_from, rest_to), _span(work, down)
    lags = ((manifest.get("event_loop_lag") or {}).get("per_node")) or {}
    nodes = sorted(set().union(*((s.get("cpu_s") or {}) for s in at.values())) | set(lags))
    rows = []
    for node in nodes:
        total = _delta(up, down, node)
        rest = _delta(rest_from, rest_to, node) if rest_s and rest_s >= MIN_REST_S else None
        rest_rate = rest / rest_s if rest is not None and rest_s else None
        load = _delta(work, down, node)
        got = deliveries.get(node)
        per_delivery = None
        if load is not None and rest_rate is not None and load_s and got:
            per_delivery = max(0.0, load - rest_rate * load_s) / got
        lag = lags.get(node) or {}
        rows.append(NodeFidelity(
            node=node, cpu_s=total,
            rest_ms_per_s=rest_rate * 1e3 if rest_rate is not None else None,
            load_ms_per_s=load / load_s * 1e3 if load is not None and load_s else None,
            deliveries=got, ms_per_delivery=per_delivery * 1e3 if per_delivery is not None else None,
            lag_p50_ms=lag.get("p50_ms"), lag_p99_ms=lag.get("p99_ms"), lag_max_ms=lag.get("max_ms"),
        ))
    cores = doc.get("host_cpus") or (manifest.get("host") or {}).get("cpus")
    rest_med = _median([r.rest_ms_per_s for r in rows])
    delivery_med = _median([r.ms_per_delivery for r in rows])
    rate = (_median([float(r.deliveries) for r in rows if r.deliveries]) or 0.0) / load_s if load_s else None
    at_rate = (rest_med + delivery_med * rate) if None not in (rest_med, delivery_med, rate) else None
    if at_rate is None:
        at_rate = _median([r.load_ms_per_s for r in rows])  # no rest window: the load window as a whole

    def budget(ms_per_s: float | None) -> int | None:
        if not cores or not ms_per_s:
            return None
        return math.floor(cores * FAITHFUL_SHARE * 1e3 / ms_per_s)

    dilation = float(manifest.get("time_dilation") or 1.0)
    per_message = sum(deliveries.values()) / messages if messages else len(rows)
    burst_ms = per_message * delivery_med if delivery_med is not None else None
    at_network_speed = bool(latency_p50_ms and stretch_p50 and stretch_p50 >= 1.0)
    spread_ms = None
    if latency_p50_ms:
        spread_ms = (latency_p50_ms / stretch_p50 if at_network_speed else latency_p50_ms) * dilation
    burst_load = None
    if burst_ms is not None and cores and spread_ms:
        burst_load = burst_ms / (cores * FAITHFUL_SHARE * spread_ms)

    return {
        "source": doc.get("source"),
        "host_cpus": cores,
        "rest_window_s": rest_s,
        "load_window_s": load_s,
        "deliveries_per_router_s": rate,
        "rest_ms_per_router_s": rest_med,
        "ms_per_delivery": delivery_med,
        "ms_per_router_s_at_rate": at_rate,
        "routers": len(rows),
        "budget_at_rest": budget(rest_med),
        "budget_at_rate": budget(at_rate),
        "burst_cpu_ms": burst_ms,
        "burst_spread_ms": spread_ms,
        "burst_spread_from": "latency p50 / stretch p50" if at_network_speed else "latency p50" if spread_ms else None,
        "burst_load": burst_load,
        "dilation_for_burst": dilation * burst_load if burst_load is not None else None,
        "faithful_share": FAITHFUL_SHARE,
        "per_node": [asdict(r) for r in rows],
    }
