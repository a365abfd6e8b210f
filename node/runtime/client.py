"""A blocking client for the node's control endpoint, for the orchestrator and
the CLI (standard library only, one short TCP connection per request so a
restarted node is just reached again)."""

from __future__ import annotations

import json
import socket
from typing import Any


SHOWN = 64  # bytes of a reply that is not JSON quoted in the error


class ControlError(RuntimeError):
    """The node could not be reached, or it answered ok: false."""


class ControlClient:
    def __init__(self, host: str, port: int, token: str, timeout: float = 5.0) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.timeout = timeout

    def call(self, cmd: str, timeout: float | None = None, **args: Any) -> dict[str, Any]:
        request = json.dumps({"token": self.token, "cmd": cmd, **args}).encode() + b"\n"
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout or self.timeout) as sock:
                sock.sendall(request)
                buf = bytearray()
                while b"\n" not in buf:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        raise ControlError(f"{self.host}:{self.port} closed the connection on {cmd!r}")
                    buf += chunk
        except OSError as exc:
            raise ControlError(f"{self.host}:{self.port} unreachable ({cmd}): {exc}") from None
        line = bytes(buf[: buf.index(b"\n")])
        try:
            reply = json.loads(line)
        except ValueError:
            # what answered, so the log tells a peer port (multistream-select's
            # "/multistream/1.0.0" line) from a damaged reply
            raise ControlError(
                f"{self.host}:{self.port} answered {cmd!r} with something not JSON: {line[:SHOWN]!r}"
            ) from None
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error", "request failed")))
        return reply

    def try_call(self, cmd: str, timeout: float | None = None, **args: Any) -> dict[str, Any] | None:
        try:
            return self.call(cmd, timeout=timeout, **args)
        except ControlError:
            return None
