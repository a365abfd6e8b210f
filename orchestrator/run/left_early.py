"""Nodes that left before `down`: a node the controller still counts as
running (its last churn step started or resumed it) whose process or
container is gone when `down` begins. A gossipsub-interop node exits when
its script ends, a router may crash: either way its peers lost it before
the run ended, which the figures of the run must say.

When it left: the container's own FinishedAt and ExitCode where the backend
recorded them (docker: node-logs/<node>.docker.json, written at collection,
and an exited container's state is not changed by the stop that follows);
else only that it was gone by the time `down` looked ("gone_by").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.backends.api import Backend
from orchestrator.experiment.lifecycle import Process
from orchestrator.fanout import fan_out
from orchestrator.run.nodestate import NodeState

PARALLEL = 16  # concurrent is_running questions, as Backend.stop_many asks them


def gone(nodes: Mapping[str, NodeState], backend: Backend) -> list[str]:
    """The nodes meant to run whose process is not running."""
    meant = [n for n, st in nodes.items() if st.life.process is not Process.STOPPED]
    running = dict(zip(meant, fan_out(backend.is_running, meant, PARALLEL)))
    return sorted(n for n in meant if not running[n])


def _rfc3339_ns(text: str) -> int | None:
    """Docker's FinishedAt (nanosecond RFC 3339, Z) as Unix ns; None for its
    zero time or anything unreadable."""
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        seconds = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    if seconds <= 0:
        return None
    return round(seconds) * 1_000_000_000 + int((frac or "0")[:9].ljust(9, "0"))


def facts(run_dir: Path, names: list[str], looked_ns: int, workload_t0_ns: int | None) -> dict[str, dict[str, Any]]:
    """manifest.json's "left_early": per node, when it left (Unix ns, and
    seconds on the workload clock when the workload started) and its exit
    code, where known; else when `down` found it gone."""
    out: dict[str, dict[str, Any]] = {}
    for node in names:
        path = run_dir / "node-logs" / f"{node}.docker.json"
        state = json.loads(path.read_text()) if path.is_file() else {}
        left = _rfc3339_ns(str(state.get("FinishedAt") or ""))
        entry: dict[str, Any] = {"left_at_ns": left} if left is not None else {"gone_by_ns": looked_ns}
        if state.get("ExitCode") is not None:
            entry["exit_code"] = state["ExitCode"]
        if workload_t0_ns is not None:
            entry["t_s"] = round(((left if left is not None else looked_ns) - workload_t0_ns) / 1e9, 3)
        out[node] = entry
    return out


def warning(left: Mapping[str, Mapping[str, Any]]) -> str:
    """The report's word on them (a warning banner)."""
    listed = [_one(n, e) for n, e in sorted(left.items())]
    return (f"{len(listed)} node(s) left before the end of the run, on their own (t: wall seconds after the "
            "workload started): " + ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else ""))


def _one(node: str, e: Mapping[str, Any]) -> str:
    known = "left_at_ns" in e
    if "t_s" in e:
        when = f" at t={e['t_s']:g} s" if known else f" by t={e['t_s']:g} s"
    else:
        when = f" at {datetime.fromtimestamp(e['left_at_ns'] / 1e9, timezone.utc):%H:%M:%S} UTC" if known else " before down"
    code = f" (exit status {e['exit_code']})" if "exit_code" in e else ""
    return f"{node}{when}{code}"
