"""A sybil: a gossipsub engine whose inputs pass through unchanged and
whose outputs its behaviours edit. Wrapping rather than subclassing lets
the same behaviours ride on v1.0, v1.1 or v1.2, and keeps every honest
rule in the engine it belongs to.

What the sybil does shows in go's trace vocabulary: a message it withholds
from a peer is a DROP_RPC to that peer carrying the withheld messages (go
records DROP_RPC for an RPC it had for a peer and did not send), and its
floods and forced GRAFTs are ordinary SEND_RPC and GRAFT events. Control a
behaviour leaves out never happened: a PRUNE the sybil does not send leaves
the peer in its mesh and no PRUNE in its trace."""

from __future__ import annotations

import dataclasses
import hashlib
import random

from node.engine.adversary.behaviour import Behaviour
from node.engine.api import Output, OutputBuilder, TraceEvent, TraceType
from node.engine.gossipsub import GossipSubRouter
from node.wire.rpc import Control, Message, MessageId, PeerId, Rpc


class Sybil:
    """`engine`: the honest engine underneath (it keeps the mesh, the
    mcache and, for v1.1+, scores); `rng`: the sybil's own seeded draws."""

    def __init__(self, engine: GossipSubRouter, behaviours: tuple[Behaviour, ...], rng: random.Random) -> None:
        self.engine = engine
        self.behaviours = behaviours
        self.rng = rng
        self._salt = rng.randbytes(8)
        self.pruned_at: dict[tuple[str, PeerId], int] = {}  # (topic, peer): when that peer last pruned us
        self.last_heartbeat = 0  # when the previous heartbeat ran (ns)
        self.peer_id = engine.peer_id
        self.protocol_id = engine.protocol_id
        self.supported_protocols = engine.supported_protocols
        self.heartbeat_interval = engine.heartbeat_interval
        self.first_heartbeat = engine.first_heartbeat

    # What behaviours may ask and do

    def topics(self) -> set[str]:
        return set(self.engine.mesh)

    def topic_peers(self, topic: str) -> set[PeerId]:
        return self.engine.gossipsub_peers(topic)

    def recent_ids(self, topic: str) -> tuple[MessageId, ...]:
        return tuple(self.engine.mcache.get_gossip_ids(topic))

    def force_graft(self, out: OutputBuilder, peer: PeerId, topic: str) -> None:
        """Put `peer` in our mesh and send it GRAFT, whatever backoff or
        score says, if it is connected, shares the topic and is not there."""
        mesh = self.engine.mesh.get(topic)
        if mesh is None or peer in mesh or peer not in self.topic_peers(topic):
            return
        self.engine._graft(out, peer, topic, notify=True)

    # The Router inputs

    def pruned_since(self, since: int) -> list[tuple[str, PeerId]]:
        """(topic, peer) of the PRUNEs received at or after `since`."""
        return sorted(key for key, at in self.pruned_at.items() if at >= since)

    def add_peer(self, now: int, peer: PeerId, protocol: str, outbound: bool = False, address: str = "") -> Output:
        return self._edit(now, self.engine.add_peer(now, peer, protocol, outbound, address))

    def remove_peer(self, now: int, peer: PeerId) -> Output:
        self.pruned_at = {key: at for key, at in self.pruned_at.items() if key[1] != peer}
        return self._edit(now, self.engine.remove_peer(now, peer))

    def handle_rpc(self, now: int, peer: PeerId, rpc: Rpc) -> Output:
        if rpc.control is not None:
            self.pruned_at.update(((prune.topic, peer), now) for prune in rpc.control.prune)
        return self._edit(now, self.engine.handle_rpc(now, peer, rpc))

    def join(self, now: int, topic: str) -> Output:
        return self._edit(now, self.engine.join(now, topic))

    def leave(self, now: int, topic: str) -> Output:
        return self._edit(now, self.engine.leave(now, topic))

    def publish(self, now: int, topic: str, data: bytes) -> Output:
        return self._edit(now, self.engine.publish(now, topic, data))

    def publish_message(self, now: int, msg: Message) -> Output:
        return self._edit(now, self.engine.publish_message(now, msg))

    def wake(self, now: int) -> Output:
        return self._edit(now, self.engine.wake(now))

    def heartbeat(self, now: int) -> Output:
        honest = self._edit(now, self.engine.heartbeat(now))
        out = OutputBuilder(now)
        for behaviour in self.behaviours:
            behaviour.attack(now, self, out)
        self.last_heartbeat = now
        return _merge(honest, out.build())

    # Withholding

    def _draw(self, msg: Message) -> float:
        """Uniform in [0, 1), one per message id at this sybil."""
        digest = hashlib.blake2b(self._salt + msg.id, digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def _withheld(self, now: int, msg: Message) -> bool:
        if msg.from_peer == self.peer_id and msg.from_peer:
            return False
        draw = self._draw(msg)
        return any(b.withholds(now, msg, draw) for b in self.behaviours)

    def _edit(self, now: int, out: Output) -> Output:
        """The engine's output less the messages the behaviours withhold,
        each withheld send traced as DROP_RPC, and with the control the
        behaviours let out."""
        if not any(rpc.publish or rpc.control is not None for _, rpc in out.sends):
            return out
        sends: list[tuple[PeerId, Rpc]] = []
        dropped: list[TraceEvent] = []
        held: set[tuple[PeerId, str]] = set()
        for peer, rpc in out.sends:
            withholds = [self._withheld(now, m) for m in rpc.publish]
            if any(withholds):
                kept = tuple(m for m, w in zip(rpc.publish, withholds) if not w)
                withheld = tuple(m for m, w in zip(rpc.publish, withholds) if w)
                dropped.append(TraceEvent(TraceType.DROP_RPC, now, peer=peer, rpc=Rpc(publish=withheld)))
                rpc = Rpc(rpc.subscriptions, kept, rpc.control)
            if rpc.control is not None:
                control = self._controls(now, peer, rpc.control, held)
                rpc = Rpc(rpc.subscriptions, rpc.publish, None if control.is_empty() else control)
            if rpc.subscriptions or rpc.publish or rpc.control is not None:
                sends.append((peer, rpc))
        trace = out.trace
        if held:
            trace = tuple(ev for ev in trace if not (ev.type == TraceType.PRUNE and (ev.peer, ev.topic) in held))
        return dataclasses.replace(out, sends=tuple(sends), trace=trace + tuple(dropped))

    def _controls(self, now: int, peer: PeerId, control: Control, held: set[tuple[PeerId, str]]) -> Control:
        """What the behaviours let out of `control`. A PRUNE they hold back
        was never made: the engine's mesh gets the peer back and `held`
        records it, so its PRUNE trace event goes too."""
        edited = control
        for behaviour in self.behaviours:
            edited = behaviour.controls(now, edited)
        if edited is control:
            return control
        kept = set(edited.prune)
        for prune in control.prune:
            mesh = self.engine.mesh.get(prune.topic)
            if prune not in kept and mesh is not None and peer in self.topic_peers(prune.topic):
                mesh.add(peer)
                held.add((peer, prune.topic))
        return edited


def _merge(first: Output, then: Output) -> Output:
    return Output(
        first.sends + then.sends, first.deliveries + then.deliveries, first.trace + then.trace,
        first.dials + then.dials, first.scores + then.scores, first.wakeups + then.wakeups,
    )
