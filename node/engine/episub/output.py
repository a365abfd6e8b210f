"""The builder that collects what one input of the episub engine produces:
the messages for each peer (one EpisubRpc per peer), the deliveries, the
trace events and the tree extension's events (node/trace/tree.py). Its own builder, not api.OutputBuilder: that one's RPC parts
are gossipsub's."""

from __future__ import annotations

from node.engine.api import Output, TraceEvent, TraceType
from node.trace.tree import TreeEvent
from node.wire.episub import EpisubMessage, EpisubRpc
from node.wire.rpc import Message, PeerId


class EpisubOut:
    """Messages per peer (one RPC each, in the order peers were first
    addressed), deliveries and trace events."""

    def __init__(self, now: int) -> None:
        self.now = now
        self._messages: dict[PeerId, list[EpisubMessage]] = {}
        self.deliveries: list[Message] = []
        self.trace: list[TraceEvent] = []
        self.tree: list[TreeEvent] = []

    def send(self, peer: PeerId, message: EpisubMessage) -> None:
        self._messages.setdefault(peer, []).append(message)

    def deliver(self, msg: Message, received_from: PeerId) -> None:
        self.deliveries.append(msg)
        self.event(TraceType.DELIVER_MESSAGE, message_id=msg.id, topic=msg.topic, peer=received_from)

    def event(self, type_: TraceType, **fields: object) -> None:
        self.trace.append(TraceEvent(type_, self.now, **fields))  # type: ignore[arg-type]

    def extension(self, event: str, topic: str, peer: PeerId, **fields: object) -> None:
        """One event of the tree extension, at this input's time."""
        self.tree.append(TreeEvent(event, topic, peer, **fields))  # type: ignore[arg-type]

    def build(self) -> Output:
        return Output(
            tuple((peer, EpisubRpc(tuple(msgs))) for peer, msgs in self._messages.items()),  # type: ignore[misc]
            tuple(self.deliveries),
            tuple(self.trace),
            tree=tuple(self.tree),
        )
