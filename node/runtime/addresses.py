"""The IP a peer's connection comes from, as gossipsub v1.1's P6 (IP
colocation) counts it, and the source address our dials leave from so that
the other end counts us right.

Why both: a dial that leaves unbound takes the route's preferred source.
On the process backend every node listens on its own 127.N.b.c, but the
loopback route's source is 127.0.0.1, so every inbound peer would look like
one host and P6 would punish them all. Dialling from the address we listen
on gives each node's connections its own address, as containers have. On
docker the listen address is the container's, so binding changes nothing;
the delay line queues packets on the bridge without rewriting them and a
foreign router's shaping proxy dials from inside that router's network
namespace, so in every path the remote address of our socket is the peer's
own IP, never a relay's.
"""

from __future__ import annotations

import ipaddress

import trio


def remote_ip(stream: trio.abc.Stream) -> str:
    """The remote IP of a TCP stream; "" for a stream without a socket (a
    test's in-memory pair) or one already closed."""
    if not isinstance(stream, trio.SocketStream):
        return ""
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:
        return ""


def source_address(listen_host: str) -> str | None:
    """The address to dial from: the listen address when it is one IP,
    else None (the kernel chooses: 0.0.0.0, or a host name)."""
    try:
        address = ipaddress.ip_address(listen_host)
    except ValueError:
        return None
    return None if address.is_unspecified else str(address)
