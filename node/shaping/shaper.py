"""The user-space link shaper: what this node sends to one peer is delayed,
jittered, lost and rate-limited as netem + htb would do it on the sender's
egress, for hosts whose kernel cannot shape (no sch_netem, or no network
namespace per node).

Pure arithmetic on a clock in seconds (trio.current_time()), so it is tested
without sleeping. `LinkShaper.schedule(now, size)` returns when the frame is
due at the peer's socket, or None when it is lost. Each peer's delay line is
FIFO (jitter never reorders, as on a TCP connection), and rate is charged as
serialization time: on the node's shared uplink first (`Uplink`, the
experiment's `uplink_bps`), then on the link's own `rate_bps`.

A lost RPC still used the uplink (it left the node and died on the way), as
in the simulator.
"""

from __future__ import annotations

import random

from node.config import LinkShape


class Uplink:
    """A node's uplink: one serialization clock shared by all its peers."""

    def __init__(self, rate_bps: int | None) -> None:
        self.rate_bps = rate_bps
        self.free_at = 0.0

    def transmit(self, now: float, size: int) -> float:
        """When a frame of `size` bytes handed over at `now` has left."""
        if not self.rate_bps:
            return now
        start = max(now, self.free_at)
        self.free_at = start + size * 8 / self.rate_bps
        return self.free_at


class LinkShaper:
    def __init__(self, shape: LinkShape, uplink: Uplink | None, rng: random.Random) -> None:
        self.shape = shape
        self.uplink = uplink
        self.rng = rng
        self.delay = shape.delay_ms / 1000
        self.jitter = shape.jitter_ms / 1000
        self._link = Uplink(shape.rate_bps)
        self._last_due = 0.0
        self.noop = shape.is_noop() and (uplink is None or not uplink.rate_bps)  # every frame is due at once

    def schedule(self, now: float, size: int) -> float | None:
        t = now
        if self.uplink is not None:
            t = self.uplink.transmit(t, size)
        t = self._link.transmit(t, size)
        if self.shape.loss and self.rng.random() < self.shape.loss:
            return None
        due = t + self.delay
        if self.jitter:
            due += self.rng.uniform(-self.jitter, self.jitter)
        due = max(due, t, self._last_due)
        self._last_due = due
        return due
