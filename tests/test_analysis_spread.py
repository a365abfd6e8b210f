"""Who first delivered a message from whom, and the meshes at the report's
snapshots (docs/metrics.md "First-delivery tree", "Mesh snapshots"): the
analysis's tables checked against an independent count from the raw traces
of the committed quick sim run, and the hop count's rules on small cases."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import analysis
from analysis.ingest import iter_events
from analysis.spread import first_delivery_tree
from node.trace.vocab import DELIVER, GRAFT, PRUNE, PUBLISH, REMOVE_PEER
from tests.spark_fixtures import requires_java
from tests.spark_fixtures import spark  # noqa: F401

QUICK = Path(__file__).parent / "fixtures" / "analysis_before" / "quick"


def test_hops_follow_the_senders_back_to_a_publisher():
    first = pa.table({
        "msg": ["m"] * 5 + ["k"] * 2,
        "node": ["A", "B", "C", "D", "E", "X", "Y"],
        "deliver_ts": [0, 10, 20, 30, 40, 5, 6],
        # A publishes m (its own delivery), B from A, C from B, D from a node with no trace, E from D;
        # k: X and Y name each other (no publisher among them)
        "from_peer": ["A", "A", "B", "ghost", "D", "Y", "X"],
    })
    got = first_delivery_tree(first, {"m": ["A"], "k": ["P"]})
    hops = dict(zip(zip(got["msg"], got["node"]), got["hops"]))
    assert hops[("m", "A")] == 0 and hops[("m", "B")] == 1 and hops[("m", "C")] == 2
    assert pd.isna(hops[("m", "D")]) and pd.isna(hops[("m", "E")])  # the chain breaks at "ghost"
    assert pd.isna(hops[("k", "X")]) and pd.isna(hops[("k", "Y")])  # a loop never reaches a publisher
    assert list(got.columns) == ["msg", "node", "deliver_ts", "from_peer", "hops"]


def raw_first_deliveries(traces: Path) -> tuple[dict, dict]:
    """From the trace files alone: each node's first DELIVER_MESSAGE per
    message (earliest timestamp, then file order) with its receivedFrom, and
    each message's publishers."""
    first: dict[tuple[str, str], tuple[int, int, str]] = {}
    publishers: dict[str, set[str]] = defaultdict(set)
    for path in sorted(traces.glob("*.pb")):
        node = path.stem
        for seq, ev in enumerate(iter_events(path)):
            if ev.type == PUBLISH:
                publishers[ev.publishMessage.messageID.hex()].add(node)
            elif ev.type == DELIVER:
                key = (ev.deliverMessage.messageID.hex(), node)
                cand = (ev.timestamp, seq, ev.deliverMessage.receivedFrom.decode())
                if key not in first or cand < first[key]:
                    first[key] = cand
    return first, publishers


def breadth_first_hops(first: dict, publishers: dict) -> dict[tuple[str, str], int]:
    """Hops by walking the tree outwards from the publishers, level by level."""
    children: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (msg, node), (_ts, _seq, frm) in first.items():
        if node not in publishers[msg]:
            children[(msg, frm)].append(node)
    hops = {}
    for msg, pubs in publishers.items():
        level, depth = sorted(pubs), 0
        while level:
            nxt = []
            for n in level:
                hops[(msg, n)] = depth
                nxt += [c for c in children.get((msg, n), ()) if (msg, c) not in hops]
            level, depth = nxt, depth + 1
    return hops


def raw_mesh_at(traces: Path, t_ns: int) -> set[tuple[str, str]]:
    """(node, peer) with peer in node's mesh at t_ns, replaying GRAFT, PRUNE
    and REMOVE_PEER of each node's own trace (no node is down before the
    first churn event of the quick run)."""
    links = set()
    for path in sorted(traces.glob("*.pb")):
        node = path.stem
        for ev in iter_events(path):
            if ev.timestamp > t_ns:
                break
            if ev.type == GRAFT:
                links.add((node, ev.graft.peerID.decode()))
            elif ev.type == PRUNE:
                links.discard((node, ev.prune.peerID.decode()))
            elif ev.type == REMOVE_PEER:
                links.discard((node, ev.removePeer.peerID.decode()))
    return links


@pytest.fixture(scope="module")
def quick(tmp_path_factory, spark):  # noqa: F811
    run = tmp_path_factory.mktemp("spread") / "quick"
    shutil.copytree(QUICK, run, ignore=shutil.ignore_patterns("*.before.json"))
    analysis.run_analysis(run)
    return run


@requires_java
@pytest.mark.spark
def test_first_deliveries_match_the_raw_traces(quick):
    first, publishers = raw_first_deliveries(quick / "traces")
    table = pd.read_parquet(quick / "metrics" / "first_deliveries.parquet")
    got = {(m, n): (int(ts), frm) for m, n, ts, frm in
           zip(table["msg"], table["node"], table["deliver_ts"], table["from_peer"])}
    assert got == {k: (ts, frm) for k, (ts, _seq, frm) in first.items()}
    assert len(got) > 100  # 10 messages to 16 nodes
    want_hops = breadth_first_hops(first, publishers)
    got_hops = {(m, n): int(h) for m, n, h in zip(table["msg"], table["node"], table["hops"]) if not pd.isna(h)}
    assert got_hops == {k: h for k, h in want_hops.items() if k in got}
    assert max(got_hops.values()) >= 2  # not a star: some copies travel more than one link


@requires_java
@pytest.mark.spark
def test_mesh_snapshots_match_the_raw_traces(quick):
    summary = json.loads((quick / "summary.json").read_text())
    snaps = summary["mesh_snapshots"]
    # the workload's start, after the kill of n7 (n7 down), after its start again
    assert [s["down"] for s in snaps] == [[], ["n7"], []]
    assert snaps[0]["label"].startswith("workload start")
    links = pd.read_parquet(quick / "metrics" / "mesh_links.parquet")
    t0 = int(summary["t0_ns"])
    at0 = links[links["snapshot"] == 0]
    t_ns = t0 + round(float(at0["t_s"].iloc[0]) * 1e9)
    assert set(zip(at0["node"], at0["peer"])) == raw_mesh_at(quick / "traces", t_ns)
    after_kill = links[links["snapshot"] == 1]
    assert "n7" not in set(after_kill["node"])  # a killed router's state is gone
