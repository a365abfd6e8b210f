"""gossipsub v1.1/v1.2 in the trio runtime over real TCP: multistream-select
settles on the newest version both sides speak, and a scoring router writes
its per-heartbeat score file (node/trace/scores.py)."""

from __future__ import annotations

import csv

import trio

from node.engine.api import MESHSUB_ID, MESHSUB_V12_ID
from node.trace.scores import COLUMNS
from test_node_runtime import make_cfg, pid, running, wait_for


def test_v12_speaks_12_to_v12_and_10_to_v10_and_writes_scores(tmp_path):
    scores = tmp_path / "scores" / "n0.csv"

    async def main():
        a = make_cfg(tmp_path, "n0", router="gossipsub-v1.2", scores_path=str(scores))
        b = make_cfg(tmp_path, "n1", router="gossipsub-v1.2")
        c = make_cfg(tmp_path, "n2", router="gossipsub")
        async with running(a, b, c) as (na, nb, nc):
            await na.connect("127.0.0.1", nb.listen_port, "n1", True)
            await na.connect("127.0.0.1", nc.listen_port, "n2", True)
            await wait_for(lambda: len(na.engine.peers) == 2 and len(nc.engine.peers) == 1)
            assert na.engine.peers[nb.peer_id] == MESHSUB_V12_ID
            assert na.engine.peers[nc.peer_id] == MESHSUB_ID
            assert nc.engine.peers[na.peer_id] == MESHSUB_ID
            assert na.engine.outbound == {nb.peer_id, nc.peer_id} and not nb.engine.outbound
            await trio.sleep(0.7)  # a few 0.2 s heartbeats

    trio.run(main)
    with open(scores) as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == COLUMNS
    assert {row[1] for row in rows[1:]} == {pid("n1"), pid("n2")}
    assert not (tmp_path / "scores" / "n1.csv").exists()


def test_docker_node_writes_its_score_file_into_the_run_directory(tmp_path):
    import dataclasses

    from node.config import NodeConfig
    from orchestrator.backends.docker import nodedir as docker_nodedir

    run = tmp_path / "run"
    cfg = NodeConfig(name="a", index=0, router="gossipsub-v1.2", seed=1, listen_host="10.0.0.2", listen_port=4001,
                     control_host="10.0.0.2", control_port=4002, token="t", trace_path=str(run / "traces" / "a.pb"),
                     scores_path=str(run / "scores" / "a.csv"))
    seen = docker_nodedir.prepare(run, cfg, docker_nodedir.node_user())
    assert seen.scores_path == "/node/scores.csv"
    link = run / "scores" / "a.csv"
    assert link.is_symlink() and link.resolve() == (docker_nodedir.node_dir(run.resolve(), "a") / "scores.csv")
    b = dataclasses.replace(cfg, name="b", scores_path="", trace_path=str(run / "traces" / "b.pb"))
    v10 = docker_nodedir.prepare(run, b, docker_nodedir.node_user())
    assert v10.scores_path == "" and not (run / "scores" / "b.csv").exists()


def test_app_specific_scores_from_the_node_config_are_p5_in_the_score_file(tmp_path):
    """NodeConfig.app_specific_scores (through its JSON, as a container reads
    it) reach the engine: n0 rates n1 at P5 -3 and n2, not named, at 0."""
    from node.config import NodeConfig

    scores = tmp_path / "n0.csv"

    async def main():
        a = make_cfg(tmp_path, "n0", router="gossipsub-v1.2", scores_path=str(scores),
                     params={"heartbeat_interval": 0.2, "AppSpecificWeight": 1.0},
                     app_specific_scores={pid("n1"): -3.0})
        a = NodeConfig.from_json(a.to_json())
        b = make_cfg(tmp_path, "n1", router="gossipsub-v1.2")
        c = make_cfg(tmp_path, "n2", router="gossipsub-v1.2")
        async with running(a, b, c) as (na, nb, nc):
            await na.connect("127.0.0.1", nb.listen_port, "n1", True)
            await na.connect("127.0.0.1", nc.listen_port, "n2", True)
            await wait_for(lambda: len(na.engine.peers) == 2)
            await trio.sleep(0.7)

    trio.run(main)
    with open(scores) as f:
        rows = list(csv.DictReader(f))
    assert {(r["peer"], float(r["p5"])) for r in rows} == {(pid("n1"), -3.0), (pid("n2"), 0.0)}


def test_peer_exchange_dials_go_to_the_address_book(tmp_path):
    """A star over TCP: hub n0 keeps a mesh of 2 and prunes its other leaves
    with PX (DoPX); the pruned leaves dial the peers offered at the
    addresses their peer book gives, so leaves connect to leaves."""
    from node.config import PeerAddress
    from test_node_process import free_port

    names = ["n0", "a", "b", "c", "d"]
    ports = {n: free_port() for n in names}
    book = {n: PeerAddress(n, "127.0.0.1", ports[n], pid(n)) for n in names}
    params = {"heartbeat_interval": 0.2, "D": 2, "D_low": 1, "D_high": 2, "D_out": 0, "D_score": 1, "DoPX": True,
              "AcceptPXThreshold": 0, "PrunePeers": 3, "PruneBackoff": 5}
    cfgs = [make_cfg(tmp_path, n, router="gossipsub-v1.2", listen_port=ports[n], params=params,
                     initial_peers=(book["n0"],) if n != "n0" else (),
                     address_book=tuple(book[m] for m in names if m != n)) for n in names]

    async def main():
        async with running(*cfgs) as nodes:
            leaves = nodes[1:]
            await wait_for(lambda: any(len(leaf.links) > 1 for leaf in leaves), timeout=10)
            assert sum(leaf.counters["dials_asked"] for leaf in leaves) > 0

    trio.run(main)


def test_a_restarted_node_appends_a_readable_score_file(tmp_path):
    """A kill loses what the score file had buffered: an empty file (the
    header lost) gets its header from the next incarnation, and a row cut
    short is ended, so the analysis reads every whole row (seen on docker:
    a churned node's file began with a row and the analysis failed)."""
    from analysis.scores import read_scores
    from node.libp2p.identity import identity_for_index
    from node.trace.scores import ScoreFile

    peer = identity_for_index(1).peer_id
    scores = tmp_path / "scores"
    scores.mkdir()
    (scores / "a.csv").write_text("")
    (scores / "b.csv").write_text(",".join(COLUMNS) + "\n" + f"5,{pid('n1')[:20]}")  # cut mid-row
    for name in ("a", "b"):
        f = ScoreFile(scores / f"{name}.csv")
        f.write(7, [(peer, [2.0] + [0.0] * 8)])
        f.close()
    got = read_scores(tmp_path)
    assert sorted(zip(got["node"], got["time_ns"], got["score"])) == [("a", 7, 2.0), ("b", 7, 2.0)]
