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
