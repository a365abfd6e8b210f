"""Episub (../shared/seeds/episub-draft.md): proximity-aware epidemic pubsub,
Plumtree broadcast over HyParView membership with GoCast's proximity links.

Split by the draft's concepts: `params` (view sizes and timers), `output`
(what one input produces; the messages themselves are node/wire/episub.py), `proximity` (RTT estimates),
`views` (membership management), `broadcast` (the multicast tree) and
`router` (the Router interface and timers). docs/episub.md maps each rule
of the draft to its method and test, and lists the choices the draft leaves
open.
"""

from node.engine.episub.params import EpisubParams
from node.engine.episub.router import EpisubRouter
from node.wire.episub import EPISUB_ID, EpisubRpc

__all__ = ["EPISUB_ID", "EpisubParams", "EpisubRouter", "EpisubRpc"]
