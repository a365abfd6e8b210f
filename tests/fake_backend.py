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
