"""The experiment as the wall clock runs it. With `time_dilation: k`
(node/dilation.py) a real backend runs the experiment k times slower than it
is written, and this is the one place that says what that slows: every link's
latency and jitter (k times longer), every uplink's rate (k times lower, so a
frame takes k times as long to serialize), the times of the publishes and
churn actions, the time late edges open (`connect_at`), the duration and the linger. Loss, sizes, the overlay, the
nodes and their seeds stay as they are; the routers' own timers slow down in
the routers (their clock), and what is recorded goes back onto the
experiment's clock there and in the run's event log (orchestrator/records/runinfo.py).
The simulator needs none of this: its clock is the experiment's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from orchestrator.experiment.model import LinkParams, ResolvedExperiment


def slower(link: LinkParams, k: float) -> LinkParams:
    return replace(link, latency_ms=link.latency_ms * k, jitter_ms=link.jitter_ms * k)


@dataclass(frozen=True)
class SlowerLinks:
    """A latency model's pairs, k times slower (picklable when `pairs` is)."""

    pairs: Callable[[str, str], LinkParams]
    k: float

    def __call__(self, a: str, b: str) -> LinkParams:
        return slower(self.pairs(a, b), self.k)


def on_wall_clock(resolved: ResolvedExperiment) -> ResolvedExperiment:
    """`resolved` with its times, latencies and rates as the wall clock sees
    them; `resolved` itself when it is not dilated."""
    k = resolved.time_dilation
    if k == 1.0:
        return resolved
    return replace(
        resolved,
        nodes=tuple(replace(n, uplink_bps=None if n.uplink_bps is None else max(round(n.uplink_bps / k), 1),
                            connect_at=None if n.connect_at is None else n.connect_at * k)
                    for n in resolved.nodes),
        links={edge: slower(link, k) for edge, link in resolved.links.items()},
        default_link=slower(resolved.default_link, k),
        pair_link=None if resolved.pair_link is None else SlowerLinks(resolved.pair_link, k),
        publishes=tuple(replace(p, at=p.at * k) for p in resolved.publishes),
        churn=tuple(replace(c, at=c.at * k) for c in resolved.churn),
        duration=resolved.duration * k,
        linger=resolved.linger * k,
    )
