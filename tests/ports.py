"""Free TCP ports on loopback, for tests that must know their nodes'
addresses before the nodes start (address books, proxies)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """n distinct ports free right now (all held open together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
