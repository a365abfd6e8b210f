"""The user-space shaper applied to a byte stream (the shaping proxy in front
of a foreign router): LinkShaper's delay, jitter, loss and rate, per TCP
segment, with loss modelled the way TCP experiences it.

Why not drop bytes: the proxy sits between a router and its kernel socket,
inside one TCP connection that is encrypted (noise) and multiplexed (yamux);
a byte removed from it breaks the stream, not a message. What a lossy link
does to a TCP sender is make it send the segment again, later. So a segment
the LinkShaper loses is retransmitted after a retransmission timeout,
`RTO_MIN_S + 2 x delay` (Linux's 200 ms floor plus the round trip a
symmetric link gives), doubling at each further loss of the same segment,
and everything after it on the link waits behind it (FIFO: TCP delivers in
order). After `MAX_RETRANSMITS` losses in a row the connection is given up,
as TCP gives up after tcp_retries2 = 15. Fast retransmit (about one round
trip instead of an RTO, when later segments are in flight) is not modelled:
gossip traffic is sparse, so the loss of the last segment of an RPC, which
only an RTO recovers, is the common case. This is recorded in the manifest
(orchestrator/shaping/proxy.py: LOSS_MODEL).

Pure arithmetic on a clock in seconds, tested without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.shaping.shaper import LinkShaper

MSS_BYTES = 1448  # a TCP segment's payload on a 1500-byte Ethernet link with timestamps
RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
MAX_RETRANSMITS = 15  # Linux net.ipv4.tcp_retries2


@dataclass(frozen=True)
class Segment:
    """Bytes [start, end) of a chunk, due at the peer's socket at `due`."""

    start: int
    end: int
    due: float
    retransmits: int


class GaveUp(Exception):
    """A segment was lost MAX_RETRANSMITS times in a row: the connection ends."""


class StreamShaper:
    def __init__(self, link: LinkShaper) -> None:
        self.link = link
        self.retransmits = 0
        self.segments = 0

    @property
    def noop(self) -> bool:
        return self.link.noop

    def rto(self) -> float:
        return RTO_MIN_S + 2 * self.link.delay

    def schedule(self, now: float, size: int) -> list[Segment]:
        """Cut `size` bytes handed over at `now` into segments and say when
        each is due at the peer; GaveUp when one is lost too often."""
        out: list[Segment] = []
        for start in range(0, size, MSS_BYTES):
            end = min(size, start + MSS_BYTES)
            sent_at, rto, tries = now, self.rto(), 0
            due = self.link.schedule(sent_at, end - start)
            while due is None:
                tries += 1
                if tries > MAX_RETRANSMITS:
                    raise GaveUp(f"a segment was lost {MAX_RETRANSMITS + 1} times in a row")
                sent_at += rto
                rto *= 2
                due = self.link.schedule(sent_at, end - start)
            self.retransmits += tries
            self.segments += 1
            out.append(Segment(start, end, due, tries))
        return out
