"""The per-heartbeat peer-score side file (docs/gossipsub-v1.1.md, "Score
file"): a router that scores its peers (gossipsub v1.1 and v1.2) records, at
every heartbeat, each connected peer's score and its components, one CSV
row per peer, in scores/<node>.csv of the run directory. go's trace format
has no place for scores, so they sit beside the traces, not in them. A
router that shows only the total (rust-libp2p, through its adapter's "Peer
Scores" lines) leaves the components empty."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from node.libp2p.identity import peer_id_to_b58
from node.trace.sidefile import CsvSideFile
from node.wire.rpc import PeerId

COLUMNS = ("time_ns", "peer", "score", "p1", "p2", "p3", "p3b", "p4", "p5", "p6", "p7")

ScoreRows = Sequence[tuple[PeerId, Sequence[float]]]
TotalRows = Sequence[tuple[PeerId, float]]


class ScoreFile(CsvSideFile):
    """Appends rows to one node's score file (node/trace/sidefile.py;
    `flush_each` there)."""

    def __init__(self, path: Path, flush_each: bool = False) -> None:
        super().__init__(path, COLUMNS, flush_each)

    def write(self, time_ns: int, rows: ScoreRows) -> None:
        if rows:
            self.write_lines("".join(
                f"{time_ns},{peer_id_to_b58(peer)},{','.join(repr(v) for v in values)}\n" for peer, values in rows
            ))

    def write_totals(self, time_ns: int, rows: TotalRows) -> None:
        """Rows with the score alone, its components empty."""
        blanks = "," * (len(COLUMNS) - 3)
        if rows:
            self.write_lines("".join(f"{time_ns},{peer_id_to_b58(peer)},{score!r}{blanks}\n" for peer, score in rows))
