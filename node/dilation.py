"""Time dilation: an experiment run k times slower than it is written, so
that the host's CPU time per event weighs k times less against the
experiment's clock. This is time-warped emulation (Gupta et al., "To
Infinity and Beyond: Time-Warped Network Emulation", NSDI 2006; DieCast,
NSDI 2008): a small host runs a network as if it had k times its cores.

Everything the protocol sees is slowed together. The orchestrator gives the
links k times their latency and jitter and 1/k of their rate, and the
workload and churn k times their spacing (orchestrator/run/wallclock.py); a
router's timers (its heartbeat) run k times slower; and every timestamp a
router or the orchestrator records is on the experiment's clock,
`epoch + (wall - epoch) / k`, with one epoch for the whole run (its t0). So
traces, run events and lag read as if the run had gone at the written speed.
What no one dilates: the kernel's TCP timers (delayed ACK, retransmission
timeout), which look k times shorter on the experiment's clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

MAX_DILATION = 1000.0


@dataclass(frozen=True)
class DilatedClock:
    epoch_ns: int = 0  # where the experiment's clock and the wall clock agree
    factor: float = 1.0  # wall seconds per experiment second

    def __post_init__(self) -> None:
        if not 1.0 <= self.factor <= MAX_DILATION:
            raise ValueError(f"time dilation must be in [1, {MAX_DILATION:g}], not {self.factor!r}")

    def virtual_ns(self, wall_ns: int) -> int:
        """The experiment's time at wall time `wall_ns`."""
        if self.factor == 1.0:
            return wall_ns
        return self.epoch_ns + round((wall_ns - self.epoch_ns) / self.factor)

    def now_ns(self) -> int:
        return self.virtual_ns(time.time_ns())

    def wall_s(self, seconds: float) -> float:
        """How long `seconds` of the experiment's time take on the wall clock."""
        return seconds * self.factor
