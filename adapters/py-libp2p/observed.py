"""py-libp2p 0.8.1's Pubsub and GossipSub, watched: every event the adapter
reports on stdout is taken where py-libp2p itself makes the decision, by
overriding the method that makes it and calling the original.

- Received Message, every copy: Pubsub.push_msg is where each message an
  RPC carries arrives (IWANT answers too). A copy whose id is already in the
  seen cache is a duplicate (go checks the same cache before validating); a
  first copy is reported from notify_subscriptions, which push_msg calls
  once it has validated and marked the message seen, before forwarding it.
  Nothing between push_msg's seen check and that call yields to trio (no
  async validators are registered), so `_forwarder` names the copy's sender.
- Published Message: the same notify_subscriptions call when the forwarder
  is this node.
- Graft / Prune: diffs of the router's mesh, taken after every input that can
  change it (an RPC, a heartbeat, join, leave, a peer's subscription) and
  before every control message it sends; a peer that disconnects leaves the
  mesh without a Prune (go's RemovePeer does not trace one either).
- Peer Added / Removed: the router's add_peer / remove_peer.
- RPC Received: py-libp2p hands every decoded RPC's size to the stream's
  metric channel; ours is a recorder. RPC Sent: Pubsub.write_msg. The hello
  RPC (our subscriptions, written once when a stream opens) is not seen.
- Garbage from a peer (an undecodable RPC) raises out of py-libp2p's stream
  handler; here it drops that peer instead.

py-libp2p's message cache keys messages by from+seqno whatever the message-id
function is, so IHAVE would advertise ids nobody else uses and IWANT for our
ids would miss; IdMessageCache keys them by the network's id.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.mcache import CacheEntry, MessageCache
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

from contract import Lines, logged_id, message_id

log = logging.getLogger("pylibp2p-adapter")


def msg_id_of(msg: rpc_pb2.Message) -> bytes:
    return message_id(msg.data)


class Names:
    """Peer ids as the testbed's names where it gave them (status speaks
    names); stdout always carries base58 peer ids."""

    def __init__(self, names: dict[str, str]) -> None:
        self.by_b58 = dict(names)
        self.by_name = {name: b58 for b58, name in names.items()}

    def name(self, peer: ID) -> str:
        b58 = peer.to_base58()
        return self.by_b58.get(b58, b58)

    def peer(self, name_or_b58: str) -> ID:
        return ID.from_base58(self.by_name.get(name_or_b58, name_or_b58))


class IdMessageCache(MessageCache):
    def put(self, msg: rpc_pb2.Message) -> None:
        mid = msg_id_of(msg)
        if mid in self.msgs:
            return
        self.msgs[mid] = msg
        self.history[0].append(CacheEntry(mid, msg.topicIDs))


class ObservedGossipSub(GossipSub):
    def __init__(self, lines: Lines, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lines = lines
        self.mcache = IdMessageCache(kwargs["gossip_window"], kwargs["gossip_history"])
        self._seen_mesh: dict[str, set[ID]] = {}

    def watch_mesh(self, gone: ID | None = None) -> None:
        for topic in self.mesh.keys() | self._seen_mesh.keys():
            now = set(self.mesh.get(topic, ()))
            before = self._seen_mesh.get(topic, set())
            for peer in sorted(now - before, key=str):
                self.lines.emit("Graft", peer=peer.to_base58(), topic=topic)
            for peer in sorted(before - now, key=str):
                if peer != gone:
                    self.lines.emit("Prune", peer=peer.to_base58(), topic=topic)
        self._seen_mesh = {t: set(p) for t, p in self.mesh.items()}

    def add_peer(self, peer_id: ID, protocol_id: Any) -> None:
        super().add_peer(peer_id, protocol_id)
        self.lines.emit("Peer Added", peer=peer_id.to_base58(), protocol=str(protocol_id))

    def remove_peer(self, peer_id: ID) -> None:
        super().remove_peer(peer_id)
        self.watch_mesh(gone=peer_id)
        self.lines.emit("Peer Removed", peer=peer_id.to_base58())

    async def handle_rpc(self, rpc: rpc_pb2.RPC, sender_peer_id: ID) -> None:
        await super().handle_rpc(rpc, sender_peer_id)
        self.watch_mesh()

    async def join(self, topic: str) -> None:
        await super().join(topic)
        self.watch_mesh()

    async def leave(self, topic: str) -> None:
        await super().leave(topic)
        self.watch_mesh()

    async def on_peer_subscribed(self, peer_id: ID, topic: str) -> None:
        await super().on_peer_subscribed(peer_id, topic)
        self.watch_mesh()

    def mesh_heartbeat(self) -> Any:
        out = super().mesh_heartbeat()
        self.watch_mesh()
        return out

    async def emit_control_message(self, control_msg: rpc_pb2.ControlMessage, to_peer: ID) -> None:
        self.watch_mesh()
        await super().emit_control_message(control_msg, to_peer)


class RpcRecorder:
    """Stands in for a stream's metric channel: py-libp2p sends it one event
    per RPC it decoded, with the RPC's size."""

    def __init__(self, pubsub: ObservedPubsub, peer: ID) -> None:
        self.pubsub = pubsub
        self.peer = peer

    async def send(self, event: Any) -> None:
        self.pubsub.rpc_seen("RPC Received", self.peer, int(event.message_size or 0))


