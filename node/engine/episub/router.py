"""The episub router: the Router interface over one `Membership` and one
`Broadcast` per subscribed topic, the node-wide parts (contacts, seen cache,
RTT table, GETTOPICS/TOPICS) and the timers.

Connections are the runtime's business, as for every engine: `add_peer` says
a connection is open (the peer is a contact: the draft's "initial contact
nodes"), `remove_peer` that it closed or could not be opened (the draft's
TCP failure detection). Sending to a peer we have no connection to asks the
runtime to open one. One heartbeat (`heartbeat_interval`, the draft's IHAVE
timer) drives every timer: the lazy queue is flushed on each, the
missing-message timer, stabilization, optimization, shuffle and passive
checks run when their (randomized) time has come.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from node.engine.api import NS, Output, TraceType
from node.engine.authenticity import REJECT_SELF_ORIGIN, REJECT_VALIDATION_FAILED, Authenticity
from node.engine.caches import SeenCache
from node.engine.episub.broadcast import Broadcast
from node.engine.episub.output import EpisubOut
from node.engine.episub.params import EpisubParams
from node.engine.episub.proximity import RttTable
from node.engine.episub.views import Membership
from node.engine.pubsub import Validator
from node.wire.episub import (
    EPISUB_ID,
    Disconnect,
    EpisubRpc,
    ForwardJoin,
    GetNodes,
    GetTopics,
    Gossip,
    Graft,
    IHave,
    Join,
    Leave,
    Neighbor,
    Nodes,
    Prune,
    Shuffle,
    ShuffleReply,
    Topics,
)
from node.trace import tree
from node.wire.rpc import Message, PeerId


@dataclass
class Overlay:
    """One topic's overlay and the times its periodic tasks are next due."""

    membership: Membership
    broadcast: Broadcast
    next_missing: int
    next_stabilization: int
    next_shuffle: int
    next_passive_check: int


