"""The CPU each router used, sampled by the controller at three moments of a
run and kept in the run directory (router-cpu.json), so that the report can
say what the routers cost and how many of them this host can run faithfully.

Why samples and not one total: a router's cost has a part that runs whatever
happens (heartbeats, timers: CPU per second at rest) and a part per message
(CPU per delivery). The samples are taken when every node is up ("up"),
just before the first publish ("workload") and when the run stops ("down"),
so the window [up, workload] is the rest and [workload, down] the load; the
analysis (analysis/fidelity.py) separates the two from that.

Where the figures come from is the backend's business (`Backend.cpu_seconds`:
the container's cgroup on Docker, /proc/<pid>/stat on the process backend);
a counter restarts with its router, so a node restarted between two samples
shows a smaller figure in the later one and the analysis leaves it out of
that window. The file is rewritten whole at each sample; `testbed up` and
`testbed down` may be different processes, so nothing is kept in memory.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

FILE = "router-cpu.json"
MOMENTS = ("up", "workload", "down")


def read_samples(run_dir: Path) -> dict[str, object]:
    try:
        doc = json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, ValueError):
        return {"samples": []}
    return doc if isinstance(doc, dict) else {"samples": []}


def record_sample(run_dir: Path, at: str, per_node: dict[str, float], source: str) -> None:
    """Add (or replace) the sample taken at `at` (one of MOMENTS)."""
    if at not in MOMENTS:
        raise ValueError(f"router CPU sample at {at!r}: expected one of {', '.join(MOMENTS)}")
    if not per_node:
        return
    doc = read_samples(run_dir)
    samples = [s for s in doc.get("samples", []) if isinstance(s, dict) and s.get("at") != at]
    samples.append({"at": at, "t_ns": time.time_ns(),
                    "cpu_s": {n: round(v, 6) for n, v in sorted(per_node.items())}})
    samples.sort(key=lambda s: MOMENTS.index(s["at"]) if s.get("at") in MOMENTS else len(MOMENTS))
    doc = {"source": source, "host_cpus": os.cpu_count(), "samples": samples}
    path = Path(run_dir) / FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process, from /proc/<pid>/stat; None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    try:  # fields 14 and 15 of stat(5); the list starts at field 3
        ticks = int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")