class ObservedPubsub(Pubsub):
    def __init__(self, lines: Lines, host: Any, router: ObservedGossipSub, **kwargs: Any) -> None:
        super().__init__(host, router, msg_id_constructor=msg_id_of, **kwargs)
        self.lines = lines
        self.counters: Counter[str] = Counter()
        self._forwarder: ID | None = None
        self.on_bad_peer: Callable[[ID], None] = lambda peer: None

    def rpc_seen(self, msg: str, peer: ID, size: int) -> None:
        direction = "in" if msg == "RPC Received" else "out"
        self.counters[f"rpcs_{direction}"] += 1
        self.counters[f"bytes_{direction}"] += size
        self.lines.emit(msg, peer=peer.to_base58(), size=size)

    def _received(self, msg: rpc_pb2.Message, forwarder: ID) -> None:
        self.lines.emit("Received Message", id=logged_id(msg_id_of(msg)), **{"from": forwarder.to_base58()},
                        topic=msg.topicIDs[0] if msg.topicIDs else "")

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        if (msg_forwarder != self.my_id and self._is_msg_seen(msg)
                and not self.is_peer_blacklisted(msg_forwarder)):
            self.counters["duplicates"] += 1
            self._received(msg, msg_forwarder)
        self._forwarder = msg_forwarder
        await super().push_msg(msg_forwarder, msg)

    def notify_subscriptions(self, publish_message: rpc_pb2.Message) -> None:
        forwarder, self._forwarder = self._forwarder, None
        if forwarder == self.my_id:
            self.counters["published"] += 1
            self.lines.emit("Published Message", id=logged_id(msg_id_of(publish_message)),
                            topic=publish_message.topicIDs[0] if publish_message.topicIDs else "")
        elif forwarder is not None:
            self.counters["delivered"] += 1
            self._received(publish_message, forwarder)
        super().notify_subscriptions(publish_message)

    async def write_msg(self, stream: Any, rpc_msg: rpc_pb2.RPC) -> bool:
        ok = await super().write_msg(stream, rpc_msg)
        if ok:
            self.rpc_seen("RPC Sent", stream.muxed_conn.peer_id, rpc_msg.ByteSize())
        return ok

    async def stream_handler(self, stream: Any) -> None:
        peer = stream.muxed_conn.peer_id
        if self.is_peer_blacklisted(peer):
            await stream.reset()
            return
        stream.metric_send_channel = RpcRecorder(self, peer)
        try:
            await super().stream_handler(stream)
        except Exception as exc:  # noqa: BLE001 - whatever a peer's bytes make py-libp2p raise
            print(f"pylibp2p-adapter: dropping {peer.to_base58()}: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
            self.counters["peers_dropped"] += 1
            try:
                await stream.reset()
            except Exception:  # noqa: BLE001 - already broken
                pass
            self._handle_dead_peer(peer)
            self.on_bad_peer(peer)
