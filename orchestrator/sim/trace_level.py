"""How much of a simulated run is traced. `full`: every node's trace, as the
real backends write. `sample`: a seeded sample of the nodes (and every node
the workload publishes through) traced in full, plus exact per-node counts
of every trace event type for all nodes (counters.csv). A million nodes'
full traces would take about 70 GB and longer to analyse than to simulate;
the sample keeps every figure of the analysis for its nodes, and the counts
and the simulator's own delivery figures stay exact for everyone
(docs/simulator.md, "Trace levels").

The sample is drawn from the node names with an RNG of its own, so it does
not move any other random draw: a sampled run is the same simulation as the
full one, and its sampled nodes' traces are byte-identical to theirs."""

from __future__ import annotations

import csv
import math
import random
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from node.trace.vocab import TraceType

COUNTERS_FILE = "counters.csv"
_TYPES = tuple(TraceType)


@dataclass(frozen=True)
class TraceLevel:
    """`sample`: the fraction of nodes traced in full (0 < sample < 1), or
    None: every node."""

    sample: float | None = None

    def __post_init__(self) -> None:
        if self.sample is not None and not 0 < self.sample < 1:
            raise ValueError(f"trace sample {self.sample}: a fraction between 0 and 1 (exclusive) is needed")

    @property
    def name(self) -> str:
        return "full" if self.sample is None else "sample"

    def traced(self, names: Sequence[str], seed: int, publishers: Iterable[str] = ()) -> frozenset[str]:
        """The nodes whose trace is kept: all, or the seeded sample (at least
        one node) and every node the workload publishes through: their
        PUBLISH_MESSAGE events are where the sample's latencies start."""
        if self.sample is None:
            return frozenset(names)
        k = max(1, math.ceil(self.sample * len(names)))
        return frozenset(random.Random(f"trace-sample-{seed}").sample(sorted(names), k)) | frozenset(publishers)


class EventCounts:
    """Each node's count of each trace event type, in one flat array of
    8-byte integers (13 types: 104 bytes a node), node `index` at
    `base(index)` onwards, a type at its TraceType number from there."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.width = len(_TYPES)
        self.counts = array("q", bytes(8 * self.width * len(self.names)))

    def base(self, index: int) -> int:
        """Where node `index`'s counts start in `counts`."""
        return index * self.width

    def write(self, path: Path) -> None:
        """counters.csv: node, then one column per TraceType name."""
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["node", *(t.name for t in _TYPES)])
            w = self.width
            for i, name in enumerate(self.names):
                out.writerow([name, *self.counts[i * w:(i + 1) * w]])
