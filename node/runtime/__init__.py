"""The trio runtime that runs one protocol engine as a libp2p peer (the router daemon).

    daemon.py     the node: listener, dial loops, heartbeat, trace, engine I/O
    peer.py       one peer: its connection, pubsub streams, bounded outbound queue
    shaper.py     user-space link shaping (delay, jitter, loss, rate)
    control.py    the newline-JSON control endpoint
    client.py     a blocking client for that endpoint (orchestrator, CLI)
    lag.py        event-loop lag measurement
"""
