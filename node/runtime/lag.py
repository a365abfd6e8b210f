"""Event-loop lag: how late the node's timers fire. A loaded host (too many
routers per core) shows up here first, and a run whose nodes lagged by more
than a few milliseconds measures the host, not the protocol; the controller
turns a high p99 into a manifest warning.

Samples are the lateness of the one timer the router has anyway, its
heartbeat (one a second with gossipsub's defaults), kept in a bounded ring;
`summary()` gives p50/p99/max in milliseconds. The controller opens the
window the run measures when every node is up (`reset`) and closes it when
the run ends (`end`), before any node leaves: what comes after is the
testbed's teardown, where every router leaves at once: at 250 routers on two
cores the worst sample of two otherwise quiet dilated runs was 275 ms of wall
clock in both, as one heartbeat caught in that burst would be (docs/wire.md,
issue 13's ninth pass).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

MAX_SAMPLES = 20_000


def _percentile(sorted_values: list[float], q: float) -> float:
    rank = max(math.ceil(q / 100 * len(sorted_values)), 1)
    return sorted_values[rank - 1]


class LagMeter:
    def __init__(self) -> None:
        self._samples: deque[float] = deque(maxlen=MAX_SAMPLES)
        self.max = 0.0
        self.count = 0
        self.ended = False

    def record(self, lateness_s: float) -> None:
        if self.ended:
            return
        lateness = max(lateness_s, 0.0)
        self._samples.append(lateness)
        self.count += 1
        if lateness > self.max:
            self.max = lateness

    def reset(self) -> None:
        """Start a new measurement window (the end of `up`; benchmarks: lag at rest vs under load)."""
        self._samples.clear()
        self.max = 0.0
        self.count = 0
        self.ended = False

    def end(self) -> None:
        """Close the window: later lateness is not recorded."""
        self.ended = True

    def summary(self) -> dict[str, Any]:
        """p50/p99 over the last MAX_SAMPLES samples, max over the whole life."""
        if not self._samples:
            return {"p50_ms": None, "p99_ms": None, "max_ms": None, "samples": 0, "ended": self.ended}
        values = sorted(self._samples)
        return {
            "p50_ms": round(_percentile(values, 50) * 1000, 3),
            "p99_ms": round(_percentile(values, 99) * 1000, 3),
            "max_ms": round(self.max * 1000, 3),
            "samples": self.count,
            "ended": self.ended,
        }

    def write(self, path: Path, node: str) -> None:
        doc = {"node": node, "pid": os.getpid(), "written_at_ns": time.time_ns(), **self.summary()}
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc) + "\n")
            os.replace(tmp, path)
        except OSError:
            pass  # a lag file is a courtesy; never take the node down for it
