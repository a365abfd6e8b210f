"""Protocol engines without I/O (h11/wsproto style).

An engine owns no socket, reads no clock and draws from no global random
generator: time (integer nanoseconds) and a seeded `random.Random` come in,
inputs are method calls, and every call returns an `Output` value holding the
RPCs to send (one per peer: control piggybacking), the messages delivered to the
application and the trace events of what the engine did.
"""

from node.engine.api import Output, Router, TraceEvent, TraceType
from node.engine.registry import ROUTERS, EngineKind, make_router

__all__ = ["Output", "Router", "TraceEvent", "TraceType", "ROUTERS", "EngineKind", "make_router"]
