"""The trace vocabulary, defined once for everyone who writes or reads
traces: the engines and the runtime (node/), the simulator (orchestrator/)
and the analysis (analysis/). The numbers are go-libp2p-pubsub's
TraceEvent.Type (trace.proto), so our traces and go's mean the same.

`TraceType` is the enum; the plain-int names below are the same numbers for
hot loops and Spark column expressions, where an int compares fastest.
`RunEvent` names the kinds of the run log (events.jsonl) that goes beside
the traces."""

from __future__ import annotations

from enum import IntEnum, StrEnum


class TraceType(IntEnum):
    """go-libp2p-pubsub's TraceEvent.Type numbers."""

    PUBLISH_MESSAGE = 0
    REJECT_MESSAGE = 1
    DUPLICATE_MESSAGE = 2
    DELIVER_MESSAGE = 3
    ADD_PEER = 4
    REMOVE_PEER = 5
    RECV_RPC = 6
    SEND_RPC = 7
    DROP_RPC = 8
    JOIN = 9
    LEAVE = 10
    GRAFT = 11
    PRUNE = 12


PUBLISH: int = TraceType.PUBLISH_MESSAGE.value
REJECT: int = TraceType.REJECT_MESSAGE.value
DUPLICATE: int = TraceType.DUPLICATE_MESSAGE.value
DELIVER: int = TraceType.DELIVER_MESSAGE.value
ADD_PEER: int = TraceType.ADD_PEER.value
REMOVE_PEER: int = TraceType.REMOVE_PEER.value
RECV_RPC: int = TraceType.RECV_RPC.value
SEND_RPC: int = TraceType.SEND_RPC.value
DROP_RPC: int = TraceType.DROP_RPC.value
JOIN: int = TraceType.JOIN.value
LEAVE: int = TraceType.LEAVE.value
GRAFT: int = TraceType.GRAFT.value
PRUNE: int = TraceType.PRUNE.value
KNOWN_TYPES: frozenset[int] = frozenset(t.value for t in TraceType)


class RunEvent(StrEnum):
    """The kinds of the run log, events.jsonl (docs/architecture.md): what
    the orchestrator and the simulator write and the analysis reads beside
    the traces."""

    RUN_START = "run_start"
    RUN_END = "run_end"
    ALL_UP = "all_up"
    PUBLISH = "publish"
    CHURN = "churn"
    NODE_DOWN = "node_down"
    NODE_UP = "node_up"
    WARNING = "warning"
    QUIET = "quiet"
    EDGES_OPEN = "edges_open"  # overlay edges dialled after the start (a group's connect_at)
