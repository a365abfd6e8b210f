"""`testbed sim`: resolve an experiment, run it on the virtual clock and leave a
run directory in the layout every backend writes (docs/architecture.md), plus a
summary in the reference simulator's terms."""

from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from node.engine.api import NS
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.peers import wire_facts
from orchestrator.runinfo import RunWriter, host_facts
from orchestrator.simulator import WARMUP_S, SimStats, Simulator
from orchestrator.version import tool_version


@dataclass(frozen=True)
class SimResult:
    run_dir: Path
    summary: dict[str, Any]


def percentile(sorted_values: list[int], q: float) -> float | None:
    """The q-th percentile of an ascending list, interpolated linearly between
    the closest ranks: the definition Spark's `percentile` uses, so the
    simulator's summary agrees with `testbed analyze`. None when empty."""
    if not sorted_values:
        return None
    pos = q / 100 * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(stats: SimStats, wall_s: float, sim_s: float) -> dict[str, Any]:
    lat = sorted(stats.latencies_ns)

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v / 1e6, 3)

    ratio = stats.on_time_deliveries / stats.expected_deliveries if stats.expected_deliveries else None
    return {
        "nodes": stats.nodes,
        "messages": stats.messages,
        "publish": stats.publish,
        "deliver": stats.deliver,
        "connect": stats.connect,
        "pubsub.publish": stats.transmissions,
        "graft": stats.graft,
        "prune": stats.prune,
        "ihave": stats.ihave,
        "iwant": stats.iwant,
        "rpcs": stats.rpcs,
        "rpcs_lost": stats.rpcs_lost,
        "expected_deliveries": stats.expected_deliveries,
        "deliveries": stats.on_time_deliveries,
        "delivery_ratio": None if ratio is None else round(ratio, 6),
        "latency_p50_ms": ms(percentile(lat, 50)),
        "latency_p99_ms": ms(percentile(lat, 99)),
        "latency_max_ms": ms(lat[-1] if lat else None),
        "events_processed": stats.events,
        "simulated_s": round(sim_s, 3),
        "wall_s": round(wall_s, 3),
        "events_per_s": round(stats.events / wall_s) if wall_s > 0 else None,
    }


def run_simulation(
    resolved: ResolvedExperiment,
    resolved_yaml: str,
    run_dir: Path,
    progress=None,
) -> SimResult:
    writer = RunWriter(run_dir)
    writer.write_resolved(resolved_yaml)
    writer.write_topology(resolved)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    wall0 = time.perf_counter()
    sim = Simulator(resolved, run_dir / "traces", writer.event, WARMUP_S)
    stats = sim.run(progress)
    wall = time.perf_counter() - wall0
    summary = summarize(stats, wall, sim.now / NS)
    writer.write_manifest({
        "tool": "gossip-testbed",
        "version": tool_version(),
        "backend": "sim",
        "experiment": resolved.source,
        "name": resolved.name,
        "seed": resolved.seed,
        "clock": "virtual",
        "t0_ns": 0,
        "workload_t0_ns": sim.warmup,
        "started_at": started_at,
        "wall_time_s": round(wall, 3),
        "shaping": {
            "path": "virtual",
            "netem_available": None,
            "detail": "latency, jitter, loss and uplink serialization modelled by the simulator",
        },
        "host": host_facts(),
        "events_processed": stats.events,
        "nodes": len(resolved.nodes),
        "python": platform.python_version(),
        "warnings": [],
        **wire_facts(resolved),
        "sim_summary": summary,
    })
    writer.close()
    return SimResult(run_dir, summary)
