"""The end of a run's traffic, before its nodes stop: every router ends its
lag window, LEAVEs and empties its queues, and the RPCs on their way
arrive, so the traces show every RPC sent as received. The controller's
`down` drains; foreign nodes' scripts are written to outlast it (DRAIN_S)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from node.dilation import DilatedClock
from orchestrator.backends.api import Backend
from orchestrator.progress import Reporter
from orchestrator.run.nodestate import NodeState
from orchestrator.run.workload import ask_each, linger_until_quiet, quiet_counters


DRAIN_S = 3.0  # at most this long for the RPCs in flight at the end of a run to arrive
DRAIN_POLL_S = 0.3


def drain(nodes: Mapping[str, NodeState], backend: Backend, reporter: Reporter,
          clock: DilatedClock = DilatedClock()) -> dict[str, dict[str, Any] | None]:
    """Before the nodes stop: every router's lag window ends (node/runtime/lag.py:
    what follows is teardown), then each LEAVEs and empties its queues, then the
    RPCs on their way arrive (until two polls see the same counters, at
    most DRAIN_S), so a run's traces show every RPC sent as received. Bare
    images have no control endpoint: their scripts end on their own.
    Returns each drained node's answer: its counters and event-loop lag once
    its queues were empty (the answers are the first poll of the linger, so
    250 nodes cost one round of calls less); None for a node that did not
    answer (its router stopped or hung on its own). A router without a
    `drain` command (the rust-libp2p and py-libp2p adapters refuse it) is
    alive all the same: its `status` is its answer, its queues empty on their
    own in the linger. A time-dilated run (`clock`) polls and waits as many
    times longer as its links are."""
    ask_each(nodes, backend, "status", 5.0, end_lag=True)  # the lag window ends: what follows is teardown
    answers = ask_each(nodes, backend, "drain", 5.0)
    refused = {n: nodes[n] for n, answer in answers.items() if answer is None}
    if refused:
        answers.update({n: a for n, a in ask_each(refused, backend, "status", 5.0).items() if a is not None})
    linger_until_quiet(nodes, backend, time.time_ns() + round(clock.wall_s(DRAIN_S) * 1e9), reporter,
                       poll_s=clock.wall_s(DRAIN_POLL_S), title="draining: RPCs in flight arrive",
                       first={n: quiet_counters(a) for n, a in answers.items()})
    return answers
