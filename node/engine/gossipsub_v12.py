"""gossipsub v1.2 (libp2p/specs pubsub/gossipsub/gossipsub-v1.2.md): v1.1 plus
IDONTWANT, one method per rule of the spec's "IDONTWANT Message" section:

- `_before_validation`: on the first copy of a message of at least
  IDontWantMessageThreshold bytes, IDONTWANT goes at once (its own RPC, not
  piggybacked) to every mesh peer that speaks v1.2, except the sender;
- `_on_idontwant`: a peer's IDONTWANT ids go into its
  `dont_send_message_ids`, at most max_idontwant_messages IDONTWANTs per
  heartbeat and MaxIDontWantLength ids per RPC (flood protection);
- `_wants_message`: forwarding, publishing and IWANT answers skip peers
  that said IDONTWANT for the message;
- `_expire_idontwant`: entries live IDontWantMessageTTL heartbeats.

Publishing sends no IDONTWANT (every peer that gets our message learns it
from the message itself); flood publishing, like forwarding, skips peers
that sent IDONTWANT (go-libp2p-pubsub's behaviour).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

from node.engine.api import FLOODSUB_ID, MESHSUB_ID, MESHSUB_V11_ID, MESHSUB_V12_ID, OutputBuilder
from node.engine.authenticity import Authenticity
from node.engine.gossipsub_config import GossipSubV12Params
from node.engine.gossipsub_v11 import GossipSubV11Router
from node.engine.pubsub import Validator
from node.wire.rpc import Control, Message, MessageId, PeerId


class GossipSubV12Router(GossipSubV11Router):
    protocol_id = MESHSUB_V12_ID
    supported_protocols = frozenset({MESHSUB_V12_ID, MESHSUB_V11_ID, MESHSUB_ID, FLOODSUB_ID})
    mesh_protocols = frozenset({MESHSUB_V12_ID, MESHSUB_V11_ID, MESHSUB_ID})
    px_protocols = frozenset({MESHSUB_V12_ID, MESHSUB_V11_ID})
    idontwant_protocols = frozenset({MESHSUB_V12_ID})
    params: GossipSubV12Params

    def __init__(
        self, peer_id: PeerId, rng: random.Random, params: GossipSubV12Params,
        validator: Validator | None = None, auth: Authenticity = Authenticity(),
        validation_delay: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(peer_id, rng, params, validator, auth, validation_delay)
        # dont_send_message_ids per peer: message id -> heartbeats left
        self.dont_send: dict[PeerId, dict[MessageId, int]] = {}
        self.peerdontwant: Counter[PeerId] = Counter()

    def _before_validation(self, out: OutputBuilder, sender: PeerId, msg: Message) -> None:
        """Basic scenario: IDONTWANT to all mesh peers on the first copy."""
        if len(msg.data) < self.params.IDontWantMessageThreshold:
            return
        for peer in sorted(self.mesh.get(msg.topic, ())):
            if peer != sender and self.peers.get(peer) in self.idontwant_protocols:
                out.idontwant(peer, (msg.id,))

    def _control(self, out: OutputBuilder, peer: PeerId, control: Control) -> None:
        self._on_idontwant(peer, control)
        super()._control(out, peer, control)

    def _on_idontwant(self, peer: PeerId, control: Control) -> None:
        """Remember the ids, within the per-heartbeat limits."""
        if not control.idontwant:
            return
        p = self.params
        if self.peerdontwant[peer] >= p.max_idontwant_messages:
            return
        self.peerdontwant[peer] += 1
        ids = [mid for idontwant in control.idontwant for mid in idontwant.message_ids][: p.MaxIDontWantLength]
        unwanted = self.dont_send.setdefault(peer, {})
        for mid in ids:
            unwanted[mid] = p.IDontWantMessageTTL

    def _wants_message(self, peer: PeerId, mid: MessageId) -> bool:
        unwanted = self.dont_send.get(peer)
        return unwanted is None or mid not in unwanted

    def _peer_removed(self, out: OutputBuilder, peer: PeerId) -> None:
        super()._peer_removed(out, peer)
        self.dont_send.pop(peer, None)

    def _heartbeat(self, out: OutputBuilder) -> None:
        self._expire_idontwant()
        super()._heartbeat(out)

    def _expire_idontwant(self) -> None:
        """Old entries of dont_send_message_ids are pruned at the heartbeat:
        each lives IDontWantMessageTTL heartbeats; the per-heartbeat count of
        IDONTWANTs starts again."""
        self.peerdontwant.clear()
        for peer in list(self.dont_send):
            unwanted = self.dont_send[peer]
            for mid in list(unwanted):
                unwanted[mid] -= 1
                if unwanted[mid] <= 0:
                    del unwanted[mid]
            if not unwanted:
                del self.dont_send[peer]
