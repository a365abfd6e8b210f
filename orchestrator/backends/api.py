"""The contract every way of running real routers implements (local processes,
Docker, and whatever comes next), so the run controller drives start-up,
churn, shaping and collection the same way without knowing which backend it
talks to.

A backend is made from a `BackendContext` (the testbed, its run directory,
the state store, backend options and the progress reporter) and declares
what it can do in `capabilities`; the controller never asks for its name.

Order of calls for one testbed: `set_resources` (and `set_host`) per node,
`prepare` (network, addresses) -> `shaping_capabilities` -> `start_many` (each NodeConfig already
carries the user-space part of the shaping) -> `apply_kernel_shaping` ->
churn verbs -> `collect_traces` -> `destroy` -> `cleanup`, each teardown step
once. The controller reaches a node through `control_client(node)`. `cleanup`
is a class method: it must find and remove everything a testbed of that name
created, from labels or the state store, even when the process that created it
was killed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.config import LinkShape, NodeConfig
from node.runtime.client import ControlClient
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.experiment.lifecycle import NEEDS_CAPABILITY, Verb
from orchestrator.fanout import errors_by_item
from orchestrator.progress import Reporter
from orchestrator.records.state import StateStore
from orchestrator.shaping.split import ShapingCapabilities


@dataclass(frozen=True)
class NodeAddress:
    """Where a node listens for peers and where the orchestrator reaches its
    control endpoint."""

    host: str
    port: int
    control_host: str
    control_port: int


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do at all, declared by its class (what the kernel
    here really allows is probed by `shaping_capabilities`).

    kernel_shaping: tc in each node's own network namespace;
    netem: kernel delay/jitter/loss where the kernel has sch_netem;
    partitions: disconnect/reconnect; pause: pause/unpause;
    images: runs a bare container image (a gossipsub-interop node,
    orchestrator/routers/kinds.py); foreign_proxy: where the kernel cannot delay,
    a foreign node's sending is shaped by a transparent proxy in its network
    namespace (orchestrator/shaping/proxy.py); shared_hosts: several
    identities on one host (`identities_per_host`), sharing its address on
    ports of their own (`set_host`)."""

    kernel_shaping: bool
    netem: bool
    partitions: bool
    pause: bool
    images: bool = False
    foreign_proxy: bool = False
    shared_hosts: bool = False


@dataclass(frozen=True)
class BackendContext:
    """What a backend is constructed with. `options` are backend-specific
    (the Docker backend reads "image", "entrypoint", "run_id")."""

    testbed: str
    run_dir: Path
    store: StateStore
    reporter: Reporter = field(default_factory=Reporter)
    options: Mapping[str, Any] = field(default_factory=dict)


