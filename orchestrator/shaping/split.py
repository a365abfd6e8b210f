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
from orchestrator.routers.kinds import kind_of


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


def linked_peers(resolved: ResolvedExperiment, me: str, neighbours: dict[str, list[str]]) -> list[str]:
    """The peers a node may have a link to, which it is told about and
    shaped towards: its overlay neighbours, or every other node when its
    router dials on send (episub: its links go wherever its views do)."""
    if not kind_of(resolved.node(me).router).engine.dials_on_send:
        return neighbours[me]
    return [spec.name for spec in resolved.nodes if spec.name != me]


def kernel_shape(link: LinkParams) -> LinkShape:
    return LinkShape(delay_ms=link.latency_ms, jitter_ms=link.jitter_ms, loss=link.loss)


def user_shape(link: LinkParams, caps: ShapingCapabilities) -> LinkShape:
    """The part of a link the node shapes itself: what the kernel cannot."""
    return LinkShape() if caps.kernel_delay else kernel_shape(link)


def shape_in_kernel(shaper: KernelShaper, resolved: ResolvedExperiment, caps: ShapingCapabilities,
                    names: Iterable[str]) -> None:
    """The kernel's half of the split `user_shape` makes: per-peer delay,
    jitter and loss where the kernel has netem, each node's uplink where it
    has htb/tbf. Identities packed on one host (`identities_per_host`) share
    its network namespace: it is shaped once, under the host's name, towards
    every peer any of them is linked to (their links are the host's, the
    same for all of them), and never towards the host's own identities
    (loopback)."""
    if not (caps.kernel_delay or caps.kernel_rate):
        return
    neighbours = resolved.neighbours()
    specs = {spec.name: spec for spec in resolved.nodes}
    hosts: dict[str, dict[str, LinkShape]] = {}
    for name in names:
        host = specs[name].host_name
        known = linked_peers(resolved, name, neighbours) if caps.kernel_delay else []
        hosts.setdefault(host, {}).update(
            (p, kernel_shape(resolved.link(name, p))) for p in known if specs[p].host_name != host)
    for host, per_peer in hosts.items():
        shaper.apply_kernel_shaping(host, per_peer, specs[host].uplink_bps if caps.kernel_rate else None)
