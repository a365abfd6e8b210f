"""What each router daemon is told at start (NodeConfig), from the resolved
experiment, the addresses the backend allocated and what its kernel can
shape: the node shapes in user space whatever the kernel cannot
(orchestrator/shaping/split.py). Later CLI processes
read them back from the files the testbed record names (`recorded_configs`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from node.config import NodeConfig, PeerAddress
from node.dilation import DilatedClock
from node.trace.tree import TREE_DIR
from orchestrator.backends.api import NodeAddress
from orchestrator.experiment.model import AdversarySpec, ResolvedExperiment
from orchestrator.routers.kinds import kind_of
from orchestrator.routers.peers import node_indices, peer_ids_b58
from orchestrator.shaping.split import ShapingCapabilities, linked_peers, user_shape


def start_batches(resolved: ResolvedExperiment) -> tuple[list[str], list[str]]:
    """The order `up` starts nodes in: every router with a control endpoint,
    then the bare images (their scripts get a workload start fixed just
    before they start: orchestrator/routers/foreign_nodes.py), each in the
    experiment's order."""
    bare = [spec.name for spec in resolved.nodes if kind_of(spec.router).scripted]
    return [spec.name for spec in resolved.nodes if not kind_of(spec.router).scripted], bare


def dials(resolved: ResolvedExperiment) -> dict[str, list[str]]:
    """Whom each node dials at its start: each overlay edge once, by the
    side `up` starts later, so a starting node dials peers that already
    listen. Dialled by the lower name, the nodes started early redialled
    peers not yet started for the whole start (9,049 failed dials in a
    start of 250 containers, up to 277 by one node; 198 this way), and a
    node started last was reached only at its dialler's next backoff. Our
    routers and foreign scripts (orchestrator/routers/interop_script.py)
    both follow it. An edge that opens later is left out (`late_dials`)."""
    order = _start_order(resolved)
    late = resolved.late_edges()
    return {me: [p for p in peers if order[p] < order[me] and (me, p) not in late and (p, me) not in late]
            for me, peers in resolved.neighbours().items()}


def late_dials(resolved: ResolvedExperiment) -> dict[str, dict[str, float]]:
    """The edges that open after the start (`connect_at`), by their
    dialling side as `dials` chooses it: dialler -> peer -> workload time."""
    order = _start_order(resolved)
    out: dict[str, dict[str, float]] = {}
    for (a, b), at in resolved.late_edges().items():
        dialler, peer = (a, b) if order[b] < order[a] else (b, a)
        out.setdefault(dialler, {})[peer] = at
    return out


def _start_order(resolved: ResolvedExperiment) -> dict[str, int]:
    first, bare = start_batches(resolved)
    return {name: i for i, name in enumerate(first + bare)}


def asks_for_dials(router: str) -> bool:
    """Its engine may ask for a connection to any node: episub dials whom it
    sends to, gossipsub v1.1+ the peers PX names. Its NodeConfig then carries
    every other node's address (address_book)."""
    engine = kind_of(router).engine
    return engine.dials_on_send or engine.scores_peers


def build_configs(
    resolved: ResolvedExperiment, addresses: dict[str, NodeAddress], caps: ShapingCapabilities,
    token: str, run_dir: Path, clock: DilatedClock = DilatedClock(),
) -> dict[str, NodeConfig]:
    """Every node's NodeConfig. Each overlay edge is dialled as `dials` says; trace and lag files
    go straight into the run directory (a backend that runs nodes elsewhere
    rewrites these paths). Node i of the experiment has libp2p identity i;
    peers are dialled, shaped and named by their peer ids. A node whose
    router dials on send (episub) knows, shapes and names every other node,
    not only its overlay neighbours: its links go wherever its views do. `resolved` is on
    the wall clock (orchestrator/run/wallclock.py); `clock` is the experiment's."""
    neighbours = resolved.neighbours()
    dialled = dials(resolved)
    index = node_indices(resolved)
    peer_id = peer_ids_b58(resolved)
    configs = {}
    for spec in resolved.nodes:
        me = spec.name
        addr = addresses[me]
        known = linked_peers(resolved, me, neighbours)
        book = tuple(PeerAddress(p, addresses[p].host, addresses[p].port, peer_id[p]) for p in addresses if p != me
                     ) if asks_for_dials(spec.router) else ()
        configs[me] = NodeConfig(
            name=me, index=index[me], router=spec.router, seed=spec.seed,
            listen_host=addr.host, listen_port=addr.port,
            control_host=addr.control_host, control_port=addr.control_port,
            token=token, trace_path=str(run_dir / "traces" / f"{me}.pb"),
            params=dict(spec.params), topics=tuple(spec.topics),
            initial_peers=tuple(PeerAddress(p, addresses[p].host, addresses[p].port, peer_id[p]) for p in dialled[me]),
            shaping={peer_id[p]: user_shape(resolved.link(me, p), caps) for p in known},
            peer_names={peer_id[p]: p for p in known}, address_book=book,
            default_shape=user_shape(resolved.default_link, caps),
            uplink_bps=None if caps.kernel_rate else spec.uplink_bps,
            lag_path=str(run_dir / "node-logs" / f"{me}.lag.json"),
            scores_path=str(run_dir / "scores" / f"{me}.csv") if kind_of(spec.router).engine.scores_peers else "",
            tree_path=str(run_dir / TREE_DIR / f"{me}.csv") if kind_of(spec.router).engine.traces_tree else "",
            security=resolved.security, authenticity=resolved.authenticity, message_id=resolved.message_id,
            validation_delay=dict(resolved.validation_delay),
            time_dilation=clock.factor, clock_epoch_ns=clock.epoch_ns,
            adversary=adversary_config(spec.adversary, peer_id),
            app_specific_scores={peer_id[p]: v for p, v in resolved.app_specific_scores(me).items()}
            if kind_of(spec.router).engine.scores_peers else {},
        )
    return configs


def adversary_config(spec: AdversarySpec | None, peer_id: dict[str, str]) -> dict[str, Any] | None:
    """NodeConfig.adversary: the sybil's keys with node names as peer ids (base58)."""
    if spec is None:
        return None
    return {**asdict(spec), "eclipse": [peer_id[n] for n in spec.eclipse],
            "censor_publishers": [peer_id[n] for n in spec.censor_publishers]}

