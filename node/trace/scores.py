"""The per-heartbeat peer-score side file (docs/gossipsub-v1.1.md, "Score
file"): a router that scores its peers (gossipsub v1.1 and v1.2) records, at
every heartbeat, each connected peer's score and its components, one CSV
row per peer, in scores/<node>.csv of the run directory. go's trace format
has no place for scores, so they sit beside the traces, not in them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from node.libp2p.identity import peer_id_to_b58
from node.wire.rpc import PeerId

COLUMNS = ("time_ns", "peer", "score", "p1", "p2", "p3", "p3b", "p4", "p5", "p6", "p7")

ScoreRows = Sequence[tuple[PeerId, Sequence[float]]]


class ScoreFile:
    """Appends rows to one node's score file, header first; opened on the
    first row, so nodes that do not score leave no file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO | None = None

    def write(self, time_ns: int, rows: ScoreRows) -> None:
        if not rows:
            return
        if self._file is None:
            self._open()
        self._file.write("".join(
            f"{time_ns},{peer_id_to_b58(peer)},{','.join(repr(v) for v in values)}\n" for peer, values in rows
        ))

    def _open(self) -> None:
        """A restarted node appends to its killed incarnation's file: the
        header goes first into an empty file (the kill may have lost the
        buffered one), and a row the kill cut short is ended, so it reads
        as a short row, not glued to the next."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+", encoding="ascii")
        size = self._file.tell()
        if size == 0:
            self._file.write(",".join(COLUMNS) + "\n")
            self._file.flush()
            return
        self._file.seek(size - 1)
        if self._file.read(1) != "\n":
            self._file.write("\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
