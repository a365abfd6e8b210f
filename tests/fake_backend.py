"""A backend the orchestrator has never heard of, registered from a test
through TESTBED_BACKENDS: it runs routers as local processes (the process
backend's machinery), declares that it cannot pause or partition nodes, and
notes every control client the controller asks it for, so a test can see
the controller reached the nodes only through the contract."""

from __future__ import annotations

from node.runtime.client import ControlClient
from orchestrator.backend import Capabilities
from orchestrator.process_backend import ProcessBackend


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
    exits (orchestrator/docker_stop.py): TeardownIncomplete. Later stops are
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
