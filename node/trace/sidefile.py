"""A CSV file beside a node's trace, for what go's trace format has no place
for (peer scores, node/trace/scores.py; episub's tree extension,
node/trace/tree.py): opened on the first row, so a node with nothing to
write leaves no file, and appended to by a restarted node."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO


class CsvSideFile:
    """Appends lines to one node's CSV file, the header first. `flush_each`:
    every write goes to the kernel before `write_lines` returns, so a
    SIGKILL loses none of it (a router daemon's, as its trace writer does);
    else lines wait in a buffer until close (the simulator's)."""

    def __init__(self, path: Path, columns: Sequence[str], flush_each: bool = False) -> None:
        self.path = path
        self.columns = tuple(columns)
        self.flush_each = flush_each
        self._file: TextIO | None = None

    def write_lines(self, text: str) -> None:
        """`text`: whole lines, each ended by a newline."""
        if self._file is None:
            self._open()
        assert self._file is not None
        self._file.write(text)
        if self.flush_each:
            self._file.flush()

    def _open(self) -> None:
        """A restarted node appends to its killed incarnation's file: the
        header goes first into an empty file (the kill may have lost the
        buffered one), and a row the kill cut short is ended, so it reads
        as a short row, not glued to the next."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+", encoding="ascii")
        size = self._file.tell()
        if size == 0:
            self._file.write(",".join(self.columns) + "\n")
            self._file.flush()
            return
        self._file.seek(size - 1)
        if self._file.read(1) != "\n":
            self._file.write("\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
