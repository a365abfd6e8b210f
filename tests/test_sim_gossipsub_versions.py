"""gossipsub v1.1 and v1.2 in the simulator: the same engines, run
deterministically, with IDONTWANT saving copies of large messages on finite
uplinks, and the per-heartbeat score file beside the traces."""

from __future__ import annotations

import csv

from node.libp2p.identity import identity_for_index
from node.trace.scores import COLUMNS
from node.trace.file import read_trace
from test_simulator import simulate, trace_bytes

SETUP = """
name: versions
seed: 3
nodes: {{count: 30, router: {router}, topics: [t], uplink: 20mbit}}
overlay: {{type: random, degree: 6}}
links: {{latency: {{model: uniform, min_ms: 10, max_ms: 100}}}}
workload: {{topic: t, messages: 8, interval: 1s, size: 51200, publishers: {{count: 4}}}}
duration: 12s
linger: 4s
"""


def test_v11_and_v12_simulations_are_deterministic(tmp_path):
    for router in ("gossipsub-v1.1", "gossipsub-v1.2"):
        simulate(SETUP.format(router=router), tmp_path / f"{router}-a")
        simulate(SETUP.format(router=router), tmp_path / f"{router}-b")
        assert trace_bytes(tmp_path / f"{router}-a") == trace_bytes(tmp_path / f"{router}-b")
        a = sorted((tmp_path / f"{router}-a" / "scores").glob("*.csv"))
        assert [p.read_bytes() for p in a] == [
            (tmp_path / f"{router}-b" / "scores" / p.name).read_bytes() for p in a
        ]


def test_idontwant_cuts_copies_of_large_messages_and_delivery_stays_complete(tmp_path):
    _, v11 = simulate(SETUP.format(router="gossipsub-v1.1"), tmp_path / "v11")
    _, v12 = simulate(SETUP.format(router="gossipsub-v1.2"), tmp_path / "v12")
    assert v11.summary["delivery_ratio"] == v12.summary["delivery_ratio"] == 1.0
    assert v12.summary["pubsub.publish"] < 0.95 * v11.summary["pubsub.publish"]


def test_score_file_has_a_row_per_peer_per_heartbeat(tmp_path):
    simulate(SETUP.format(router="gossipsub-v1.1"), tmp_path / "run")
    with open(tmp_path / "run" / "scores" / "n0.csv") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == COLUMNS
    known = {identity_for_index(i).peer_id_b58 for i in range(30)}
    assert {row[1] for row in rows[1:]} <= known
    times = sorted({int(row[0]) for row in rows[1:]})
    assert len(times) >= 12  # one heartbeat a second for the whole run
    assert all(float(row[2]) == 0.0 for row in rows[1:])  # no weights set: every score is 0


def test_v10_runs_leave_no_score_file(tmp_path):
    simulate(SETUP.format(router="gossipsub"), tmp_path / "run")
    assert not (tmp_path / "run" / "scores").exists()


def test_analysis_reads_v12_traces_with_idontwant_as_protobuf_does(tmp_path, monkeypatch):
    """The columnar trace decoder does not know ControlMeta.idontwant; such
    records take its protobuf path and come out the same."""
    from analysis import ingest
    from test_analysis_columnar import assert_same

    monkeypatch.setattr(ingest, "COLUMNAR_MIN_BYTES", 0)
    simulate(SETUP.format(router="gossipsub-v1.2"), tmp_path / "run")
    path = tmp_path / "run" / "traces" / "n0.pb"
    assert any(ev.sendRPC.meta.control.idontwant for ev in read_trace(path))
    assert assert_same(path, tmp_path).records > 0


PX_STAR = """
name: px
seed: 4
nodes:
  count: 12
  router: gossipsub-v1.2
  topics: [t]
  router_params: {{D: 3, D_low: 2, D_high: 4, D_out: 1, D_score: 2, DoPX: {px}, AcceptPXThreshold: 0, PrunePeers: 4}}
overlay: {{type: explicit, edges: [{edges}]}}
links: {{latency: {{model: constant, ms: 20}}}}
workload: {{topic: t, messages: 10, interval: 500ms, size: 2048, publishers: {{nodes: [n1]}}}}
duration: 10s
linger: 2s
"""


def test_peer_exchange_dials_are_opened_by_the_simulator(tmp_path):
    """A star: n0's mesh is oversubscribed by its 11 leaves, its PRUNEs carry
    PX (DoPX) of other leaves, and the pruned leaves connect to them: more
    connections than the overlay's 11 edges, and only then."""
    edges = ", ".join(f"[n0, n{i}]" for i in range(1, 12))
    _, without = simulate(PX_STAR.format(px="false", edges=edges), tmp_path / "without")
    _, with_px = simulate(PX_STAR.format(px="true", edges=edges), tmp_path / "with")
    assert without.summary["connect"] == 11
    assert with_px.summary["connect"] > 11
    # pruned leaves that know only n0 get what its gossip reaches; with PX they mesh among themselves
    assert with_px.summary["delivery_ratio"] == 1.0 > without.summary["delivery_ratio"]


P5_GROUPS = """
name: p5
seed: 2
groups:
  - {{name: honest, prefix: h, count: 6, router: gossipsub-v1.2, topics: [t],
     router_params: {{AppSpecificWeight: 2.0}}}}
  - {{name: low, prefix: l, count: 2, router: {low_router}, topics: [t], app_specific_score: -5}}
overlay: {{type: full}}
links: {{latency: {{model: constant, ms: 10}}}}
workload: {{topic: t, messages: 3, interval: 1s, size: 100, publishers: {{nodes: [h0]}}}}
duration: 5s
linger: 1s
"""


def test_a_groups_app_specific_score_is_p5_in_every_scoring_router(tmp_path):
    """`app_specific_score: -5` on group low: every scoring router rates l0
    and l1 at P5 = -5 (times AppSpecificWeight 2 in the score file) and
    everyone else at 0; the low group's routers, at the default
    AppSpecificWeight 0, put no P5 in their scores."""
    resolved, _ = simulate(P5_GROUPS.format(low_router="gossipsub-v1.2"), tmp_path / "run")
    name_of = {identity_for_index(i).peer_id_b58: n.name for i, n in enumerate(resolved.nodes)}
    with open(tmp_path / "run" / "scores" / "h0.csv") as f:
        rows = list(csv.DictReader(f, fieldnames=COLUMNS))[1:]
    p5 = {name_of[r["peer"]]: float(r["p5"]) for r in rows}
    assert p5 == {"h1": 0.0, "h2": 0.0, "h3": 0.0, "h4": 0.0, "h5": 0.0, "l0": -10.0, "l1": -10.0}
    with open(tmp_path / "run" / "scores" / "l0.csv") as f:
        assert {float(r["p5"]) for r in list(csv.DictReader(f, fieldnames=COLUMNS))[1:]} == {0.0}
