"""What the simulator counts as it runs, in the reference simulator's terms,
and the summary `testbed sim` prints from it. Percentiles are interpolated
as Spark's are, so the summary agrees with `testbed analyze`."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimStats:
    """Counts in the reference simulator's terms."""

    nodes: int = 0
    messages: int = 0
    publish: int = 0
    deliver: int = 0
    connect: int = 0
    transmissions: int = 0
    graft: int = 0
    prune: int = 0
    ihave: int = 0
    iwant: int = 0
    rpcs: int = 0
    rpcs_lost: int = 0
    expected_deliveries: int = 0
    on_time_deliveries: int = 0
    events: int = 0
    latencies_ns: array = field(default_factory=lambda: array("q"))  # 8 bytes each, not an int object


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
