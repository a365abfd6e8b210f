"""The trio runtime that runs one protocol engine over TCP (the router daemon).

    daemon.py     the node: listener, dial loops, heartbeat, trace, engine I/O
    peer.py       one connection: frame reader, bounded outbound queue, writer
    handshake.py  the hello exchanged before any RPC, protocol negotiation
    shaper.py     user-space link shaping (delay, jitter, loss, rate)
    control.py    the newline-JSON control endpoint
    client.py     a blocking client for that endpoint (orchestrator, CLI)
    lag.py        event-loop lag measurement
"""
