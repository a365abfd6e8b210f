"""The interface every way of running real routers implements (local processes,
Docker), so the run controller drives churn, shaping and collection the same
way whatever runs the nodes.

Order of calls for one testbed: `set_resources` per node, `prepare` (network, addresses) ->
`shaping_capabilities` -> `start` each node (its NodeConfig already carries the
user-space part of the shaping) -> `apply_kernel_shaping` -> churn verbs ->
`collect_traces` -> `destroy`. `cleanup` is a class method: it must find and
remove everything a testbed of that name created, from labels or the state
directory, even when the process that created it was killed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from node.config import LinkShape, NodeConfig


@dataclass(frozen=True)
class NodeAddress:
    """Where a node listens for peers and where the orchestrator reaches its
    control endpoint."""

    host: str
    port: int
    control_host: str
    control_port: int


@dataclass(frozen=True)
class ShapingCapabilities:
    """What this backend can shape in the kernel here. `path` is recorded in the
    manifest: 'netem' (kernel delay/jitter/loss + htb rate), 'userspace+htb'
    (delay/jitter/loss in the node, rate in the kernel) or 'userspace' (all in
    the node)."""

    kernel_delay: bool
    kernel_rate: bool
    path: str
    detail: str


class Backend(ABC):
    name: str = ""

    def __init__(self, testbed: str, run_dir: Path) -> None:
        self.testbed = testbed
        self.run_dir = run_dir

    def set_resources(self, node: str, memory: str | None = None, cpus: float | None = None) -> None:
        """Memory (e.g. "256m") and CPU limits for a node, before `prepare`.
        Backends that cannot enforce them (local processes) ignore them."""

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

    @abstractmethod
    def stop(self, node: str) -> None:
        """Graceful: SIGTERM; the router sends LEAVE/PRUNE and flushes its trace."""

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
        """Remove everything this testbed created; traces stay."""

    @classmethod
    @abstractmethod
    def cleanup(cls, testbed: str | None) -> list[str]:
        """Remove what a testbed (None: every testbed) left behind, even after a
        crash; returns a line per thing removed. Idempotent."""
