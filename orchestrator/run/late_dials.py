"""Overlay edges that open after the start, on a real backend: a group's
`connect_at`, the attack at dawn, where honest nodes connect to each other
only after the sybils have connected to them. `up` leaves these edges out of
every node's initial peers (orchestrator/routers/nodeconfigs.py `dials`);
at the edge's workload time the controller asks its dialling side to
connect, through the control endpoint's `connect` (persistent once open:
redialled like an initial peer), DIAL_WORKERS at a time, and asks again
after that side restarts, since a fresh daemon dials only its initial
peers. Until an edge opens both ends list each other in NodeState.waiting,
so readiness does not wait for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.api import Backend
from orchestrator.fanout import fan_out
from orchestrator.run.nodestate import NodeState

CONNECT_TIMEOUT_S = 15.0  # the control endpoint's own bound on a connect
DIAL_WORKERS = 16
REDIAL_WAIT_S = 20.0  # for a restarted node's control endpoint, as long as readiness waits for it
POLL_S = 0.2


@dataclass(frozen=True)
class LateDial:
    at: float  # workload seconds (on the wall clock)
    dialler: str
    peer: str


def timeline(nodes: Mapping[str, NodeState]) -> list[tuple[float, tuple[LateDial, ...]]]:
    """The late edges grouped by the time they open, in time order."""
    by_time: dict[float, list[LateDial]] = {}
    for name, st in sorted(nodes.items()):
        for peer, at in sorted(st.late.items()):
            by_time.setdefault(at, []).append(LateDial(at, name, peer))
    return [(at, tuple(by_time[at])) for at in sorted(by_time)]


@dataclass(frozen=True)
class LateDialer:
    """`address`: a node's (host, port) as its peers dial it."""

    nodes: Mapping[str, NodeState]
    backend: Backend
    address: Callable[[str], tuple[str, int]]
    warn: Callable[[str], None]

    def open(self, dials: tuple[LateDial, ...]) -> tuple[LateDial, ...]:
        """These edges open: both ends stop waiting for each other. The
        dials to make: those whose dialler runs (`connect` makes them)."""
        for dial in dials:
            for a, b in ((dial.dialler, dial.peer), (dial.peer, dial.dialler)):
                if b in self.nodes[a].waiting:
                    self.nodes[a].waiting.remove(b)
        return tuple(d for d in dials if self.nodes[d.dialler].life.running)

    def connect(self, dials: tuple[LateDial, ...]) -> None:
        """Each dialler connects to its peer, DIAL_WORKERS at a time."""
        fan_out(lambda d: self._connect(d.dialler, d.peer), dials, DIAL_WORKERS)

    def redial(self, name: str) -> None:
        """After `name` (re)started: its late edges that are open already,
        once its control endpoint answers (at most REDIAL_WAIT_S)."""
        st = self.nodes[name]
        peers = [p for p in sorted(st.late) if p not in st.waiting]
        if not peers:
            return
        client = self.backend.control_client(name)
        deadline = time.monotonic() + REDIAL_WAIT_S
        while client.try_call("status", timeout=2.0) is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for peer in peers:
            self._connect(name, peer)

    def _connect(self, dialler: str, peer: str) -> None:
        host, port = self.address(peer)
        answer: Any = self.backend.control_client(dialler).try_call(
            "connect", timeout=CONNECT_TIMEOUT_S, host=host, port=port, name=peer, persistent=True)
        if answer is None:
            self.warn(f"{dialler} did not connect to {peer}, whose edge opened late (connect_at): that edge "
                      "stays closed")
