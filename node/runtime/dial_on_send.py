"""Dial on send in the router daemon: an engine that sends to a peer it has
no connection to (episub: its JOIN acceptances, NEIGHBOR requests, SHUFFLE
replies and pings go to peers learnt from the overlay) makes the runtime
open one, as libp2p's host opens a stream to a peer in its peerstore. The
simulator's counterpart is orchestrator/sim/dial.py.

The RPCs sent meanwhile wait here, in order, at most `limit` per peer (the
peer's queue length; beyond it they are dropped as a full queue's are), and
go out once the peer is ready. One dial per peer at a time. A dial that
fails (no address, refused, timed out, isolated, or a connection that ended
before its pubsub stream opened) drops what waited and tells the engine
(`remove_peer`), as the draft's TCP failure detection expects.
"""

from __future__ import annotations

from node.wire.rpc import PeerId, Rpc


class SendDials:
    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 1)
        self._waiting: dict[PeerId, list[Rpc]] = {}
        self._dialing: set[PeerId] = set()

    def hold(self, peer: PeerId, rpc: Rpc) -> bool:
        """Keep `rpc` until the connection to `peer` is ready; False when
        the peer's share is full (the RPC is dropped)."""
        waiting = self._waiting.setdefault(peer, [])
        if len(waiting) >= self.limit:
            return False
        waiting.append(rpc)
        return True

    def start(self, peer: PeerId) -> bool:
        """True when a dial to `peer` should start (none is under way)."""
        if peer in self._dialing:
            return False
        self._dialing.add(peer)
        return True

    def finished(self, peer: PeerId) -> None:
        self._dialing.discard(peer)

    def dialing(self, peer: PeerId) -> bool:
        return peer in self._dialing

    def waiting(self, peer: PeerId) -> bool:
        return bool(self._waiting.get(peer))

    def release(self, peer: PeerId) -> list[Rpc]:
        """What waited for `peer` (its connection is ready, or failed)."""
        return self._waiting.pop(peer, [])
