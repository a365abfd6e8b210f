"""The contract stand-in: our router under test-plans' gossipsub-interop
contract (node/interop/contract.py), as a third implementation the tests drive
through the foreign-router paths without any other toolchain.

- As a bare `{image, contract}` node: an image FROM our router image whose
  ENTRYPOINT is the contract entry point (docs/foreign-routers.md shows the
  same two lines).
- As an adapter with our `--config` extensions on the process backend: a
  foreign kind registered for the test, started as `python -m node.interop.contract`.
"""

from __future__ import annotations

import subprocess
import sys

from node.engine.authenticity import STRICT
from node.wire.rpc import FIRST_8_BYTES
from orchestrator.routers.kinds import ADAPTERS, CONTRACT_CARRIES, CONTRACT_PARAMS, PY_EVENTS, RouterKind

STANDIN = "contract-standin"
STANDIN_IMAGE = "gossip-testbed/contract-standin"


def standin_argv() -> list[str]:
    return [sys.executable, "-m", "node.interop.contract"]


def register_standin(monkeypatch) -> None:
    monkeypatch.setitem(ADAPTERS, STANDIN, RouterKind(
        STANDIN, "gossip-testbed-contract", True, True, PY_EVENTS, CONTRACT_PARAMS, authenticities=(STRICT,),
        message_ids=(FIRST_8_BYTES,), process="tests.contract_standin:standin_argv", params_from=CONTRACT_CARRIES))


def build_standin_image(router_image: str) -> str:
    """The stand-in image on top of `router_image` (tagged with its tag, so
    it follows node/ as the router image does)."""
    tag = f"{STANDIN_IMAGE}:{router_image.rsplit(':', 1)[-1]}"
    dockerfile = f'FROM {router_image}\nENTRYPOINT ["python3", "-m", "node.interop.contract"]\n'
    subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True, timeout=600)
    return tag
