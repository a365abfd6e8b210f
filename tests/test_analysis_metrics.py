"""The metrics on a hand-made five-node run whose every value is worked out
by hand (tests/spark_fixtures.py, worked_example): a killed node, duplicates,
a message that never arrives, a node that joins late, a node that leaves."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

import analysis
from analysis.metrics import (
    INF,
    down_intervals,
    gini,
    recovery_after_churn,
    short_links,
    shortest_paths,
    subscription_intervals,
)
from analysis.ingest import reference_table
from node.trace.vocab import DELIVER, PUBLISH, RECV_RPC, SEND_RPC
from tests.spark_fixtures import M1, M2, M3, M4, M5, RunBuilder, mid, msg, requires_java, worked_example
from tests.spark_fixtures import spark  # noqa: F401

approx = pytest.approx


@pytest.fixture(scope="module")
def worked(tmp_path_factory, spark):  # noqa: F811
    root = worked_example(tmp_path_factory.mktemp("worked")).write()
    return root, analysis.run_analysis(root)


# ------------------------------------------------------------------ pure helpers (no Spark)


def test_gini_even_and_concentrated():
    assert gini([5, 5, 5, 5]) == approx(0.0)
    assert gini([0, 0, 0, 10]) == approx(0.75)
    assert gini([0, 20, 320, 440, 620]) == approx(0.474285714)
    assert gini([]) is None


def test_short_links_are_those_whose_receiver_recorded_fewer_rpcs_than_were_sent():
    S, R = SEND_RPC, RECV_RPC
    counts = pd.DataFrame(
        [("A", S, "B", 3), ("B", R, "A", 1), ("B", S, "A", 1), ("A", R, "B", 1), ("A", S, "C", 2),
         ("C", S, "B", 1), ("A", S, "X", 4), ("A", PUBLISH, None, 7)],
        columns=["node", "type", "peer", "events"],
    )
    # (node, type, peer, events). A->B: 3 sent, B received 1; B->A: 1 sent, A received 1; A->C: 2 sent,
    # C recorded nothing from A; C->B: 1 sent, B recorded nothing from C; A->X: X wrote no trace, so
    # what it received is unknown and its link is not short
    assert short_links(counts, ["A", "B", "C"]) == [("A", "B", 1), ("A", "C", 0), ("C", "B", 0)]
    assert short_links(counts.iloc[0:0], ["A"]) == []


def test_shortest_paths_take_the_cheaper_two_hop_route():
    edges = [{"a": "A", "b": "B", "latency_ms": 10}, {"a": "B", "b": "C", "latency_ms": 10},
             {"a": "A", "b": "C", "latency_ms": 30}]
    assert shortest_paths(edges, ["A"])["A"] == {"A": 0.0, "B": 10.0, "C": 20.0}


def test_subscription_intervals_join_leave_and_topology_fallback():
    rows = [("a", 9, 10, "t"), ("a", 10, 20, "t"), ("a", 9, 30, "t"), ("b", 10, 5, "t")]
    got = subscription_intervals(rows, {"a": ["t"], "b": ["t"], "c": ["t"]})
    assert ("a", "t", 10, 20) in got
    assert ("a", "t", 30, 1 << 62) in got
    assert ("b", "t", -(1 << 62), 5) in got  # left before its trace showed a JOIN
    assert ("c", "t", -(1 << 62), 1 << 62) in got  # no JOIN/LEAVE at all: topology's topics


def test_recovery_definition():
    s = 1_000_000_000
    msgs = pd.DataFrame({"publish_ts": [1 * s, 11 * s, 12 * s, 13 * s],
                         "expected": [10, 10, 10, 10], "delivered": [10, 2, 10, 10]})
    rec = recovery_after_churn(msgs, [{"t_ns": 10 * s, "action": "kill", "nodes": ["x"]}], 0, 20 * s)
    assert rec[0]["pre_ratio"] == 1.0
    assert rec[0]["min_ratio"] == 0.2
    assert rec[0]["recovered"] is True and rec[0]["recovery_s"] == 2.0
    # a dip that never comes back
    msgs.loc[3, "delivered"] = 5
    rec = recovery_after_churn(msgs, [{"t_ns": 10 * s, "action": "kill", "nodes": ["x"]}], 0, 20 * s)
    assert rec[0]["recovered"] is False and rec[0]["recovery_s"] is None


# ------------------------------------------------------------------ the Spark job


@requires_java
@pytest.mark.spark
def test_headline_figures(worked):
    _, s = worked
    assert s["nodes"] == 5
    assert s["messages"] == 5
    # m1: B,C,D  m2: A,C,D  m3: B,C,E (D killed, E joined)  m4: B,E (C left)  m5: B,E
    assert s["expected_deliveries"] == 13
    assert s["deliveries"] == 10
    assert s["unexpected_deliveries"] == 0
    assert s["delivery_ratio"] == approx(10 / 13)
    assert s["messages_lost"] == 1  # m4
    assert s["messages_complete"] == 3  # m1, m3, m5
    assert s["min_message_delivery_ratio"] == 0.0
    # latencies 10,10,12,15,20,25,30,40,40,60 ms; linear-interpolated percentiles
    assert s["latency_ms"] == approx({"p50": 22.5, "p90": 42.0, "p99": 58.2, "max": 60.0, "mean": 26.2})
    assert s["latency_p99_ms"] == approx(58.2)
    assert s["duplicates"] == 3
    assert s["duplicates_per_message"] == approx(0.6)
    # 13 publish entries in SEND_RPC metas (drops not counted) over 10 deliveries
    assert s["transmissions"] == 13
    assert s["amplification"] == approx(1.3)
    assert s["control"] == {"publish": 13, "deliver": 10, "graft": 2, "prune": 1, "ihave": 1, "iwant": 1}
    assert s["rpcs"] == {"sent": 18, "received": 18, "dropped": 2}
    assert s["bytes"] == {"sent": 1400, "received": 1400, "dropped": 200}
    assert s["load_gini"] == approx(0.474285714)
    assert s["load_max_over_mean"] == approx(620 / 280)


@requires_java
@pytest.mark.spark
def test_lower_bound_and_stretch(worked):
    root, s = worked
    # stretch per delivery: 1.2 1.25 1.2 | 1.0 1.5 | 2 2 2 | 1.0 1.333
    assert s["stretch"]["p50"] == approx(1.2916667)
    assert s["stretch"]["p99"] == approx(2.0)
    d = pd.read_parquet(root / "metrics" / "deliveries.parquet")
    d = d.set_index(["msg", "node"])
    assert d.loc[(mid(M1), "C"), "lower_bound_ms"] == approx(20.0)  # A-B-C, not A-C (30)
    assert d.loc[(mid(M1), "D"), "lower_bound_ms"] == approx(25.0)
    assert d.loc[(mid(M2), "A"), "lower_bound_ms"] == approx(10.0)
    assert d.loc[(mid(M5), "E"), "stretch"] == approx(40 / 30)
    assert not d.loc[(mid(M2), "D"), "delivered"]  # dropped C->D: never arrives


@requires_java
@pytest.mark.spark
def test_expected_recipients_follow_kill_join_and_leave(worked):
    root, _ = worked
    d = pd.read_parquet(root / "metrics" / "deliveries.parquet")
    expected = {m: sorted(d.loc[d["msg"] == mid(m), "node"]) for m in (M1, M2, M3, M4, M5)}
    assert expected[M1] == ["B", "C", "D"]  # E has not joined yet
    assert expected[M2] == ["A", "C", "D"]
    assert expected[M3] == ["B", "C", "E"]  # D killed at 3000, E joined at 2500
    assert expected[M4] == ["B", "E"]  # C left at 4000
    assert expected[M5] == ["B", "E"]
    m = pd.read_parquet(root / "metrics" / "messages.parquet").set_index("msg")
    assert m.loc[mid(M4), "delivered"] == 0 and m.loc[mid(M4), "expected"] == 2
    assert m.loc[mid(M3), "duplicates"] == 2
    assert m.loc[mid(M1), "latency_max_ms"] == approx(30.0)
    assert list(m.loc[mid(M1), "publishers"]) == ["A"]


@requires_java
@pytest.mark.spark
def test_per_node_counts(worked):
    root, _ = worked
    n = pd.read_parquet(root / "metrics" / "nodes.parquet").set_index("node")
    assert n.loc["A", "published"] == 4
    assert n.loc["B", "delivered"] == 3 and n.loc["B", "duplicated"] == 1
    assert n.loc["C", "msgs_received"] == 4
    assert n.loc["B", "msgs_received"] == 4
    assert n.loc["E", "msgs_received"] == 3
    assert list(n.loc[["A", "B", "C", "D", "E"], "rpcs_sent"]) == [6, 7, 4, 0, 1]
    assert list(n.loc[["A", "B", "C", "D", "E"], "bytes_sent"]) == [440, 620, 320, 0, 20]
    assert list(n.loc[["A", "B", "C", "D", "E"], "rpcs_received"]) == [3, 6, 4, 1, 4]
    assert n.loc["A", "rpcs_dropped"] == 1 and n.loc["C", "rpcs_dropped"] == 1
    assert n.loc["A", "graft_sent"] == 1 and n.loc["B", "graft_received"] == 1
    assert n.loc["C", "prune_sent"] == 1 and n.loc["B", "prune_received"] == 1
    assert n.loc["A", "ihave_sent"] == 1 and n.loc["A", "ihave_ids_sent"] == 2
    assert n.loc["E", "iwant_sent"] == 1 and n.loc["A", "iwant_received"] == 1
    assert n.loc["D", "expected"] == 2 and n.loc["D", "delivered_expected"] == 1
    assert n.loc["E", "delivery_ratio"] == approx(2 / 3)


@requires_java
@pytest.mark.spark
def test_mesh_degree_over_time(worked):
    root, s = worked
    m = pd.read_parquet(root / "metrics" / "mesh_degree.parquet")
    got = {(int(r.t_s), r.node): int(r.degree) for r in m.itertuples()}
    assert got[(1, "C")] == 3 and got[(1, "D")] == 1 and got[(1, "A")] == 2
    assert got[(3, "B")] == 3 and got[(3, "E")] == 1  # E grafted at 2600
    assert (3, "D") not in got  # killed at 3000
    assert (4, "C") not in got  # left at 4000
    assert got[(5, "A")] == 1 and got[(5, "B")] == 2  # C pruned at 4010
    assert len(m) == 28
    assert s["mesh_degree"] == approx({"mean": 43 / 28, "p50": 1.5, "min": 0, "max": 3})
    hist = pd.read_parquet(root / "metrics" / "mesh_degree_hist.parquet")
    assert dict(zip(hist["degree"], hist["samples"])) == {0: 4, 1: 10, 2: 9, 3: 5}


@requires_java
@pytest.mark.spark
def test_recovery_after_churn(worked):
    _, s = worked
    kill, leave = s["recovery"]
    assert kill["action"] == "kill" and kill["t_s"] == 3.0
    assert kill["pre_ratio"] == approx(5 / 6) and kill["recovery_s"] == 0.0 and kill["recovered"]
    assert leave["pre_ratio"] == approx(8 / 9)
    assert leave["min_ratio"] == 0.0  # m4 one second after the leave
    assert leave["recovery_s"] == 2.0  # m5 two seconds after: all delivered
    assert s["recovery_max_s"] == 2.0 and s["recovered_all"] is True


@requires_java
@pytest.mark.spark
def test_tables_and_summary_json_are_written(worked):
    root, s = worked
    on_disk = json.loads((root / "summary.json").read_text())
    assert on_disk["delivery_ratio"] == approx(s["delivery_ratio"])
    assert [e["passed"] for e in on_disk["expectations"]] == [True, True]
    for name in ("messages", "deliveries", "nodes", "latency_cdf", "timeseries_delivery",
                 "timeseries_control", "mesh_degree", "duplicates_hist"):
        assert (root / "metrics" / f"{name}.parquet").exists(), name
    cdf = pd.read_parquet(root / "metrics" / "latency_cdf.parquet")
    assert cdf["latency_ms"].iloc[0] == 10.0 and cdf["latency_ms"].iloc[-1] == 60.0
    ts = pd.read_parquet(root / "metrics" / "timeseries_delivery.parquet").set_index("t_s")
    assert ts.loc[5, "delivery_ratio"] == 0.0 and ts.loc[6, "delivery_ratio"] == 1.0


@requires_java
@pytest.mark.spark
def test_go_json_traces_without_events_or_topology(tmp_path, spark):  # noqa: F811
    """go-libp2p-pubsub JSON tracer output, no events.jsonl/topology.json: a
    node counts as up between its first and last trace event, so D (last seen
    at 1030) is not expected for m2."""
    root = worked_example(tmp_path).write(fmt="json", with_events=False, with_topology=False)
    s = analysis.run_analysis(root)
    assert s["messages"] == 5
    # m1 B,C,D | m2 A,C (D last seen at 1030) | m3 B,C,E | m4 B,E | m5 B,E
    assert s["expected_deliveries"] == 12
    assert s["deliveries"] == 10
    assert s["latency_ms"]["p50"] == approx(22.5)
    assert s["duplicates"] == 3
    assert s["stretch"]["p50"] is None and s["lower_bound_available"] is False


@requires_java
@pytest.mark.spark
def test_no_messages(tmp_path, spark):  # noqa: F811
    b = RunBuilder(tmp_path)
    b.join("A", 0)
    b.join("B", 0)
    b.graft("A", 100, "B")
    b.event(0, "run_start")
    b.event(2000, "run_end")
    root = b.write()
    s = analysis.run_analysis(root)
    assert s["messages"] == 0 and s["expected_deliveries"] == 0
    assert s["delivery_ratio"] is None and s["latency_ms"]["p50"] is None
    assert s["amplification"] is None and s["duplicates_per_message"] is None
    res = analysis.check_assertions(s, ["delivery_ratio >= 0.9"])
    assert not res[0].passed and "no value" in res[0].message
    assert math.isclose(s["mesh_degree"]["max"], 1)  # A's mesh {B} at t = 1 s and 2 s
    assert s["mesh_degree"]["mean"] == approx(2 / 6)


@requires_java
@pytest.mark.spark
def test_control_time_series_counts_from_the_first_trace_event_for_traces_alone(tmp_path, spark):  # noqa: F811
    """Without manifest.json or events.jsonl, t0 is the first trace event,
    known only after the first round: the series still counts from it."""
    b = worked_example(tmp_path)
    b.manifest = None
    b.log.clear()
    b.publish("A", -2500, msg("A", 9))  # the traces now begin 2.5 s before the worked example's t0
    root = b.write(with_events=False, with_topology=False)
    analysis.run_analysis(root)
    events = pd.concat([reference_table(p).to_pandas() for p in sorted((root / "traces").glob("*.pb"))])
    t0 = int(events["ts"].min())
    delivers = events[events["type"] == DELIVER]
    want = ((delivers["ts"] - t0) // 1_000_000_000).value_counts().sort_index()
    ts = pd.read_parquet(root / "metrics" / "timeseries_control.parquet").set_index("t_s")
    assert t0 == -2500 * 1_000_000
    assert ts.loc[ts["deliver"] > 0, "deliver"].to_dict() == want.to_dict()


@requires_java
@pytest.mark.spark
def test_messages_in_flight_when_the_traces_end(tmp_path, spark):  # noqa: F811
    b = worked_example(tmp_path)
    m6 = msg("A", 5)
    b.publish("A", 6900, m6)
    b.send("A", "B", 6901, m6)  # on its way to B when the run ends at 7000
    b.send("A", "D", 6901, m6)  # D was killed at 3000: lost to churn, not in flight
    b.event(6900, "publish", node="A", via=["A"], topic="t", message_id=mid(m6), size=9, seq=0)
    s = analysis.run_analysis(b.write())
    assert s["in_flight"] == {"rpcs_unreceived": 2, "rpcs_in_flight_at_end": 1, "messages_propagating_at_end": 1}
    assert s["messages_propagating_at_end"] == 1
    assert s["messages_lost"] == 2  # m4 and m6: the figure itself does not change; the warning says why


def test_message_helper_ids_are_hex_of_from_plus_seqno():
    assert mid(msg("A", 1)) == (b"A" + (1).to_bytes(8, "big")).hex()


def test_a_node_is_down_from_when_its_kill_was_issued():
    """A docker kill lands ~300 ms after it is issued (quick.yaml: a publish 6
    ms after the kill was issued was counted as expected at the dying node, a
    loss in 2 of 3 runs). Down from the churn event that names the node and
    the same action; a node_down of another cause keeps its own time."""
    events = [
        {"t_ns": 100, "kind": "churn", "action": "kill", "nodes": ["a", "b"]},
        {"t_ns": 105, "kind": "publish", "node": "c"},
        {"t_ns": 380, "kind": "node_down", "node": "a", "cause": "kill"},
        {"t_ns": 390, "kind": "node_down", "node": "b", "cause": "kill"},
        {"t_ns": 900, "kind": "node_up", "node": "a", "cause": "start"},
        {"t_ns": 950, "kind": "churn", "action": "leave", "nodes": ["c"]},
        {"t_ns": 990, "kind": "node_down", "node": "c", "cause": "stop"},
    ]
    down, resets = down_intervals(events, True, {})
    assert down == [("a", 100, 900), ("b", 100, INF), ("c", 990, INF)]
    assert resets == [("a", 380), ("b", 390), ("c", 990)]
