"""Episub's trace extension file (node/trace/tree.py, docs/episub.md "Trace
extension") as the analysis reads it back (analysis/tree.py): every field
of every event kind, a topic that needs CSV quoting, and a restarted node
appending to the file its killed incarnation cut short, and a daemon's
file on disk row by row."""

from __future__ import annotations

from analysis.tree import read_tree
from node.libp2p.identity import identity_for_index, peer_id_to_b58
from node.trace import tree
from node.trace.tree import TreeEvent, TreeFile

PEER = identity_for_index(3).peer_id


def test_every_event_reads_back_with_its_fields(tmp_path):
    f = TreeFile(tmp_path / tree.TREE_DIR / "n1.csv")
    f.write(5, [TreeEvent(tree.DELIVER, 'a,"b"', PEER, b"\x01\xff", 2),
                TreeEvent(tree.MISSING, "t", PEER, b"\x02", 4),
                TreeEvent(tree.GRAFT, "t", PEER, b"\x02"),
                TreeEvent(tree.NEIGHBOR_UP, "t", PEER, link=tree.NEAR)])
    f.write(9, [TreeEvent(tree.NEIGHBOR_DOWN, "t", PEER, link=tree.RANDOM)])
    f.close()
    rows = read_tree(tmp_path)
    assert rows[["time_ns", "event", "topic", "message_id", "link", "node"]].values.tolist() == [
        [5, "deliver", 'a,"b"', "01ff", "", "n1"], [5, "missing", "t", "02", "", "n1"],
        [5, "graft", "t", "02", "", "n1"], [5, "neighbor_up", "t", "", "near", "n1"],
        [9, "neighbor_down", "t", "", "random", "n1"]]
    assert rows["hops"].fillna(-1).tolist() == [2, 4, -1, -1, -1]
    assert set(rows["peer"]) == {peer_id_to_b58(PEER)}


def test_a_restarted_node_appends_after_the_row_its_kill_cut_short(tmp_path):
    path = tmp_path / tree.TREE_DIR / "n1.csv"
    f = TreeFile(path)
    f.write(1, [TreeEvent(tree.NEIGHBOR_UP, "t", PEER, link=tree.RANDOM)])
    f.close()
    with path.open("a") as cut:
        cut.write("2,neighbor_d")
    again = TreeFile(path)
    again.write(3, [TreeEvent(tree.DELIVER, "t", PEER, b"\x07", 0)])
    again.close()
    rows = read_tree(tmp_path)
    assert rows[["time_ns", "event"]].values.tolist() == [[1, "neighbor_up"], [3, "deliver"]]
    assert path.read_text().count("time_ns,") == 1


def test_a_daemons_file_has_every_row_on_disk_before_it_is_closed(tmp_path):
    """What a SIGKILL would leave: the daemon's file (flush_each) holds every
    row written; the simulator's (buffered until close) need not."""
    daemon, sim = TreeFile(tmp_path / "d" / "n1.csv", flush_each=True), TreeFile(tmp_path / "s" / "n1.csv")
    for f in (daemon, sim):
        f.write(1, [TreeEvent(tree.NEIGHBOR_UP, "t", PEER, link=tree.RANDOM)])
    assert (tmp_path / "d" / "n1.csv").read_text().splitlines()[1].startswith("1,neighbor_up,t,")
    assert len((tmp_path / "s" / "n1.csv").read_text().splitlines()) == 1  # the header, flushed on open
    daemon.close()
    sim.close()
