"""Proximity awareness (the draft's GoCast part): a smoothed running average
of RTT samples per peer, and the comparisons the join, stabilization and
optimization rules make with it.

The engine measures RTTs itself, without I/O: every request that has a reply
(GETTOPICS/TOPICS, the draft's ping, and GETNODES/NODES) on an open
connection is timed from the `now` it was sent at to the `now` the reply
arrives; one that opens the connection is not (its round trip includes the
dial). In the simulator that is
twice the link model's latency (plus jitter and serialization); on the real
backends it is the measured round trip. A peer never measured is farther
than any measured one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from node.wire.rpc import PeerId


class RttTable:
    def __init__(self, smoothing: float, ping_timeout_ns: int) -> None:
        self.smoothing = smoothing
        self.ping_timeout_ns = ping_timeout_ns
        self._srtt: dict[PeerId, float] = {}
        self._pings: dict[PeerId, tuple[int, bool]] = {}

    def ping_sent(self, now: int, peer: PeerId, timed: bool = True) -> bool:
        """Record a request to `peer` that expects a reply; False if one is
        already out and not yet timed out. An untimed one (sent before the
        connection is open: its round trip includes the dial) gives no sample."""
        if peer in self._pings and not self.unanswered(now, peer):
            return False
        self._pings[peer] = (now, timed)
        return True

    def reply(self, now: int, peer: PeerId) -> None:
        """The reply: one RTT sample if the request was timed."""
        sent = self._pings.pop(peer, None)
        if sent is not None and sent[1]:
            self.sample(peer, now - sent[0])

    def unanswered(self, now: int, peer: PeerId) -> bool:
        """A request to `peer` went without reply for the timeout."""
        sent = self._pings.get(peer)
        return sent is not None and now - sent[0] >= self.ping_timeout_ns

    def sample(self, peer: PeerId, rtt_ns: int) -> None:
        """srtt = (1 - g) * srtt + g * sample; the first sample is taken as is."""
        old = self._srtt.get(peer)
        self._srtt[peer] = float(rtt_ns) if old is None else (1 - self.smoothing) * old + self.smoothing * rtt_ns

    def forget(self, peer: PeerId) -> None:
        self._pings.pop(peer, None)

    def rtt(self, peer: PeerId) -> float:
        return self._srtt.get(peer, math.inf)

    def known(self, peer: PeerId) -> bool:
        return peer in self._srtt

    def nearest_first(self, peers: Iterable[PeerId]) -> list[PeerId]:
        """Peers by RTT, unmeasured last, ties by id (reproducible)."""
        return sorted(peers, key=lambda p: (self.rtt(p), p))

    def closer_by(self, candidate: PeerId, than: PeerId, alpha: float) -> bool:
        """The candidate is closer than `than` by a factor alpha."""
        return self.known(candidate) and self.rtt(candidate) * alpha < self.rtt(than)
