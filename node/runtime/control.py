"""The node's control endpoint: newline-delimited JSON requests, one JSON
line answered per request (docs/architecture.md, "Node control endpoint").

Every request carries the testbed's token, compared in constant time; a
request without it is answered `{"ok": false, "error": "unauthorized"}` and
does nothing. Commands:

    status       [reset_lag | end_lag]  name, peers, mesh/fanout, counters, lag
                                         (after answering, reset_lag: start a new lag window;
                                         end_lag: close it, the run is over)
    subscribe / unsubscribe  topic
    publish      topic, data | data_b64 | size [, seq]     -> message_id (hex)
    inject       seqno, topic, data | data_b64 | size [, seq]
                 publish a message built elsewhere (one id handed to several nodes),
                 authored by the testbed's injector identity
    connect      host, port [, name, persistent]           -> peer
    disconnect   peer                                       close one connection
    isolate      [peers]   close and refuse connections to peers (all when absent)
    rejoin       [peers]   undo isolate
    workload_start  t_ns                 the workload began at t_ns (engine clock): a covert
                                         sybil's `start` counts from then
    drain                                the end of a run: LEAVE every topic, answer when the
                                         queues are empty (bounded); the node keeps receiving
    shutdown                             graceful: LEAVE (PRUNE), flush, exit 0
"""

from __future__ import annotations

import base64
import hmac
import json
from typing import TYPE_CHECKING, Any

import trio

from node.wire.rpc import workload_data

if TYPE_CHECKING:
    from node.runtime.daemon import Node

MAX_LINE = 16 << 20
MAX_PAYLOAD = 16 << 20
CONNECT_TIMEOUT_S = 15.0


class BadRequest(ValueError):
    pass


def _str(req: dict[str, Any], key: str) -> str:
    value = req.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{key!r} must be a non-empty string")
    return value


def _int(req: dict[str, Any], key: str, default: int | None = None, lo: int = 0, hi: int = 1 << 63) -> int:
    value = req.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise BadRequest(f"{key!r} must be an integer in [{lo}, {hi}]")
    return value


def _peers(req: dict[str, Any]) -> list[str] | None:
    peers = req.get("peers")
    if peers is None:
        return None
    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        raise BadRequest("'peers' must be a list of names")
    return peers or None


def _data(req: dict[str, Any]) -> bytes:
    if "data" in req:
        if not isinstance(req["data"], str):
            raise BadRequest("'data' must be a string")
        data = req["data"].encode()
    elif "data_b64" in req:
        try:
            data = base64.b64decode(req["data_b64"], validate=True)
        except (ValueError, TypeError) as exc:
            raise BadRequest(f"'data_b64' is not base64: {exc}") from None
    else:
        data = workload_data(_int(req, "seq", 0), _int(req, "size", 0, 0, MAX_PAYLOAD))
    if len(data) > MAX_PAYLOAD:
        raise BadRequest("payload too large")
    return data


def authorized(node: Node, req: dict[str, Any]) -> bool:
    token = req.get("token")
    if not isinstance(token, str):
        return False
    return hmac.compare_digest(token.encode(), node.cfg.token.encode())


async def handle(node: Node, req: Any) -> dict[str, Any]:
    if not isinstance(req, dict):
        return {"ok": False, "error": "a request is a JSON object"}
    if not authorized(node, req):
        return {"ok": False, "error": "unauthorized"}
    cmd = req.get("cmd")
    try:
        if cmd == "status":
            status = node.status()
            if req.get("reset_lag"):
                node.lag.reset()
            if req.get("end_lag"):
                node.lag.end()
            return {"ok": True, **status}
        if cmd == "subscribe":
            node.subscribe(_str(req, "topic"))
            return {"ok": True}
        if cmd == "unsubscribe":
            node.unsubscribe(_str(req, "topic"))
            return {"ok": True}
        if cmd == "publish":
            return {"ok": True, "message_id": node.publish(_str(req, "topic"), _data(req))}
        if cmd == "inject":
            mid = node.inject(_int(req, "seqno"), _str(req, "topic"), _data(req))
            return {"ok": True, "message_id": mid}
        if cmd == "connect":
            name = req.get("name")
            if name is not None and not isinstance(name, str):
                raise BadRequest("'name' must be a string")
            with trio.fail_after(CONNECT_TIMEOUT_S):
                peer = await node.connect(
                    _str(req, "host"), _int(req, "port", None, 1, 65535), name, bool(req.get("persistent"))
                )
            return {"ok": True, "peer": peer}
        if cmd == "disconnect":
            return {"ok": True, "closed": node.disconnect(_str(req, "peer"))}
        if cmd == "isolate":
            return {"ok": True, "closed": node.isolate(_peers(req))}
        if cmd == "rejoin":
            node.rejoin(_peers(req))
            return {"ok": True}
        if cmd == "workload_start":
            node.workload_started(_int(req, "t_ns"))
            return {"ok": True}
        if cmd == "drain":
            await node.drain()
            status = node.status()
            return {"ok": True, "counters": status["counters"], "lag": status["lag"]}
        if cmd == "shutdown":
            return {"ok": True, "shutdown": True}
        return {"ok": False, "error": f"unknown command {cmd!r}"}
    except BadRequest as exc:
        return {"ok": False, "error": f"{cmd}: {exc}"}
    except trio.TooSlowError:
        return {"ok": False, "error": f"{cmd}: timed out"}
    except Exception as exc:  # ConnectError and anything the engine refuses
        return {"ok": False, "error": f"{cmd}: {exc}"}


async def serve_control(node: Node, stream: trio.SocketStream) -> None:
    buf = bytearray()
    try:
        while True:
            data = await stream.receive_some(1 << 16)
            if not data:
                return
            buf += data
            while (end := buf.find(b"\n")) >= 0:
                line = bytes(buf[:end])
                del buf[: end + 1]
                if not line.strip():
                    continue
                try:
                    req = json.loads(line)
                except ValueError:
                    reply: dict[str, Any] = {"ok": False, "error": "not JSON"}
                else:
                    reply = await handle(node, req)
                await stream.send_all((json.dumps(reply) + "\n").encode())
                if reply.get("shutdown"):
                    node.request_shutdown()
                    return
            if len(buf) > MAX_LINE:
                await stream.send_all(b'{"ok": false, "error": "request line too long"}\n')
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(stream)
