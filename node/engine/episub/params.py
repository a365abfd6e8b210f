"""Episub's design parameters (episub draft, "Design Parameters for View
Sizes" and the sections that name a timer, a TTL or a threshold), with the
draft's starting values where it gives them and the precedent for the rest.

View sizes follow the draft's formulas: `A(N) = log(N) + c` and
`P(N) = k * A(N)` from HyParView, `C_rand = log(N)` from the draft's
fault-tolerance argument, and GoCast's `A = C_rand + C_near`. The draft's two
formulas for A disagree (log(10,000) + 1 = 5, but C_rand + C_near = 7 in its
starting values), so A is the larger of the two: with the defaults this gives
exactly the draft's starting values N = 10,000, C_rand = 4, C_near = 3,
A = 7, P = 42. log is base 10, as HyParView's own choice of an active view
of 5 for 10,000 nodes implies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def log_n(target_size: int) -> int:
    """log(N), rounded: the random-link count and the base of A(N)."""
    return max(1, round(math.log10(target_size)))


def active_size(target_size: int, c: int) -> int:
    """A(N) = log(N) + c."""
    return log_n(target_size) + c


def passive_size(active: int, k: int) -> int:
    """P(N) = k * A(N)."""
    return k * active


@dataclass(frozen=True)
class EpisubParams:
    """`N`, `c`, `k`: HyParView's sizing (the draft's N = 10,000, c = 1,
    k = 6). `C_near`: GoCast's nearby links (the draft's 3). `C_rand`: None
    means log(N).

    Random walks: `active_random_walk_length` is the TTL of JOIN and SHUFFLE,
    `passive_random_walk_length` the TTL of FORWARDJOIN (HyParView's ARWL = 6,
    PRWL = 3); `leave_ttl` the TTL of LEAVE.

    Timers, in seconds: `heartbeat_interval` flushes the lazy IHAVE queue
    (the draft's "order of 0.1s"); `missing_interval` is the single
    missing-message timer (a message is missing on its second touch);
    `graft_attempts` ticks without the message make it lost;
    `stabilization_interval`, `shuffle_interval` and `passive_check_interval`
    are the means of randomized timers (drawn uniformly in [0.5, 1.5] times
    the mean).

    Proximity: `alpha` is the factor by which a candidate must be closer than
    a near neighbour; `rtt_smoothing` the weight of a new RTT sample in the
    smoothed running average (TCP's 1/8, RFC 6298). Tree: `optimization_threshold`
    is the hop difference beyond which a lazy link replaces an eager one;
    `eager_repair` chooses the draft's alternative of promoting every lazy
    peer with an empty GRAFT when an eager peer goes down. `shuffle_active`
    and `shuffle_passive` are HyParView's k_a and k_p; `passive_check_count`
    how many passive nodes each check probes.
    """

    N: int = 10_000
    c: int = 1
    k: int = 6
    C_rand: int | None = None
    C_near: int = 3
    active_random_walk_length: int = 6
    passive_random_walk_length: int = 3
    leave_ttl: int = 2
    heartbeat_interval: float = 0.1
    heartbeat_initial_delay: float = 0.1
    missing_interval: float = 0.2
    graft_attempts: int = 5
    stabilization_interval: float = 1.0
    shuffle_interval: float = 10.0
    passive_check_interval: float = 5.0
    passive_check_count: int = 1
    shuffle_active: int = 3
    shuffle_passive: int = 4
    alpha: float = 2.0
    rtt_smoothing: float = 0.125
    optimization_threshold: int = 3
    eager_repair: bool = True
    cache_ttl: float = 60.0
    seen_ttl: float = 120.0

    @property
    def c_rand(self) -> int:
        return log_n(self.N) if self.C_rand is None else self.C_rand

    @property
    def A(self) -> int:
        return max(active_size(self.N, self.c), self.c_rand + self.C_near)

    @property
    def P(self) -> int:
        return passive_size(self.A, self.k)

    def check(self) -> None:
        if self.N < 2:
            raise ValueError(f"N must be at least 2, got {self.N}")
        for name in ("c", "k", "C_near", "active_random_walk_length", "passive_random_walk_length",
                     "leave_ttl", "shuffle_active", "shuffle_passive", "passive_check_count",
                     "optimization_threshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.c_rand < 1:
            raise ValueError("C_rand must be at least 1: an overlay without random links may not connect")
        if self.k < 1:
            raise ValueError("k must be at least 1")
        if self.graft_attempts < 1:
            raise ValueError("graft_attempts must be at least 1")
        for name in ("heartbeat_interval", "missing_interval", "stabilization_interval", "shuffle_interval",
                     "passive_check_interval", "cache_ttl", "seen_ttl"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.heartbeat_initial_delay < 0:
            raise ValueError("heartbeat_initial_delay must not be negative")
        if self.alpha < 1:
            raise ValueError(f"alpha must be at least 1, got {self.alpha}")
        if not 0 < self.rtt_smoothing <= 1:
            raise ValueError(f"rtt_smoothing must be in (0, 1], got {self.rtt_smoothing}")
