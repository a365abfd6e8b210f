"""Adversary behaviours built on our engines, for the attacks gossipsub v1.1
was hardened against (Vyzovitis et al. 2020, "GossipSub: Attack-Resilient
Message Propagation in the Filecoin and ETH2.0 Networks").

A sybil is an ordinary engine (`Sybil` wraps any gossipsub router) plus a
tuple of behaviours, each a small frozen dataclass with one job: `Censor`,
`Degrade`, `Eclipse`, `BadBoy`, `IHaveFlood`, `IWantFlood`,
`GraftDuringBackoff`, `InvalidMessages`, and
`Covert`, which holds others back until a time. They combine by listing
them: the report's eclipse is `(Eclipse(targets), Censor())`, its covert
flash `(Covert(at, (Eclipse(targets), Censor())),)`. docs/adversaries.md
says what each does and how it shows in a trace."""

from node.engine.adversary.bad_boy import BadBoy
from node.engine.adversary.behaviour import Behaviour
from node.engine.adversary.censor import Censor
from node.engine.adversary.covert import Covert
from node.engine.adversary.degrade import Degrade
from node.engine.adversary.eclipse import Eclipse
from node.engine.adversary.spam import GraftDuringBackoff, IHaveFlood, InvalidMessages, IWantFlood
from node.engine.adversary.sybil import Sybil

__all__ = [
    "BadBoy", "Behaviour", "Censor", "Covert", "Degrade", "Eclipse", "GraftDuringBackoff", "IHaveFlood",
    "InvalidMessages", "IWantFlood", "Sybil",
]
