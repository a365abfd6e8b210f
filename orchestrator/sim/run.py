"""`testbed sim`: resolve an experiment, run it on the virtual clock and leave a
run directory in the layout every backend writes (docs/architecture.md), plus a
summary in the reference simulator's terms."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from node.engine.api import NS
from node.trace.vocab import RunEvent
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.records.manifest import build_manifest
from orchestrator.routers.peers import wire_facts
from orchestrator.progress import Reporter
from orchestrator.records.runinfo import RunWriter
from orchestrator.sim.trace_level import COUNTERS_FILE, TraceLevel
from orchestrator.sim.stats import summarize
from orchestrator.sim.simulator import WARMUP_S, Simulator


@dataclass(frozen=True)
class SimResult:
    run_dir: Path
    summary: dict[str, Any]
    peak_rss_mb: float | None = None  # a simulation in another process (on PyPy): its peak


def run_simulation(
    resolved: ResolvedExperiment,
    resolved_yaml: str,
    run_dir: Path,
    reporter: Reporter | None = None,
    trace_level: TraceLevel = TraceLevel(),
) -> SimResult:
    reporter = reporter or Reporter()
    writer = RunWriter(run_dir)
    writer.write_resolved(resolved_yaml)
    writer.write_topology(resolved)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    wall0 = time.perf_counter()
    warnings: list[str] = []

    def log_event(t_ns: int, kind: str, **fields: Any) -> None:
        if kind == RunEvent.WARNING:  # skipped messages and churn: the manifest says so too
            warnings.append(fields["message"])
        writer.event(t_ns, kind, **fields)

    sim = Simulator(resolved, run_dir / "traces", log_event, WARMUP_S, trace_level)
    end = sim.end_time()
    with reporter.phase(f"simulating {resolved.name}: {len(resolved.nodes)} nodes", 100) as advance:  # percent
        stats = sim.run(lambda ns: advance(ns * 100 / end))
    if sim.counts is not None:
        sim.counts.write(run_dir / COUNTERS_FILE)
    wall = time.perf_counter() - wall0
    summary = summarize(stats, wall, sim.now / NS)
    writer.write_manifest(build_manifest(
        backend="sim", experiment=resolved.source, name=resolved.name, seed=resolved.seed, clock="virtual",
        t0_ns=0, workload_t0_ns=sim.warmup, started_at=started_at, shaping_path="virtual", netem_available=None,
        shaping_detail="latency, jitter, loss and uplink serialization modelled by the simulator",
        nodes=len(resolved.nodes), warnings=warnings, wall_time_s=round(wall, 3), events_processed=stats.events,
        python=platform.python_version(), interpreter=platform.python_implementation(),
        **wire_facts(resolved), sim_summary=summary,
        trace=trace_facts(trace_level, sim.traced, len(resolved.nodes)),
    ))
    writer.close()
    return SimResult(run_dir, summary)


def trace_facts(level: TraceLevel, traced: frozenset[str], nodes: int) -> dict[str, Any]:
    """The manifest's `trace`: the level, and at `sample` which nodes were
    traced and where the counts of all nodes are."""
    if level.sample is None:
        return {"level": level.name}
    return {"level": level.name, "fraction": level.sample, "traced_nodes": len(traced), "nodes": nodes,
            "counters": COUNTERS_FILE, "traced": sorted(traced)}
