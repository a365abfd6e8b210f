"""The simulator's trace output: every node's events, encoded as
go-libp2p-pubsub's PBTracer writes them, appended to traces/<node>.pb, with
the encoding done beside the simulation rather than in its way; and the
per-heartbeat peer scores of routers that score, in scores/<node>.csv
(node/trace/scores.py), and episub's tree extension, in tree/<node>.csv
(node/trace/tree.py)."""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from pathlib import Path

from node.engine.api import TraceEvent
from node.trace.scores import ScoreFile, ScoreRows
from node.trace.file import EventEncoder
from node.trace.tree import TREE_DIR, TreeEvent, TreeFile
from node.wire.rpc import PeerId

TRACE_CHUNK_EVENTS = 250_000


class TraceSink:
    """Collects every node's trace events and appends them, encoded, to
    traces/<node>.pb. Encoding costs about as much as simulating, so each
    chunk of events is encoded by a forked child on the other core while the
    simulation goes on: copy-on-write, nothing is pickled. The parent keeps a
    chunk alive until its child has exited, so freeing it never copies shared
    pages; a new child starts only after the previous one finished, so every
    file is appended in order. Where fork is missing, chunks are encoded in
    place."""

    def __init__(self, trace_dir: Path, chunk_events: int = TRACE_CHUNK_EVENTS) -> None:
        self.dir = trace_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.chunk_events = chunk_events
        self._pending: dict[str, tuple[PeerId, list[TraceEvent]]] = {}
        self._count = 0
        self._child: int | None = None
        self._in_child: dict[str, tuple[PeerId, list[TraceEvent]]] = {}
        self._score_files: dict[str, ScoreFile] = {}
        self._tree_files: dict[str, TreeFile] = {}

    def write(self, node: str, peer_id: PeerId, events: Sequence[TraceEvent],
              scores: tuple[int, ScoreRows] = (0, ()), tree: Sequence[TreeEvent] = ()) -> None:
        """`scores`: the time and rows of a heartbeat's peer scores; `tree`:
        the tree extension's events, at that same time."""
        if tree:
            tree_file = self._tree_files.get(node)
            if tree_file is None:
                tree_file = self._tree_files[node] = TreeFile(self.dir.parent / TREE_DIR / f"{node}.csv")
            tree_file.write(scores[0], tree)
        if scores[1]:
            score_file = self._score_files.get(node)
            if score_file is None:
                score_file = self._score_files[node] = ScoreFile(self.dir.parent / "scores" / f"{node}.csv")
            score_file.write(*scores)
        entry = self._pending.get(node)
        if entry is None:
            entry = self._pending[node] = (peer_id, [])
        entry[1].extend(events)
        self._count += len(events)
        if self._count >= self.chunk_events:
            self._hand_off(background=hasattr(os, "fork"))

    def close(self) -> None:
        """Write out everything collected so far and wait for it."""
        self._hand_off(background=False)
        for side_file in (*self._score_files.values(), *self._tree_files.values()):
            side_file.close()

    def _hand_off(self, background: bool) -> None:
        self._wait()
        pending, self._pending, self._count = self._pending, {}, 0
        if not background:
            _append_encoded(self.dir, pending)
            return
        pid = os.fork()
        if pid == 0:  # the child only encodes and exits: no collector needed
            gc.disable()
            code = 1
            try:
                _append_encoded(self.dir, pending)
                code = 0
            finally:
                os._exit(code)
        self._child = pid
        self._in_child = pending

    def _wait(self) -> None:
        if self._child is None:
            return
        _, status = os.waitpid(self._child, 0)
        self._child = None
        self._in_child = {}
        if status != 0:
            raise RuntimeError(f"the trace writer process failed (wait status {status})")


def _append_encoded(trace_dir: Path, pending: dict[str, tuple[PeerId, list[TraceEvent]]]) -> None:
    framed = EventEncoder().framed
    for node, (peer_id, events) in pending.items():
        with open(trace_dir / f"{node}.pb", "ab") as f:
            f.write(b"".join([framed(ev, peer_id) for ev in events]))
