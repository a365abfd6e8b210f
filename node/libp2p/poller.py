"""One task reads every connection of a node: `ReadPoller` keeps its own
level-triggered epoll set of the connections' sockets and, each time trio
says that set is readable, calls the callback of every ready socket in turn.

Why: with a reader task per connection, every read cost a wake-up of that
task, an epoll_ctl re-arming trio's one-shot registration and trio's
scheduling around both; under load that was most of a router's CPU. Here a
socket stays registered for the connection's life, and one wake-up of one
task serves every connection that has data.

A callback runs in the poller's task: it must not block and must not raise
(a connection hands its failure to its own task, node/libp2p/connection.py).
"""

from __future__ import annotations

import select
from collections.abc import Callable

import trio


class ReadPoller:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._callbacks: dict[int, Callable[[], None]] = {}

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        """Call `callback()` whenever `fd` is readable (or hung up), until
        `remove(fd)`, which must come before the descriptor is closed.
        ClosedResourceError once the poller has stopped (the node is ending)."""
        if self._epoll.closed:
            raise trio.ClosedResourceError("the node's read poller has stopped")
        self._epoll.register(fd, select.EPOLLIN)
        self._callbacks[fd] = callback

    def remove(self, fd: int) -> None:
        if self._callbacks.pop(fd, None) is not None and not self._epoll.closed:
            self._epoll.unregister(fd)

    async def run(self) -> None:
        """Serve the callbacks until cancelled; then the epoll set is closed."""
        try:
            while True:
                await trio.lowlevel.wait_readable(self._epoll)
                for fd, _ in self._epoll.poll(0):
                    callback = self._callbacks.get(fd)  # an earlier callback may have removed it
                    if callback is not None:
                        callback()
        finally:
            trio.lowlevel.notify_closing(self._epoll)
            self._epoll.close()
