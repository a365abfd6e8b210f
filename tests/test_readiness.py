"""Readiness's mesh rule (orchestrator/run/readiness.py `meshed`), without a
backend: a bare gossipsub-interop image's mesh is seen only through the
neighbours that can be asked, so its bare-image peers, whose slots nobody
can see, count toward the need rather than being dropped from it.

subnet-blob-msg-docker (5 bare images in a full overlay of 16) warned that
three images had no full mesh while the traces showed 2 and 4 neighbours
meshing them and 4 bare-image peers that might hold the rest."""

from __future__ import annotations

from orchestrator.experiment.lifecycle import NodeLife
from orchestrator.routers.kinds import image_router
from orchestrator.run.nodestate import NodeState
from orchestrator.run.readiness import Readiness

IMAGE = image_router("contract-node:test")
OURS = [f"ours-{i}" for i in range(3)]
IMAGES = [f"img-{i}" for i in range(4)]


def readiness() -> Readiness:
    everyone = OURS + IMAGES
    nodes = {
        n: NodeState(n, IMAGE if n in IMAGES else "gossipsub", 1, [p for p in everyone if p != n], 4,
                     NodeLife(topics=frozenset({"t"})))
        for n in everyone
    }
    return Readiness(nodes, backend=None, warn=print, event=lambda *a, **k: None)  # type: ignore[arg-type]


def observed(mesh: list[str]) -> dict:
    return {"name": "img-0", "peers": sorted(OURS + IMAGES[1:]), "mesh": {"t": mesh}, "observed": True}


def test_a_bare_images_unseen_peers_count_toward_its_mesh():
    r = readiness()
    # one neighbour of ours meshes it; its three bare-image peers may hold the other three slots
    assert r.meshed("img-0", observed(["ours-0"]))
    # nobody seen meshing it: even every bare-image peer cannot make D_low 4
    assert not r.meshed("img-0", observed([]))


def test_a_node_that_answers_is_judged_by_its_own_mesh():
    r = readiness()
    status = {"name": "ours-0", "peers": sorted(OURS[1:] + IMAGES), "mesh": {"t": ["ours-1", "img-0", "img-1"]}}
    assert not r.meshed("ours-0", status)
    status["mesh"]["t"].append("img-2")
    assert r.meshed("ours-0", status)


class _Clock:
    """Virtual time for readiness.wait: monotonic() reads it, sleep() moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _SlowBackend:
    """Node i answers its control endpoint from `answers[i]` seconds and is
    connected to both ring neighbours from `connects[i]` (None: never)."""

    def __init__(self, clock: _Clock, names: list[str], answers: list[float], connects: list[float | None]) -> None:
        self.clock, self.names, self.answers, self.connects = clock, names, answers, connects

    def is_running(self, name: str) -> bool:
        return True

    def control_client(self, name: str):
        i = self.names.index(name)
        backend = self

        class Client:
            def try_call(self, cmd: str, timeout: float) -> dict | None:
                now = backend.clock.now
                if now < backend.answers[i]:
                    return None
                connected = backend.connects[i] is not None and now >= backend.connects[i]
                ring = [backend.names[(i - 1) % len(backend.names)], backend.names[(i + 1) % len(backend.names)]]
                return {"name": name, "peers": ring if connected else [], "mesh": {}}

        return Client()


def _ring_wait(monkeypatch, answers: list[float], connects: list[float | None], timeout: float) -> tuple[float, str]:
    """(virtual seconds the wait took, its error or "")."""
    import orchestrator.run.readiness as readiness_module
    from orchestrator.errors import TestbedError
    from orchestrator.progress import Reporter

    clock = _Clock()
    monkeypatch.setattr(readiness_module, "time", clock)
    names = [f"n{i}" for i in range(len(answers))]
    nodes = {n: NodeState(n, "floodsub", 1, [names[(i - 1) % len(names)], names[(i + 1) % len(names)]], 0,
                          NodeLife(topics=frozenset({"t"}))) for i, n in enumerate(names)}
    r = Readiness(nodes, _SlowBackend(clock, names, answers, connects), warn=print, event=lambda *a, **k: None)
    try:
        r.wait(names, timeout, Reporter(), mesh_timeout=0)
    except TestbedError as exc:
        return clock.now, str(exc)
    return clock.now, ""


def test_nodes_that_keep_coming_up_are_waited_for_beyond_the_timeout(monkeypatch):
    """One node more every 1.5 s, the last at 7.5 s, with a 4 s timeout:
    each one that comes up gives the others 2 s more."""
    took, error = _ring_wait(monkeypatch, [0.0] * 6, [1.5 * i for i in range(6)], timeout=4.0)
    assert error == "" and 7.5 <= took < 8.0


def test_a_network_that_stops_coming_up_fails_half_a_timeout_after_its_last_progress(monkeypatch):
    took, error = _ring_wait(monkeypatch, [0.0] * 6, [0.0, 1.5, 3.0, 4.5, None, None], timeout=4.0)
    assert "never came up" in error and "n4 (missing" in error and 6.5 <= took < 7.0


def test_the_wait_never_outlasts_its_cap(monkeypatch):
    """Nodes that answer one by one for ever, none ever connected: the wait
    ends at STALL_CAP times the timeout, naming who is not connected."""
    from orchestrator.run.readiness import STALL_CAP

    took, error = _ring_wait(monkeypatch, [1.5 * i for i in range(40)], [None] * 40, timeout=4.0)
    assert "not connected" in error and STALL_CAP * 4.0 <= took < STALL_CAP * 4.0 + 0.5
