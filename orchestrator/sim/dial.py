"""Connections the simulator opens because an engine sent to a peer it has
no connection to (dial on send, as libp2p's host opens a stream). Episub
needs it: its JOIN acceptances, NEIGHBOR requests, SHUFFLEREPLYs and pings
go to peers learnt from the overlay, not to the topology's neighbours.

The dial takes one latency, as the simulator's other dials; RPCs sent to
that peer meanwhile wait here and go out, in order, once the connection is
open. A dial to a node that is down or cut off fails, and the dialler is
told one round trip after it dialled (`remove_peer`), as a refused TCP
connection. Engines that never send to strangers (all but episub) never
reach this module."""

from __future__ import annotations

from node.wire.rpc import PeerId, Rpc


class DialOnSend:
    def __init__(self, names: dict[PeerId, str]) -> None:
        self.names = names
        self._waiting: dict[tuple[str, str], list[Rpc]] = {}

    def hold(self, src: str, peer: PeerId, rpc: Rpc) -> str | None:
        """Keep `rpc` until src's connection to `peer` opens. The name of the
        node to dial if this RPC is the first to wait for it, else None
        (a dial is under way, or the peer id is no node of the experiment)."""
        dst = self.names.get(peer)
        if dst is None:
            return None
        waiting = self._waiting.setdefault((src, dst), [])
        waiting.append(rpc)
        return dst if len(waiting) == 1 else None

    def release(self, src: str, dst: str) -> list[Rpc]:
        """What waited for src's connection to dst (opened or failed)."""
        return self._waiting.pop((src, dst), [])

    def forget(self, src: str) -> None:
        """src stopped: what it sent before does not outlive it."""
        for key in [key for key in self._waiting if key[0] == src]:
            del self._waiting[key]