class Backend(ABC):
    name: str = ""
    capabilities: Capabilities = Capabilities(kernel_shaping=False, netem=False, partitions=False, pause=False)

    def __init__(self, ctx: BackendContext) -> None:
        self.ctx = ctx
        self.testbed = ctx.testbed
        self.run_dir = Path(ctx.run_dir).resolve()
        self.store = ctx.store
        self.reporter = ctx.reporter
        self._control_clients: dict[str, ControlClient] = {}
        self.hosts: dict[str, str] = {}  # packed identity -> the node whose host it shares (`set_host`)

    def set_resources(self, node: str, memory: str | None = None, cpus: float | None = None) -> None:
        """Memory (e.g. "256m") and CPU limits for a node, before `prepare`.
        Backends that cannot enforce them (local processes) ignore them."""

    def set_placement(self, node: str, constraints: Sequence[str]) -> None:
        """Where a node may run (swarm placement constraints such as
        "node.labels.zone==a"), before `prepare`; backends on one host
        ignore them."""

    def set_host(self, node: str, host: str) -> None:
        """`node` is an identity packed on the host of node `host` (its
        group's first identity there, `identities_per_host`): it gets that
        node's IP address (its network namespace) and ports of its own.
        Before `prepare`; only where `capabilities.shared_hosts` (elsewhere
        the file is refused before anything starts)."""
        if not self.capabilities.shared_hosts:
            raise TestbedError(f"the {self.name} backend cannot pack identities on one host")
        self.hosts[node] = host

    def host_slots(self, nodes: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each node's host and its slot there, for its ports: a host's own
        node is slot 0, the identities packed on it 1, 2, ... in `nodes`' order."""
        taken: dict[str, int] = {}
        out = {}
        for node in nodes:
            host = self.hosts.get(node, node)
            out[node] = (host, taken.get(host, 0))
            taken[host] = out[node][1] + 1
        return out

    @abstractmethod
    def prepare(self, nodes: Sequence[str]) -> dict[str, NodeAddress]:
        """Create the network and allocate every node's addresses."""

    @abstractmethod
    def shaping_capabilities(self) -> ShapingCapabilities:
        """Probe what the kernel can shape (netem present? htb?)."""

    @abstractmethod
    def start(self, config: NodeConfig) -> None:
        """Start (or restart after stop/kill) one node; its trace file is
        appended to, never truncated."""

    def start_many(self, configs: Iterable[NodeConfig]) -> None:
        """Start several nodes; a backend that can start them in parallel
        overrides this."""
        for config in configs:
            self.start(config)

    def control_client(self, node: str) -> ControlClient:
        """How the orchestrator reaches a node's control endpoint: by default
        straight to the address recorded in the state store (a node keeps its
        address for the testbed's life, so it is read once). A backend whose
        nodes sit behind a port forward or a remote engine overrides this."""
        client = self._control_clients.get(node)
        if client is None:
            record = self.store.load(self.testbed) or {}
            entry = (record.get("nodes") or {}).get(node) or {}
            if "control_host" not in entry:
                raise TestbedError(f"{node}: no control address recorded")
            client = ControlClient(entry["control_host"], entry["control_port"], record.get("token", ""))
            self._control_clients[node] = client
        return client

    @abstractmethod
    def stop(self, node: str) -> None:
        """Graceful: SIGTERM; the router sends LEAVE/PRUNE and flushes its trace."""

    def stop_many(self, nodes: Sequence[str]) -> dict[str, str]:
        """`stop` every node that runs, a few at a time; returns why, for each
        node that could not be stopped. A backend that can signal them all at
        once overrides this."""
        def one(node: str) -> None:
            if self.is_running(node):
                self.stop(node)

        return {n: str(exc) for n, exc in errors_by_item(one, list(nodes), 16).items()}

    @abstractmethod
    def kill(self, node: str) -> None:
        """Crash: SIGKILL."""

    @abstractmethod
    def pause(self, node: str) -> None:
        """Freeze the node (SIGSTOP / cgroup freezer)."""

    @abstractmethod
    def resume(self, node: str) -> None:
        """Unfreeze a paused node."""

    @abstractmethod
    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        """Cut the node off from everyone (None) or from the named peers."""

    @abstractmethod
    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        """Undo `disconnect`."""

    @abstractmethod
    def apply_kernel_shaping(
        self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None
    ) -> list[str]:
        """Apply the kernel part of this node's shaping; returns the commands run."""

    @abstractmethod
    def is_running(self, node: str) -> bool:
        """Whether the node's process or container is alive (paused counts)."""

    @abstractmethod
    def collect_traces(self) -> None:
        """Make sure every node's trace is under run_dir/traces."""

    @abstractmethod
    def destroy(self) -> None:
        """End what this object runs or holds (its routers, its connections)
        and bring home what is left to collect; traces stay. Removing what the
        testbed created is `cleanup`'s, which the controller calls next."""

    #: where `cpu_seconds` reads its figures, for router-cpu.json
    cpu_source = ""

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds each running router has used since it started; empty
        where the backend cannot tell (orchestrator/records/router_cpu.py)."""
        return {}

    def collection_warnings(self) -> list[str]:
        """Nodes whose files `collect_traces` could not bring home, and why
        (a swarm node lost with its engine), for the run's warnings."""
        return []

    def shaping_warnings(self) -> list[str]:
        """Where links were not shaped as asked, found when the testbed ended
        (read after `destroy`, for the manifest's warnings)."""
        return []

    def manifest_facts(self) -> dict[str, Any]:
        """Backend-specific facts for manifest.json (read after
        `collect_traces`), e.g. what each node's own shaping step applied."""
        return {}

    def isolation(self) -> dict[str, Any] | None:
        """How each node is confined (its mounts, its uid), for the manifest;
        None where the backend does not confine its nodes."""
        return None

    @classmethod
    @abstractmethod
    def cleanup(cls, testbed: str | None, store: StateStore) -> list[str]:
        """Remove what a testbed (None: every testbed) left behind, even after a
        crash; returns a line per thing removed. Idempotent."""


def check_capabilities(backend: type[Backend] | Backend, verbs: set[str]) -> None:
    """Refuse churn the backend cannot do, before anything starts."""
    for verb in sorted(verbs):
        need = NEEDS_CAPABILITY.get(Verb(verb))
        if need is not None and not getattr(backend.capabilities, need):
            raise BackendUnavailable(f"the {backend.name} backend cannot {verb} nodes (no {need} support)")
