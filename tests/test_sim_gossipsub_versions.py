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
