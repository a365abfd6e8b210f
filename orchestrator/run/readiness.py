"""When a real testbed is ready: every node answers its control endpoint and
is connected to every overlay neighbour it can reach, but those whose edge
opens later (NodeState.waiting; orchestrator/run/late_dials.py) (an error
naming the stragglers if not), then has a mesh (a warning if not). Used at `up` and
after a node is started or reconnected, so node_up is logged when the node
can really receive. A bare gossipsub-interop image has no control endpoint:
its status, peers and mesh, is what its neighbours report (`observed`)
(docs/foreign-routers.md, "Readiness").

Each round asks every pending node at once (POLL_WORKERS at a time): asked
one after another, 250 loaded routers took seconds per round, and a node
that had just met its condition waited for the whole round to be seen.

The wait for connections gives up `timeout` seconds after it began, or, while
nodes keep making progress (answering for the first time, or becoming
connected), half of `timeout` after the latest progress, and never later
than STALL_CAP times `timeout`: on an overloaded host 100 routers that each
dial a dozen peers at once come up over minutes, which is slow, not broken
(the manifest's event-loop lag says how loaded it was); a network that
stops coming up still fails after half the timeout of silence."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from node.trace.vocab import RunEvent
from orchestrator.backends.api import Backend
from orchestrator.errors import TestbedError
from orchestrator.fanout import fan_out
from orchestrator.routers.kinds import kind_of
from orchestrator.run.nodestate import NodeState
from orchestrator.progress import Reporter

POLL_S = 0.2
POLL_WORKERS = 16  # status requests in flight at once
STALL_CAP = 3.0  # the longest wait for connections, in multiples of its timeout


class Readiness:
    def __init__(
        self, nodes: Mapping[str, NodeState], backend: Backend, warn: Callable[[str], None],
        event: Callable[..., None],
    ) -> None:
        self.nodes = nodes
        self.backend = backend
        self.warn = warn
        self.event = event

    def status(self, name: str) -> dict[str, Any] | None:
        if kind_of(self.nodes[name].router).scripted:
            return self.observed(name)
        return self.backend.control_client(name).try_call("status", timeout=2.0)

    def statuses(self, names: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """`status` of every node in `names`, asked concurrently."""
        return dict(zip(names, fan_out(self.status, names, POLL_WORKERS)))

    def observed(self, name: str) -> dict[str, Any] | None:
        """A bare image's status as its peers see it (it has no control
        endpoint): running, a peer of each neighbour that lists it as one, in
        the mesh of each neighbour that meshes it (a GRAFT puts both ends in
        each other's mesh). Neighbours that are bare images too cannot be
        asked: their link counts as up once both run, and they are left out
        of its mesh (`meshed`)."""
        if not self.backend.is_running(name):
            return None
        peers = []
        mesh: dict[str, list[str]] = {topic: [] for topic in self.nodes[name].topics}
        for p in self.nodes[name].neighbours:
            if p not in self.nodes:
                continue
            if kind_of(self.nodes[p].router).scripted:
                if self.backend.is_running(p):
                    peers.append(p)
                continue
            status = self.backend.control_client(p).try_call("status", timeout=2.0)
            if status is not None and name in status.get("peers", []):
                peers.append(p)
                for topic, members in (status.get("mesh") or {}).items():
                    if name in members and topic in mesh:
                        mesh[topic].append(p)
        return {"name": name, "peers": sorted(peers), "mesh": mesh, "observed": True}

    def expected_peers(self, name: str) -> set[str]:
        st = self.nodes[name]
        return {
            p for p in st.neighbours
            if p in self.nodes and p not in st.waiting and self.nodes[p].reachable and not st.life.cut_off_from(p)
            and not self.nodes[p].life.cut_off_from(name)
        }

    def meshed(self, name: str, status: dict[str, Any]) -> bool:
        """Whether each of the node's topics has a mesh of mesh_low peers (or
        of every peer it can mesh with, when it has fewer). A bare image's
        mesh is seen only through its neighbours (`observed`): its peers that
        are bare images too may hold mesh slots nobody can be asked about, so
        it counts as meshed once what is seen plus those unseen peers reach
        the need; it misses its mesh only when even they could not fill it."""
        st = self.nodes[name]
        if not st.mesh_low:
            return True
        any_topic = kind_of(st.router).engine.mesh_any_topic
        peers = set(status.get("peers", []))
        mesh = status.get("mesh", {})
        for topic in st.topics:
            if topic not in mesh:
                return False
            candidates = [
                p for p in peers
                if p in self.nodes and _meshes(self.nodes[p].router) and (any_topic or topic in self.nodes[p].topics)
            ]
            unseen = sum(kind_of(self.nodes[p].router).scripted for p in candidates) if status.get("observed") else 0
            if len(mesh[topic]) + unseen < min(st.mesh_low, len(candidates)):
                return False
        return True

    def listening(self, names: Sequence[str], timeout: float, reporter: Reporter) -> None:
        """Until every node of `names` with a control endpoint answers it (so
        it listens), at most `timeout` seconds: a gossipsub-interop node dials
        its peers once, as it starts (go's ends the run when a connect fails),
        so the nodes it dials must already listen. Who never answers is left
        to `wait` to name."""
        pending = {n for n in names if not kind_of(self.nodes[n].router).scripted}
        deadline = time.monotonic() + timeout
        with reporter.phase(f"waiting for {len(pending)} nodes to listen before the bare images start", len(pending)) as advance:
            while pending and time.monotonic() < deadline:
                answered = {n for n, status in self.statuses(sorted(pending)).items() if status is not None}
                pending -= answered
                advance(len(answered))
                if pending:
                    time.sleep(POLL_S)

    def wait(
        self, names: Sequence[str], timeout: float, reporter: Reporter, mesh_timeout: float | None = None
    ) -> None:
        pending = set(names)
        last: dict[str, dict[str, Any] | None] = {}
        answered: set[str] = set()
        dead: set[str] = set()
        began = time.monotonic()
        deadline = began + timeout
        with reporter.phase(f"waiting for {len(names)} nodes to connect", len(names)) as advance:
            while pending and time.monotonic() < deadline:
                progress = False
                for name, status in self.statuses(sorted(pending)).items():
                    last[name] = status
                    if status is None:
                        if not self.backend.is_running(name):
                            dead.add(name)
                        continue
                    progress |= name not in answered
                    answered.add(name)
                    if self.expected_peers(name) <= set(status.get("peers", [])):
                        pending.discard(name)
                        progress = True
                        advance(1)
                if dead & pending:
                    break
                if progress:
                    deadline = min(began + STALL_CAP * timeout, max(deadline, time.monotonic() + timeout / 2))
                if pending:
                    time.sleep(POLL_S)
        if pending:
            self._fail(sorted(pending), last, dead)
        mesh_pending = set(names)
        mesh_deadline = time.monotonic() + (mesh_timeout if mesh_timeout is not None else 5.0 + 0.05 * len(names))
        with reporter.phase("waiting for meshes", len(names)) as advance:
            while mesh_pending and time.monotonic() < mesh_deadline:
                for name, status in self.statuses(sorted(mesh_pending)).items():
                    if status is not None and self.meshed(name, status):
                        mesh_pending.discard(name)
                        advance(1)
                if mesh_pending:
                    time.sleep(POLL_S)
        if mesh_pending:
            shown = ", ".join(sorted(mesh_pending)[:10])
            self.warn(f"{len(mesh_pending)} node(s) had no full mesh after the wait: {shown}")

    def _fail(self, pending: list[str], last: dict[str, Any], dead: set[str]) -> None:
        exited = [n for n in pending if n in dead]
        silent = [n for n in pending if n not in dead and last.get(n) is None]
        partial = [n for n in pending if n not in dead and last.get(n) is not None]
        parts = []
        if exited:
            parts.append(f"exited: {', '.join(exited)} (see {Path(self.backend.run_dir) / 'node-logs'})")
        if silent:
            parts.append(f"never answered: {', '.join(silent[:20])}{' ...' if len(silent) > 20 else ''}")
        if partial:
            desc = []
            for n in partial[:20]:
                missing = sorted(self.expected_peers(n) - set(last[n].get("peers", [])))
                desc.append(f"{n} (missing {', '.join(missing[:5])})")
            parts.append(f"not connected: {'; '.join(desc)}")
        self.event(RunEvent.WARNING, message="nodes never came up: " + "; ".join(parts))
        raise TestbedError(f"{len(pending)} node(s) never came up: " + "; ".join(parts))


def _meshes(router: str) -> bool:
    return kind_of(router).engine.meshes
