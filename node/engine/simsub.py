"""The reference router of the simsub simulator (simsub/gossip.ss,
../shared/seeds/simsub-reference-router.md), transcribed so our simulations can
be compared with the figures that simulator publishes.

It differs from gossipsub v1.0 on purpose, as the actor does: one topic and no
subscription announcements (every connected peer is a candidate), GRAFT is
accepted unconditionally, the seen set is the message history itself
(history_length heartbeats), forwarding skips only the sender, and IHAVE goes to
N random known peers minus those in the mesh. Its first heartbeat fires after
1 + random() seconds, then every second.

Extensions the testbed needs and the actor lacks (docs/protocol-choices.md):
a peer can disconnect (removed from peers and mesh), and leave/join of the
topic (PRUNE the mesh on leave; while left, no delivery, IHAVE is ignored and
GRAFT is answered with PRUNE).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from node.engine.api import NS, Output, OutputBuilder, TraceType
from node.engine.authenticity import Authenticity
from node.wire.rpc import Message, MessageId, PeerId, Rpc

SIMSUB_ID = "/simsub/1.0.0"


@dataclass(frozen=True)
class SimSubParams:
    N: int = 6
    N_low: int = 4
    N_high: int = 12
    history_gossip: int = 3
    history_length: int = 120

    def check(self) -> None:
        if not 0 <= self.N_low <= self.N <= self.N_high:
            raise ValueError(
                f"need 0 <= N_low <= N <= N_high, got N_low={self.N_low}, N={self.N}, N_high={self.N_high}"
            )
        if not 1 <= self.history_gossip <= self.history_length:
            raise ValueError("need 1 <= history_gossip <= history_length")


class SimSubRouter:
    protocol_id = SIMSUB_ID
    supported_protocols = frozenset({SIMSUB_ID})

    def __init__(
        self, peer_id: PeerId, rng: random.Random, params: SimSubParams, auth: Authenticity = Authenticity(),
    ) -> None:
        params.check()
        self.peer_id = peer_id
        self.rng = rng
        self.auth = auth
        self.params = params
        self.heartbeat_interval = NS
        self.first_heartbeat = round((1 + rng.random()) * NS)
        self.topic: str | None = None
        self.messages: dict[MessageId, Message] = {}
        self.window: list[MessageId] = []
        self.history: list[list[MessageId]] = []
        self.peers: list[PeerId] = []
        self.D: list[PeerId] = []
        self._seqno = 0

    def add_peer(self, now: int, peer: PeerId, protocol: str, outbound: bool = False, address: str = "") -> Output:
        """`outbound` and `address` do not matter to the reference actor."""
        out = OutputBuilder(now)
        if peer not in self.peers and peer != self.peer_id:
            self.peers.insert(0, peer)
            out.event(TraceType.ADD_PEER, peer=peer, protocol=protocol)
        return out.build()

    def remove_peer(self, now: int, peer: PeerId) -> Output:
        out = OutputBuilder(now)
        if peer in self.peers:
            self.peers.remove(peer)
            if peer in self.D:
                self.D.remove(peer)
            out.event(TraceType.REMOVE_PEER, peer=peer)
        return out.build()

    def join(self, now: int, topic: str) -> Output:
        out = OutputBuilder(now)
        if self.topic is None:
            self.topic = topic
            out.event(TraceType.JOIN, topic=topic)
        return out.build()

    def leave(self, now: int, topic: str) -> Output:
        out = OutputBuilder(now)
        if self.topic == topic:
            for peer in self.D:
                out.prune(peer, topic)
                out.event(TraceType.PRUNE, peer=peer, topic=topic)
            self.D = []
            self.topic = None
            out.event(TraceType.LEAVE, topic=topic)
        return out.build()

    def publish(self, now: int, topic: str, data: bytes) -> Output:
        # go-libp2p-pubsub starts the counter at the current time in ns, so a
        # restarted router never reuses a message id; `now` plays that role.
        self._seqno = max(self._seqno + 1, now)
        return self.publish_message(now, self.auth.author(self.peer_id, self._seqno, topic, data))

    def publish_message(self, now: int, msg: Message) -> Output:
        """The reference delivers at the injecting nodes too; traced as go's
        publishMessage does (PUBLISH_MESSAGE, then DELIVER_MESSAGE from self)."""
        out = OutputBuilder(now)
        if msg.id not in self.messages:
            out.event(TraceType.PUBLISH_MESSAGE, message_id=msg.id, topic=msg.topic)
            out.deliver(msg, self.peer_id)
            self._store_and_forward(out, msg, source=None)
        return out.build()

    def handle_rpc(self, now: int, peer: PeerId, rpc: Rpc) -> Output:
        out = OutputBuilder(now)
        if peer not in self.peers:
            return out.build()
        out.event(TraceType.RECV_RPC, peer=peer, rpc=rpc)
        for msg in rpc.publish:
            self._on_publish(out, peer, msg)
        if rpc.control is not None:
            ids = [mid for ihave in rpc.control.ihave for mid in ihave.message_ids]
            if ids:
                self._on_ihave(out, peer, ids)
            for iwant in rpc.control.iwant:
                self._on_iwant(out, peer, iwant.message_ids)
            for graft in rpc.control.graft:
                self._on_graft(out, peer, graft.topic)
            if rpc.control.prune and peer in self.D:
                self.D.remove(peer)
                out.event(TraceType.PRUNE, peer=peer, topic=rpc.control.prune[0].topic)
        return out.build()

    def _on_publish(self, out: OutputBuilder, source: PeerId, msg: Message) -> None:
        if self.topic is None:
            return
        if msg.id in self.messages:
            out.event(TraceType.DUPLICATE_MESSAGE, message_id=msg.id, topic=msg.topic, peer=source)
            return
        out.deliver(msg, source)
        self._store_and_forward(out, msg, source)

    def _store_and_forward(self, out: OutputBuilder, msg: Message, source: PeerId | None) -> None:
        self.messages[msg.id] = msg
        self.window.insert(0, msg.id)
        for peer in self.D:
            if peer != source:
                out.forward(peer, msg)

    def _on_ihave(self, out: OutputBuilder, source: PeerId, ids: list[MessageId]) -> None:
        if self.topic is None:
            # left the topic (testbed extension): a non-member would drop what
            # it asked for, and ask again on every gossip round
            return
        iwant = tuple(mid for mid in ids if mid not in self.messages)
        if iwant:
            out.iwant(source, iwant)

    def _on_iwant(self, out: OutputBuilder, source: PeerId, ids: tuple[MessageId, ...]) -> None:
        for mid in ids:
            msg = self.messages.get(mid)
            if msg is not None:
                out.forward(source, msg)

    def _on_graft(self, out: OutputBuilder, source: PeerId, topic: str) -> None:
        if self.topic is None:
            out.prune(source, topic)
        elif source not in self.D:
            self.D.insert(0, source)
            out.event(TraceType.GRAFT, peer=source, topic=topic)

    def wake(self, now: int) -> Output:
        """Nothing to finish: this router validates at once and never asks
        to be woken (a validation delay is refused for it)."""
        return Output()

    def heartbeat(self, now: int) -> Output:
        out = OutputBuilder(now)
        if self.topic is not None:
            self._maintain_mesh(out, self.topic)
        self._roll_history()
        if self.topic is not None:
            self._gossip(out, self.topic)
        return out.build()

    def _maintain_mesh(self, out: OutputBuilder, topic: str) -> None:
        p = self.params
        d = len(self.D)
        if d < p.N_low:
            candidates = [peer for peer in self.peers if peer not in self.D]
            self.rng.shuffle(candidates)
            new_peers = candidates[: p.N - d]
            for peer in new_peers:
                out.graft(peer, topic)
                out.event(TraceType.GRAFT, peer=peer, topic=topic)
            self.D = self.D + new_peers
        if d > p.N_high:
            candidates = list(self.D)
            self.rng.shuffle(candidates)
            pruned = candidates[: d - p.N]
            for peer in pruned:
                out.prune(peer, topic)
                out.event(TraceType.PRUNE, peer=peer, topic=topic)
            self.D = [peer for peer in self.D if peer not in pruned]

    def _roll_history(self) -> None:
        self.history.insert(0, self.window)
        self.window = []
        if len(self.history) > self.params.history_length:
            for mid in self.history.pop():
                self.messages.pop(mid, None)

    def _gossip(self, out: OutputBuilder, topic: str) -> None:
        ids = tuple(mid for window in self.history[: self.params.history_gossip] for mid in window)
        if not ids:
            return
        peers = list(self.peers)
        self.rng.shuffle(peers)
        for peer in peers[: self.params.N]:
            if peer not in self.D:
                out.ihave(peer, topic, ids)
