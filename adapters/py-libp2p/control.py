"""The testbed's control endpoint, spoken by this adapter: newline-delimited
JSON requests over TCP, one JSON line answered per request, the testbed's
token compared in constant time (the protocol of node/runtime/control.py,
re-spoken here because this program may not import the project's node
package). What py-libp2p cannot do is answered
`{"ok": false, "error": "unsupported: <cmd> on py-libp2p"}`.

    status | subscribe/unsubscribe {topic} | publish {topic, size, seq | data | data_b64}
    connect {host, port, name?, persistent?} | disconnect {peer}
    isolate {peers?} | rejoin {peers?} | shutdown
"""

from __future__ import annotations

import base64
import hmac
import json
from typing import TYPE_CHECKING, Any

import trio

from contract import workload_data

if TYPE_CHECKING:
    from adapter import Adapter

MAX_LINE = 16 << 20
MAX_PAYLOAD = 16 << 20
CONNECT_TIMEOUT_S = 15.0
UNSUPPORTED = ("inject",)


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


async def handle(adapter: Adapter, req: Any) -> dict[str, Any]:
    if not isinstance(req, dict):
        return {"ok": False, "error": "a request is a JSON object"}
    token = req.get("token")
    if not isinstance(token, str) or not hmac.compare_digest(token.encode(), adapter.token.encode()):
        return {"ok": False, "error": "unauthorized"}
    cmd = req.get("cmd")
    try:
        if cmd == "status":
            return {"ok": True, **adapter.status()}
        if cmd == "subscribe":
            await adapter.subscribe(_str(req, "topic"))
            return {"ok": True}
        if cmd == "unsubscribe":
            await adapter.unsubscribe(_str(req, "topic"))
            return {"ok": True}
        if cmd == "publish":
            return {"ok": True, "message_id": (await adapter.publish(_str(req, "topic"), _data(req))).hex()}
        if cmd == "connect":
            name = req.get("name")
            if name is not None and not isinstance(name, str):
                raise BadRequest("'name' must be a string")
            with trio.fail_after(CONNECT_TIMEOUT_S):
                peer = await adapter.connect_address(
                    _str(req, "host"), _int(req, "port", None, 1, 65535), name, bool(req.get("persistent")))
            return {"ok": True, "peer": peer}
        if cmd == "disconnect":
            return {"ok": True, "closed": await adapter.disconnect(_str(req, "peer"))}
        if cmd == "isolate":
            return {"ok": True, "closed": await adapter.isolate(_peers(req))}
        if cmd == "rejoin":
            adapter.rejoin(_peers(req))
            return {"ok": True}
        if cmd == "shutdown":
            return {"ok": True, "shutdown": True}
        if cmd in UNSUPPORTED:
            return {"ok": False, "error": f"unsupported: {cmd} on py-libp2p"}
        return {"ok": False, "error": f"unknown command {cmd!r}"}
    except BadRequest as exc:
        return {"ok": False, "error": f"{cmd}: {exc}"}
    except trio.TooSlowError:
        return {"ok": False, "error": f"{cmd}: timed out"}
    except Exception as exc:  # noqa: BLE001 - py-libp2p's refusals (dial errors, ...) become answers
        return {"ok": False, "error": f"{cmd}: {type(exc).__name__}: {exc}"}


async def serve_control(adapter: Adapter, stream: trio.SocketStream) -> None:
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
                    reply = await handle(adapter, req)
                await stream.send_all((json.dumps(reply) + "\n").encode())
                if reply.get("shutdown"):
                    adapter.request_shutdown()
                    return
            if len(buf) > MAX_LINE:
                await stream.send_all(b'{"ok": false, "error": "request line too long"}\n')
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(stream)
