"""What each router daemon is told at start (NodeConfig), from the resolved
experiment, the addresses the backend allocated and what its kernel can
shape: the node shapes in user space whatever the kernel cannot, and the
backend's kernel shapes the rest (`shape_in_kernel`). Later CLI processes
read them back from the files the testbed record names (`recorded_configs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node.config import LinkShape, NodeConfig, PeerAddress
from node.dilation import DilatedClock
from orchestrator.backends.api import Backend, NodeAddress, ShapingCapabilities
from orchestrator.errors import TestbedError
from orchestrator.experiment.model import LinkParams, ResolvedExperiment
from orchestrator.routers.kinds import is_bare, router_kind
from orchestrator.routers.peers import node_indices, peer_ids_b58


def kernel_shape(link: LinkParams) -> LinkShape:
    return LinkShape(delay_ms=link.latency_ms, jitter_ms=link.jitter_ms, loss=link.loss)


def user_shape(link: LinkParams, caps: ShapingCapabilities) -> LinkShape:
    """The part of a link the node shapes itself: what the kernel cannot."""
    return LinkShape() if caps.kernel_delay else kernel_shape(link)


def start_batches(resolved: ResolvedExperiment) -> tuple[list[str], list[str]]:
    """The order `up` starts nodes in: every router with a control endpoint,
    then the bare images (their scripts get a workload start fixed just
    before they start: orchestrator/routers/foreign_nodes.py), each in the
    experiment's order."""
    bare = [spec.name for spec in resolved.nodes if is_bare(spec.router)]
    return [spec.name for spec in resolved.nodes if not is_bare(spec.router)], bare


def dials(resolved: ResolvedExperiment) -> dict[str, list[str]]:
    """Whom each node dials: each overlay edge once, by the side `up` starts
    later, so a starting node dials peers that already listen. Dialled by
    the lower name, the nodes started early redialled peers not yet started
    for the whole start (9,049 failed dials in a start of 250 containers, up
    to 277 by one node; 198 this way), and a node started last was reached
    only at its dialler's next backoff. Our routers and foreign scripts
    (orchestrator/routers/interop_script.py) both follow it."""
    first, bare = start_batches(resolved)
    order = {name: i for i, name in enumerate(first + bare)}
    return {me: [p for p in peers if order[p] < order[me]] for me, peers in resolved.neighbours().items()}


def build_configs(
    resolved: ResolvedExperiment, addresses: dict[str, NodeAddress], caps: ShapingCapabilities,
    token: str, run_dir: Path, clock: DilatedClock = DilatedClock(),
) -> dict[str, NodeConfig]:
    """Every node's NodeConfig. Each overlay edge is dialled as `dials` says; trace and lag files
    go straight into the run directory (a backend that runs nodes elsewhere
    rewrites these paths). Node i of the experiment has libp2p identity i;
    peers are dialled, shaped and named by their peer ids. `resolved` is on
    the wall clock (orchestrator/run/wallclock.py); `clock` is the experiment's."""
    neighbours = resolved.neighbours()
    dialled = dials(resolved)
    index = node_indices(resolved)
    peer_id = peer_ids_b58(resolved)
    configs = {}
    for spec in resolved.nodes:
        me = spec.name
        addr = addresses[me]
        configs[me] = NodeConfig(
            name=me, index=index[me], router=spec.router, seed=spec.seed,
            listen_host=addr.host, listen_port=addr.port,
            control_host=addr.control_host, control_port=addr.control_port,
            token=token, trace_path=str(run_dir / "traces" / f"{me}.pb"),
            params=dict(spec.params), topics=tuple(spec.topics),
            initial_peers=tuple(PeerAddress(p, addresses[p].host, addresses[p].port, peer_id[p]) for p in dialled[me]),
            shaping={peer_id[p]: user_shape(resolved.link(me, p), caps) for p in neighbours[me]},
            peer_names={peer_id[p]: p for p in neighbours[me]},
            default_shape=user_shape(resolved.default_link, caps),
            uplink_bps=None if caps.kernel_rate else spec.uplink_bps,
            lag_path=str(run_dir / "node-logs" / f"{me}.lag.json"),
            scores_path=str(run_dir / "scores" / f"{me}.csv") if router_kind(spec.router).scores_peers else "",
            security=resolved.security, authenticity=resolved.authenticity, message_id=resolved.message_id,
            validation_delay=dict(resolved.validation_delay),
            time_dilation=clock.factor, clock_epoch_ns=clock.epoch_ns,
        )
    return configs


def shape_in_kernel(backend: Backend, resolved: ResolvedExperiment, caps: ShapingCapabilities,
                    names: list[str]) -> None:
    """The kernel's half of the split `user_shape` makes: per-peer delay,
    jitter and loss where the kernel has netem, each node's uplink where it
    has htb/tbf."""
    if not (caps.kernel_delay or caps.kernel_rate):
        return
    neighbours = resolved.neighbours()
    for name in names:
        per_peer = {p: kernel_shape(resolved.link(name, p)) for p in neighbours[name]} if caps.kernel_delay else {}
        backend.apply_kernel_shaping(name, per_peer, resolved.node(name).uplink_bps if caps.kernel_rate else None)


def recorded_configs(record: dict[str, Any]) -> dict[str, NodeConfig]:
    """Each node's config from the file its testbed record names (another
    CLI wrote it); one that cannot be read is a TestbedError naming it,
    which `testbed down` reports before it cleans up."""
    configs: dict[str, NodeConfig] = {}
    for name, entry in (record.get("nodes") or {}).items():
        path = entry.get("config")
        if path and Path(path).is_file():
            try:
                configs[name] = NodeConfig.load(Path(path))
            except (ValueError, TypeError) as exc:
                raise TestbedError(f"{path}: {name}'s config is unreadable ({exc}); "
                                   f"`testbed down {record.get('name')}` cleans up") from None
    return configs
