"""Episub's trace extension (docs/episub.md, "Trace extension"): what the
analysis needs about the tree and the views that go's trace format cannot
carry. go's TraceEvent types are fixed, so, like peer scores, these events
sit beside the trace, in tree/<node>.csv of the run directory, one row per
event. The engine emits them as `Output.tree`; the simulator and the router
daemon write them with `TreeFile`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from node.libp2p.identity import peer_id_to_b58
from node.trace.sidefile import CsvSideFile
from node.wire.frozen import frozen
from node.wire.rpc import MessageId, PeerId

TREE_DIR = "tree"  # the run directory's folder of tree files
COLUMNS = ("time_ns", "event", "topic", "peer", "message_id", "hops", "link")

# event: what happened (each row's other fields, where they apply)
DELIVER = "deliver"  # a message's first delivery here: peer it came from (ourselves: published), hops it came with
MISSING = "missing"  # a message first known by IHAVE, marked missing: peer announcing it, hops announced
GRAFT = "graft"  # a GRAFT asking peer for a missing message (one row per message asked for)
NEIGHBOR_UP = "neighbor_up"  # peer entered the active view; link: random or near
NEIGHBOR_DOWN = "neighbor_down"  # peer left the active view; link: random or near
EVENTS = (DELIVER, MISSING, GRAFT, NEIGHBOR_UP, NEIGHBOR_DOWN)
RANDOM, NEAR = "random", "near"


@frozen
class TreeEvent:
    """One row of the extension, its time given by the Output it came in.
    `hops` is None where the event has none."""

    event: str
    topic: str
    peer: PeerId
    message_id: MessageId = b""
    hops: int | None = None
    link: str = ""


class TreeFile(CsvSideFile):
    """Appends one node's tree events (node/trace/sidefile.py; `flush_each`
    there)."""

    def __init__(self, path: Path, flush_each: bool = False) -> None:
        super().__init__(path, COLUMNS, flush_each)

    def write(self, time_ns: int, events: Sequence[TreeEvent]) -> None:
        if events:
            self.write_lines("".join(
                f"{time_ns},{e.event},{_csv(e.topic)},{peer_id_to_b58(e.peer)},{e.message_id.hex()},"
                f"{'' if e.hops is None else e.hops},{e.link}\n"
                for e in events
            ))


def _csv(field: str) -> str:
    """A field quoted as CSV quotes it, where it has to be (a topic is any string)."""
    if any(c in field for c in ',"\n\r'):
        return '"' + field.replace('"', '""') + '"'
    return field
