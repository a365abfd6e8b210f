"""Backends the orchestrator has never heard of, registered from a test
through TESTBED_BACKENDS, each running routers as local processes (the
process backend's machinery). FakeBackend declares that it cannot pause or
partition nodes, and notes every control client the controller asks it for,
so a test can see the controller reached the nodes only through the
contract; the others stand in for an engine in one respect each, or count
what the controller asks of them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from node.config import LinkShape, NodeConfig
from node.runtime.client import ControlClient
from orchestrator.backends.api import Capabilities
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.backends.process.backend import ProcessBackend
from orchestrator.records.state import StateStore


class FakeBackend(ProcessBackend):
    name = "fake"
    capabilities = Capabilities(kernel_shaping=False, netem=False, partitions=False, pause=False)

    def control_client(self, node: str) -> ControlClient:
        with open(self.run_dir / "fake-control.log", "a") as log:
            log.write(node + "\n")
        return super().control_client(node)


class StuckStopBackend(ProcessBackend):
    """Its first stop ends the routers and then finds them still listed as
    running, as Docker 20.10 does when its libnetwork deadlocks on many
    exits (orchestrator/backends/docker/teardown.py): TeardownIncomplete. Later stops are
    the process backend's, as after a daemon restart."""

    name = "stuck"

    def stop_many(self, nodes):
        from orchestrator.errors import TeardownIncomplete  # noqa: PLC0415

        out = super().stop_many(nodes)
        marker = self.run_dir / "stuck-once"
        if marker.exists():
            return out
        marker.write_text("")
        raise TeardownIncomplete([f"{len(nodes)} container(s): the daemon is stuck; restart it, then "
                                  "`testbed down --all`"], [])


class CountingBackend(ProcessBackend):
    """The process backend, writing each teardown step it is asked for
    (destroy, cleanup, and the sweep for stray routers both end in) as a line
    of teardown-calls.log in the state directory."""

    name = "counting"

    def destroy(self) -> None:
        _count(self.store, "destroy")
        super().destroy()

    @classmethod
    def cleanup(cls, testbed: str | None, store: StateStore) -> list[str]:
        _count(store, "cleanup")
        return super().cleanup(testbed, store)

    @staticmethod
    def _kill_strays(store: StateStore, testbed: str | None) -> list[str]:
        _count(store, "kill_strays")
        return ProcessBackend._kill_strays(store, testbed)


def _count(store: StateStore, step: str) -> None:
    with open(store.root / "teardown-calls.log", "a") as log:
        log.write(step + "\n")


class NetemBackend(ProcessBackend):
    """Claims a kernel with netem, as a real host's docker backend does, and
    writes down what the controller asks the kernel to apply (one JSON line
    per node in run_dir/kernel-shaping.jsonl) instead of applying it, and
    what each router is told to shape itself (run_dir/user-shaping.jsonl):
    told the kernel delays, they send unshaped on loopback."""

    name = "netem"

    def shaping_capabilities(self) -> ShapingCapabilities:
        return ShapingCapabilities(kernel_delay=True, kernel_rate=True, path="netem",
                                   detail="a test's stand-in: records the kernel's shapes, applies none")

    def apply_kernel_shaping(self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None) -> list[str]:
        self._log("kernel-shaping.jsonl", {"node": node, "uplink_bps": uplink_bps,
                                           "per_peer": {p: dataclasses.asdict(s) for p, s in per_peer.items()}})
        return []

    def start(self, config: NodeConfig) -> None:
        self._log("user-shaping.jsonl", {"node": config.name, "uplink_bps": config.uplink_bps,
                                         "per_peer": {p: dataclasses.asdict(s) for p, s in config.shaping.items()},
                                         "default": dataclasses.asdict(config.default_shape)})
        super().start(config)

    def _log(self, file: str, row: dict) -> None:
        with open(self.run_dir / file, "a") as log:
            log.write(json.dumps(row) + "\n")
