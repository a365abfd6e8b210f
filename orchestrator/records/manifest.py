"""manifest.json: one builder for every run, simulated or real, so the fields
docs/architecture.md lists are written the same way whoever ran the nodes;
plus the event-loop lag summary that says whether the host was overloaded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.records.runinfo import host_facts
from orchestrator.version import tool_version

LAG_WARN_MS = 20.0


def build_manifest(
    *, backend: str, experiment: str | None, name: str, seed: int | None, clock: str, t0_ns: int | None,
    workload_t0_ns: int | None, started_at: str | None, shaping_path: str | None, netem_available: bool | None,
    shaping_detail: str | None, nodes: int, warnings: list[str], **extra: Any,
) -> dict[str, Any]:
    """The manifest's common fields; `extra` adds what only some runs have
    (testbed, status, wall_time_s, event_loop_lag, sim_summary, ...)."""
    return {
        "tool": "gossip-testbed", "version": tool_version(), "backend": backend, "experiment": experiment,
        "name": name, "seed": seed, "clock": clock, "t0_ns": t0_ns, "workload_t0_ns": workload_t0_ns,
        "started_at": started_at,
        "shaping": {"path": shaping_path, "netem_available": netem_available, "detail": shaping_detail},
        "host": host_facts(), "nodes": nodes, **extra, "warnings": list(warnings),
    }


def read_lag_files(run_dir: Path, names: list[str], lags: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each node's event-loop lag: what it wrote at exit (node-logs/<node>.lag.json),
    else what it answered to `drain` (`lags`)."""
    out = dict(lags)
    for name in names:
        try:
            doc = json.loads((run_dir / "node-logs" / f"{name}.lag.json").read_text())
        except (OSError, ValueError):
            continue
        if doc.get("samples"):
            out[name] = {k: doc.get(k) for k in ("p50_ms", "p99_ms", "max_ms", "samples")}
    return out


def lag_summary(lags: Mapping[str, dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """The manifest's event_loop_lag, and a warning when the host was loaded
    enough to distort latencies."""
    p99s = [v["p99_ms"] for v in lags.values() if v.get("p99_ms") is not None]
    summary = {
        "p99_max_ms": max(p99s) if p99s else None,
        "p99_median_ms": sorted(p99s)[len(p99s) // 2] if p99s else None,
        "max_ms": max((v.get("max_ms") or 0 for v in lags.values()), default=None),
        "per_node": dict(lags),
    }
    warning = None
    if p99s and max(p99s) > LAG_WARN_MS:
        worst = max(lags, key=lambda n: lags[n].get("p99_ms") or 0)
        warning = (f"high event-loop lag: p99 up to {max(p99s):.1f} ms ({worst}); the host was loaded, "
                   "latencies include scheduling delay")
    return summary, warning