class EpisubRouter:
    protocol_id = EPISUB_ID
    supported_protocols = frozenset({EPISUB_ID})
    dials_on_send = True  # an RPC to a peer without a connection opens one

    def __init__(
        self, peer_id: PeerId, rng: random.Random, params: EpisubParams,
        validator: Validator | None = None, auth: Authenticity = Authenticity(),
    ) -> None:
        params.check()
        self.peer_id = peer_id
        self.rng = rng
        self.params = params
        self.validator = validator
        self.auth = auth
        self.heartbeat_interval = round(params.heartbeat_interval * NS)
        self.first_heartbeat = round(params.heartbeat_initial_delay * NS)
        self.contacts: dict[PeerId, None] = {}
        self.overlays: dict[str, Overlay] = {}
        self.seen = SeenCache(round(params.seen_ttl * NS))
        self.rtt = RttTable(params.rtt_smoothing, round(params.passive_check_interval * NS))
        self._seqno = 0

    @property
    def subscriptions(self) -> set[str]:
        return set(self.overlays)

    def _jittered(self, now: int, mean_s: float) -> int:
        """A randomized timer: uniform in [0.5, 1.5] times the mean."""
        return now + round(mean_s * (0.5 + self.rng.random()) * NS)

    def _ping(self, out: EpisubOut, peer: PeerId) -> None:
        """GETTOPICS: the draft's membership check and RTT ping (timed on
        an open connection)."""
        if self.rtt.ping_sent(out.now, peer, timed=peer in self.contacts):
            out.send(peer, GetTopics())

    # Connections

    def add_peer(self, now: int, peer: PeerId, protocol: str, outbound: bool = False, address: str = "") -> Output:
        """A connection is up; which side dialled (`outbound`) and the peer's
        `address` do not matter to episub."""
        out = EpisubOut(now)
        if peer in self.contacts or peer == self.peer_id:
            return out.build()
        self.contacts[peer] = None
        out.event(TraceType.ADD_PEER, peer=peer, protocol=protocol)
        for overlay in self.overlays.values():
            overlay.membership.contact(out, peer)
        return out.build()

    def remove_peer(self, now: int, peer: PeerId) -> Output:
        out = EpisubOut(now)
        self.rtt.forget(peer)
        for overlay in self.overlays.values():
            overlay.membership.peer_failed(out, peer)
        if self.contacts.pop(peer, 0) is None:
            out.event(TraceType.REMOVE_PEER, peer=peer)
        return out.build()

    # Subscriptions

    def join(self, now: int, topic: str) -> Output:
        out = EpisubOut(now)
        if topic in self.overlays:
            return out.build()
        broadcast = Broadcast(topic, self.peer_id, self.params, self.seen.has)
        membership = Membership(
            topic, self.peer_id, self.params, self.rng, self.rtt, self.contacts, self._ping,
            broadcast.neighbor_up, broadcast.neighbor_down,
        )
        p = self.params
        self.overlays[topic] = Overlay(
            membership, broadcast, now + round(p.missing_interval * NS),
            self._jittered(now, p.stabilization_interval), self._jittered(now, p.shuffle_interval),
            self._jittered(now, p.passive_check_interval),
        )
        out.event(TraceType.JOIN, topic=topic)
        membership.join(out)
        return out.build()

    def leave(self, now: int, topic: str) -> Output:
        out = EpisubOut(now)
        overlay = self.overlays.pop(topic, None)
        if overlay is None:
            return out.build()
        overlay.membership.leave(out)
        out.event(TraceType.LEAVE, topic=topic)
        return out.build()

    # Publishing and receiving

    def publish(self, now: int, topic: str, data: bytes) -> Output:
        # go-libp2p-pubsub starts the counter at the current time in ns, so a
        # restarted router never reuses a message id; `now` plays that role.
        self._seqno = max(self._seqno + 1, now)
        return self.publish_message(now, self.auth.author(self.peer_id, self._seqno, topic, data))

    def publish_message(self, now: int, msg: Message) -> Output:
        """As go's publishMessage: PUBLISH_MESSAGE, then DELIVER_MESSAGE
        (received from ourselves), then the broadcast. A topic we are not
        in has no tree to publish on: the message is delivered only here."""
        out = EpisubOut(now)
        if self.seen.has(now, msg.id):
            return out.build()
        self.seen.add(now, msg.id)
        out.event(TraceType.PUBLISH_MESSAGE, message_id=msg.id, topic=msg.topic)
        out.deliver(msg, self.peer_id)
        overlay = self.overlays.get(msg.topic)
        if overlay is not None:
            out.extension(tree.DELIVER, msg.topic, self.peer_id, message_id=msg.id, hops=0)
            overlay.broadcast.publish(out, msg)
        return out.build()

    def _on_gossip(self, out: EpisubOut, sender: PeerId, g: Gossip) -> None:
        """go-libp2p-pubsub's pushMsg order: self-origin, signing policy,
        seen (a duplicate PRUNEs the edge), signature, validation; then
        deliver and forward."""
        msg = g.msg
        overlay = self.overlays.get(msg.topic)
        if overlay is None:
            return
        reason = REJECT_SELF_ORIGIN if msg.from_peer == self.peer_id else self.auth.reject_before_seen(msg)
        if reason is None and self.seen.has(out.now, msg.id):
            out.event(TraceType.DUPLICATE_MESSAGE, message_id=msg.id, topic=msg.topic, peer=sender)
            overlay.broadcast.on_duplicate(out, sender, g)
            return
        if reason is None:
            reason = self.auth.reject_signature(msg)
        if reason is None and self.validator is not None and not self.validator(msg):
            reason = REJECT_VALIDATION_FAILED
        if reason is not None:
            out.event(TraceType.REJECT_MESSAGE, message_id=msg.id, topic=msg.topic, peer=sender, reason=reason)
            return
        self.seen.add(out.now, msg.id)
        out.deliver(msg, sender)
        out.extension(tree.DELIVER, msg.topic, sender, message_id=msg.id, hops=g.hops)
        overlay.broadcast.on_gossip(out, sender, g)

    def handle_rpc(self, now: int, peer: PeerId, rpc: EpisubRpc) -> Output:  # type: ignore[override]
        out = EpisubOut(now)
        out.event(TraceType.RECV_RPC, peer=peer, rpc=rpc)
        for m in rpc.messages:
            self._dispatch(out, peer, m)
        return out.build()

    def _dispatch(self, out: EpisubOut, peer: PeerId, m: object) -> None:
        if isinstance(m, Gossip):
            self._on_gossip(out, peer, m)
        elif isinstance(m, GetTopics):
            out.send(peer, Topics(tuple(sorted(self.overlays))))
        elif isinstance(m, Topics):
            self.rtt.reply(out.now, peer)
            for overlay in self.overlays.values():
                overlay.membership.on_topics(out, peer, m.topics)
        elif isinstance(m, GetNodes):
            overlay = self.overlays.get(m.topic)
            reply = overlay.membership.nodes() if overlay else Nodes(m.topic, (), 0)
            out.send(peer, reply)
        else:
            self._topic_message(out, peer, m)

    def _topic_message(self, out: EpisubOut, peer: PeerId, m: object) -> None:
        """Messages of one topic's overlay. A node not in the topic refuses
        links with DISCONNECT and drops the rest."""
        overlay = self.overlays.get(m.topic)  # type: ignore[attr-defined]
        if overlay is None:
            if isinstance(m, (Join, Neighbor)):
                out.send(peer, Disconnect(m.topic))
            return
        views, tree = overlay.membership, overlay.broadcast
        if isinstance(m, Nodes):
            self.rtt.reply(out.now, peer)
            views.on_nodes(out, peer, m)
        elif isinstance(m, Join):
            views.on_join(out, peer, m)
        elif isinstance(m, ForwardJoin):
            views.on_forward_join(out, peer, m)
        elif isinstance(m, Neighbor):
            views.on_neighbor(out, peer, m)
        elif isinstance(m, Disconnect):
            views.on_disconnect(out, peer)
        elif isinstance(m, Leave):
            views.on_leave(out, peer, m)
        elif isinstance(m, Shuffle):
            views.on_shuffle(out, peer, m)
        elif isinstance(m, ShuffleReply):
            views.on_shuffle_reply(out, peer, m)
        elif isinstance(m, IHave):
            tree.on_ihave(out, peer, m)
        elif isinstance(m, Graft):
            tree.on_graft(out, peer, m)
        elif isinstance(m, Prune):
            tree.on_prune(out, peer)

    # Timers

    def wake(self, now: int) -> Output:
        """Nothing to finish: this router validates at once and never asks
        to be woken (a validation delay is refused for it)."""
        return Output()

    def heartbeat(self, now: int) -> Output:
        out = EpisubOut(now)
        p = self.params
        for overlay in self.overlays.values():
            overlay.broadcast.flush_lazy_queue(out)
            if now >= overlay.next_missing:
                overlay.broadcast.missing_timer(out)
                overlay.next_missing = now + round(p.missing_interval * NS)
            if now >= overlay.next_stabilization:
                overlay.membership.stabilize(out)
                overlay.membership.optimize(out)
                overlay.next_stabilization = self._jittered(now, p.stabilization_interval)
            if now >= overlay.next_shuffle:
                overlay.membership.shuffle(out)
                overlay.next_shuffle = self._jittered(now, p.shuffle_interval)
            if now >= overlay.next_passive_check:
                overlay.membership.check_passive(out)
                overlay.next_passive_check = self._jittered(now, p.passive_check_interval)
        return out.build()
