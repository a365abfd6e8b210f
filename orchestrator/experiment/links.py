"""Latency models: the one-way latency of every pair of nodes, symmetric and
defined for ANY pair (not only overlay edges), because gossip and fanout open
connections outside the initial overlay.

- constant: every pair `ms`.
- uniform: each pair draws once from [min_ms, max_ms]; the reference simulator
  (simsub) uses 10-150 ms. The draw is a hash of (seed, a, b) with a < b, so it
  needs no state, is symmetric and does not depend on which pairs are asked
  first or on PYTHONHASHSEED.
- regions: each node is in a named region; a symmetric matrix gives the one-way
  latency between regions (and within one).

`PairLinks` is a picklable callable `(a, b) -> LinkParams` that
`ResolvedExperiment.link` falls back to for pairs outside the overlay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.experiment.model import LinkParams


def pair_unit(seed: int, a: str, b: str) -> float:
    """A number in [0, 1) fixed by the seed and the unordered pair."""
    if b < a:
        a, b = b, a
    digest = hashlib.blake2b(f"{seed}\x00latency\x00{a}\x00{b}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


LOOPBACK = LinkParams(0.0, 0.0, 0.0)  # between two identities of one host


@dataclass(frozen=True)
class Constant:
    ms: float

    def latency(self, a: str, b: str) -> float:
        return self.ms

    def typical(self) -> float:
        return self.ms


@dataclass(frozen=True)
class Uniform:
    min_ms: float
    max_ms: float
    seed: int

    def latency(self, a: str, b: str) -> float:
        return round(self.min_ms + pair_unit(self.seed, a, b) * (self.max_ms - self.min_ms), 3)

    def typical(self) -> float:
        return (self.min_ms + self.max_ms) / 2


@dataclass(frozen=True)
class Regions:
    matrix: Mapping[tuple[str, str], float]  # (r1, r2) with r1 <= r2
    region_of: Mapping[str, str]
    default_ms: float = field(default=0.0)

    def latency(self, a: str, b: str) -> float:
        ra, rb = self.region_of[a], self.region_of[b]
        return self.matrix[(ra, rb) if ra <= rb else (rb, ra)]

    def typical(self) -> float:
        return self.default_ms


@dataclass(frozen=True)
class PairLinks:
    """LinkParams for any pair: the model's latency plus the experiment's
    jitter and loss, between the pair's hosts. Identities packed on one host
    (`identities_per_host`, `host_of`: node -> its host) reach every other
    node over the host's one path, as they do on a real backend, where
    shaping knows a destination by its IP address; two identities of one
    host talk over loopback (no delay, no loss)."""

    model: Constant | Uniform | Regions
    jitter_ms: float = 0.0
    loss: float = 0.0
    host_of: Mapping[str, str] = field(default_factory=dict)

    def __call__(self, a: str, b: str) -> LinkParams:
        if self.host_of:
            a, b = self.host_of.get(a, a), self.host_of.get(b, b)
            if a == b:
                return LOOPBACK
        return LinkParams(self.model.latency(a, b), self.jitter_ms, self.loss)

    def default(self) -> LinkParams:
        return LinkParams(self.model.typical(), self.jitter_ms, self.loss)


_RATE_UNITS = {
    "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
    "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
}


def parse_rate(value: object) -> int:
    """Bits per second from an int or a tc-style string ("10mbit", "512kbit",
    "1gbit"). "bps" is refused: tc reads it as *bytes* per second, people
    usually mean bits."""
    if isinstance(value, bool):
        raise ValueError("expected a bandwidth like '10mbit' or bits per second as an integer")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("bandwidth must be positive")
        return value
    if isinstance(value, float):
        if value <= 0:
            raise ValueError("bandwidth must be positive")
        return round(value)
    if not isinstance(value, str):
        raise ValueError("expected a bandwidth like '10mbit' or bits per second as an integer")
    text = value.strip().lower().replace(" ", "")
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(num):] or "bit"
    if unit.endswith("bps") or unit.endswith("b/s"):
        raise ValueError(
            f"{value!r} is ambiguous (tc reads 'bps' as bytes per second); write bits: '10mbit', '512kbit'"
        )
    if unit not in _RATE_UNITS:
        raise ValueError(f"unknown bandwidth unit in {value!r}; use bit, kbit, mbit, gbit (or kibit, mibit, gibit)")
    try:
        number = float(num)
    except ValueError:
        raise ValueError(f"expected a bandwidth like '10mbit', got {value!r}") from None
    if number <= 0:
        raise ValueError("bandwidth must be positive")
    return round(number * _RATE_UNITS[unit])


def format_rate(bps: int) -> str:
    """The shortest exact tc-style spelling of a rate."""
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % mult == 0:
            return f"{bps // mult}{unit}"
    return f"{bps}bit"
