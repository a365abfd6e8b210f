"""What the docker and swarm backends call the objects they make, the labels
they put on them, and the few figures both follow: one place, so that a
testbed's objects are named and found the same way whichever backend made
them, and `testbed down`, `down --all` and `testbed gc` recognise them all.

Labels follow containerlab's habit: everything the testbed creates carries
them, and nothing without them is ever removed.
"""

from __future__ import annotations

import re

LABEL = "gossip-testbed"  # "1" on images, the base image and every object below
LABEL_TESTBED = "gossip-testbed.testbed"
LABEL_RUN = "gossip-testbed.run"
LABEL_NODE = "gossip-testbed.node"
LABEL_IP = "gossip-testbed.ip"  # a node's address: a container on an own bridge has no endpoint to say it
# The state directory (orchestrator.records.state) of the CLI that made an object:
# `testbed down --all` removes only its own state dir's objects, so a test
# suite with its own TESTBED_STATE_DIR never touches a real testbed.
LABEL_STATE = "gossip-testbed.state"

PARALLEL = 8  # concurrent Docker API calls about a testbed's nodes: starts, inspections, removals
DEFAULT_MEMORY = "256m"  # a node's memory limit, as Docker reads it, when the experiment sets none
MOUNT = "/node"  # where a node's own directory (docker) or volume (swarm) is mounted in its container
NODE_UID = 65532  # distroless "nonroot": the uid routers run as when the CLI runs as root


def safe(name: str) -> str:
    """Docker object names: [a-zA-Z0-9][a-zA-Z0-9_.-]*."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "_", name)


def network_name(testbed: str) -> str:
    """The testbed's network: a bridge network (docker) or an overlay (swarm)."""
    return f"gtb-{safe(testbed)}"


def node_prefix(testbed: str) -> str:
    """What every per-node object of the testbed is named with first (a stale
    endpoint of a container that is gone has nothing else to tell it by)."""
    return f"{network_name(testbed)}-"


def node_object_name(testbed: str, node: str) -> str:
    """A node's container (docker), or its service and its volume (swarm)."""
    return node_prefix(testbed) + safe(node)


def labels(testbed: str, run_id: str, state: str, node: str | None = None) -> dict[str, str]:
    """The labels of an object of `testbed` made by run `run_id` under state directory `state`."""
    out = {LABEL: "1", LABEL_TESTBED: testbed, LABEL_RUN: run_id, LABEL_STATE: state}
    if node is not None:
        out[LABEL_NODE] = node
    return out
