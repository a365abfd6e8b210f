"""Who shapes what: each link's delay, jitter and loss, and each node's
uplink, go to the kernel where this host's backend can shape them there
(ShapingCapabilities), and the rest to the node itself, which shapes in
user space what the kernel cannot (node/shaping/). `user_shape` is the
node's half, `shape_in_kernel` the kernel's, so the two halves are written
next to each other and never overlap."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from node.config import LinkShape
from orchestrator.experiment.model import LinkParams, ResolvedExperiment


@dataclass(frozen=True)
class ShapingCapabilities:
    """What this backend can shape in the kernel here. `path` is recorded in the
    manifest: 'netem' (kernel delay/jitter/loss + htb rate), 'delayline+htb'
    (delay/jitter/loss by the host's delay line, orchestrator/shaping/delayline.py,
    rate by htb), 'userspace+htb' (delay/jitter/loss in the node, rate in the
    kernel) or 'userspace' (all in the node)."""

    kernel_delay: bool
    kernel_rate: bool
    path: str
    detail: str


class KernelShaper(Protocol):
    """What shapes one node's egress in the kernel: a backend."""

    def apply_kernel_shaping(
        self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None
    ) -> list[str]: ...


def kernel_shape(link: LinkParams) -> LinkShape:
    return LinkShape(delay_ms=link.latency_ms, jitter_ms=link.jitter_ms, loss=link.loss)


def user_shape(link: LinkParams, caps: ShapingCapabilities) -> LinkShape:
    """The part of a link the node shapes itself: what the kernel cannot."""
    return LinkShape() if caps.kernel_delay else kernel_shape(link)


def shape_in_kernel(shaper: KernelShaper, resolved: ResolvedExperiment, caps: ShapingCapabilities,
                    names: Iterable[str]) -> None:
    """The kernel's half of the split `user_shape` makes: per-peer delay,
    jitter and loss where the kernel has netem, each node's uplink where it
    has htb/tbf."""
    if not (caps.kernel_delay or caps.kernel_rate):
        return
    neighbours = resolved.neighbours()
    for name in names:
        per_peer = {p: kernel_shape(resolved.link(name, p)) for p in neighbours[name]} if caps.kernel_delay else {}
        shaper.apply_kernel_shaping(name, per_peer, resolved.node(name).uplink_bps if caps.kernel_rate else None)
