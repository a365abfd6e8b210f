"""spam: control-message floods that gossipsub v1.1's spam protection is
for (its spec's "Spam Protection Measures").

- `IHaveFlood`: IHAVE for made-up message ids to every topic peer at every
  heartbeat; a victim that asks for them with IWANT never gets them, so each
  is a broken promise (v1.1 counts them into P7).
- `IWantFlood`: IWANT for every id the sybil's mcache would gossip, asked
  `repeats` times at every heartbeat (v1.1 caps retransmissions).
- `GraftDuringBackoff`: GRAFT again, at the next heartbeat, every peer that
  pruned the sybil, ignoring the backoff the PRUNE asked for (v1.1 counts
  that into P7).
- `InvalidMessages`: new messages in the sybil's name with a forged
  signature to every topic peer at every heartbeat; each is rejected
  ("invalid signature"), which v1.1 counts into P4 of the peer it came from.

Choosing broken promises: `IHaveFlood` promises ids that never existed;
`Censor` breaks real ones (its engine gossips what it withholds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.engine.adversary.behaviour import Passive
from node.engine.api import OutputBuilder
from node.libp2p.identity import ED25519_SIGNATURE_SIZE

if TYPE_CHECKING:
    from node.engine.adversary.sybil import Sybil

FAKE_ID_BYTES = 20  # as long as a default (from + seqno) id would look in a trace
INVALID_DATA_BYTES = 64  # an invalid message's payload


@dataclass(frozen=True)
class IHaveFlood(Passive):
    ids: int  # made-up ids per peer per heartbeat

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        for topic in sorted(sybil.topics()):
            for peer in sorted(sybil.topic_peers(topic)):
                fake = tuple(sybil.rng.randbytes(FAKE_ID_BYTES) for _ in range(self.ids))
                out.ihave(peer, topic, fake)


@dataclass(frozen=True)
class IWantFlood(Passive):
    repeats: int  # how often each id is asked for, per peer per heartbeat

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        for topic in sorted(sybil.topics()):
            ids = sybil.recent_ids(topic)
            if not ids:
                continue
            for peer in sorted(sybil.topic_peers(topic)):
                for _ in range(self.repeats):
                    out.iwant(peer, ids)


@dataclass(frozen=True)
class GraftDuringBackoff(Passive):
    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        for topic, peer in sybil.pruned_since(sybil.last_heartbeat):
            sybil.force_graft(out, peer, topic)


@dataclass(frozen=True)
class InvalidMessages(Passive):
    count: int  # forged messages per heartbeat, each to every topic peer

    def attack(self, now: int, sybil: Sybil, out: OutputBuilder) -> None:
        auth = sybil.engine.auth
        for topic in sorted(sybil.topics()):
            peers = sorted(sybil.topic_peers(topic))
            if not peers:
                continue
            for _ in range(self.count):
                msg = auth.forge(sybil.peer_id, sybil.rng.getrandbits(64), topic, sybil.rng.randbytes(INVALID_DATA_BYTES),
                                 sybil.rng.randbytes(ED25519_SIGNATURE_SIZE))
                for peer in peers:
                    out.forward(peer, msg)
