"""A py-libp2p 0.8.1 gossipsub node for gossip-testbed, following libp2p
test-plans' gossipsub-interop node contract, plus the testbed's extensions
(docs/foreign-routers.md):

    adapter.py --params FILE [--config FILE]

- node id: the hostname `nodeN`, or the NodeConfig's index with --config;
  ed25519 key from the contract's seed; listens on 0.0.0.0:9000 (or the
  config's listen address); strict signing; message id = first 8 bytes.
- --params: the script (script.py), run in order; waitUntil counts from start.
- stdout: NDJSON, "PeerID" once, "Received Message" for every copy
  (duplicates too), and the extension lines observed.py can see.
- --config (the testbed's NodeConfig JSON, read as plain JSON): names,
  addresses for connectTo, the control endpoint (control.py); the peers it
  dials are kept connected (redialled with backoff) like our daemon's
  initial peers, except while isolated.

It runs in .venv-pylibp2p (or the py-libp2p image), never in the project's
.venv: py-libp2p needs protobuf<7. Bad input exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STARTED = time.monotonic()

import multiaddr  # noqa: E402 - STARTED first: waitUntil counts from the process start
import trio  # noqa: E402
from libp2p import new_host  # noqa: E402
from libp2p.abc import INotifee  # noqa: E402
from libp2p.crypto.ed25519 import create_new_key_pair  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from libp2p.peer.peerinfo import PeerInfo  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11  # noqa: E402
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport  # noqa: E402
from libp2p.tools.anyio_service import background_trio_service  # noqa: E402

from contract import Lines, ed25519_seed, message_id, workload_data  # noqa: E402
from control import serve_control  # noqa: E402
from observed import Names, ObservedGossipSub, ObservedPubsub  # noqa: E402
from script import Script, ScriptError, load_script  # noqa: E402

IMPLEMENTATION = "py-libp2p"
CONTRACT_PORT = 9000
DIAL_TIMEOUT_S = 10.0
CONNECTED_POLL_S = 0.5
DRAIN_S = 1.0  # at shutdown: how long queued RPCs (our PRUNEs) may take to leave


class BadInput(Exception):
    pass


@dataclass(frozen=True)
class Settings:
    """What the adapter is told: the node id, and with --config the
    testbed's extras (NodeConfig fields, read as plain JSON)."""

    node_id: int
    name: str
    listen: tuple[str, int] = ("0.0.0.0", CONTRACT_PORT)
    control: tuple[str, int] | None = None
    token: str = ""
    security: str = "noise"
    peer_names: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, tuple[str, int]] = field(default_factory=dict)  # b58 peer id -> (host, port)
    backoff_s: tuple[float, float] = (0.05, 2.0)
    persistent: bool = False


def peer_id_for(node_id: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(ed25519_seed(node_id)).public_key)


def _settings_from_config(path: Path) -> Settings:
    try:
        raw = json.loads(path.read_text())
        node_id = int(raw["index"])
        settings = Settings(
            node_id=node_id, name=str(raw.get("name") or f"node{node_id}"),
            listen=(str(raw["listen_host"]), int(raw["listen_port"])),
            control=(str(raw["control_host"]), int(raw["control_port"])), token=str(raw["token"]),
            security=str(raw.get("security", "noise")),
            peer_names={str(k): str(v) for k, v in raw.get("peer_names", {}).items()},
            addresses={str(p["peer_id"]): (str(p["host"]), int(p["port"])) for p in raw.get("initial_peers", ())},
            backoff_s=(raw.get("dial_backoff_ms", 50) / 1000, raw.get("dial_backoff_max_ms", 2000) / 1000),
            persistent=True,
        )
        ed25519_seed(node_id)  # ValueError unless a u32
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise BadInput(f"{path}: {exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"{path}: missing or malformed field ({type(exc).__name__}: {exc})") from None
    if raw.get("message_id", "first-8-bytes") != "first-8-bytes":
        raise BadInput(f"{path}: message_id: py-libp2p nodes need first-8-bytes, not {raw['message_id']!r}")
    if raw.get("authenticity", "strict") != "strict":
        raise BadInput(f"{path}: authenticity: py-libp2p signs strictly, not {raw['authenticity']!r}")
    if settings.security not in ("noise", "plaintext"):
        raise BadInput(f"{path}: security must be noise or plaintext, not {settings.security!r}")
    return settings


def _settings_from_hostname() -> Settings:
    hostname = socket.gethostname()
    if not (hostname.startswith("node") and hostname[4:].isdigit()):
        raise BadInput(f"the hostname {hostname!r} is not nodeN (the contract's node id); give --config")
    node_id = int(hostname[4:])
    try:
        ed25519_seed(node_id)
    except ValueError as exc:
        raise BadInput(f"the hostname {hostname!r}: {exc}") from None
    return Settings(node_id=node_id, name=hostname)


class IsolationNotifee(INotifee):
    """Closes a connection from a peer we are isolated from as it opens."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter

    async def connected(self, network: Any, conn: Any) -> None:
        if self.adapter.pubsub.is_peer_blacklisted(conn.muxed_conn.peer_id):
            self.adapter.nursery.start_soon(conn.close)

    # The other notifications concern isolation not at all.
    async def opened_stream(self, network: Any, stream: Any) -> None:
        return None

    async def closed_stream(self, network: Any, stream: Any) -> None:
        return None

    async def disconnected(self, network: Any, conn: Any) -> None:
        return None

    async def listen(self, network: Any, multiaddr: Any) -> None:
        return None

    async def listen_close(self, network: Any, multiaddr: Any) -> None:
        return None


class IsolatingPubsub(ObservedPubsub):
    """Isolation is py-libp2p's blacklist, plus `isolate_all` for isolate
    without a peer list (nobody may talk to us)."""

    isolate_all = False

    def is_peer_blacklisted(self, peer_id: ID) -> bool:
        return self.isolate_all or super().is_peer_blacklisted(peer_id)


class Adapter:
    def __init__(self, settings: Settings, script: Script, lines: Lines) -> None:
        self.settings = settings
        self.script = script
        self.lines = lines
        self.names = Names(settings.peer_names)
        self.token = settings.token
        key_pair = create_new_key_pair(ed25519_seed(settings.node_id))
        sec_opt = {PLAINTEXT_PROTOCOL_ID: InsecureTransport(key_pair)} if settings.security == "plaintext" else None
        self.host = new_host(key_pair=key_pair, sec_opt=sec_opt)
        self.router = ObservedGossipSub(
            lines, protocols=[PROTOCOL_ID_V11, PROTOCOL_ID], **script.params.gossipsub,
            # go-libp2p-pubsub has none of py-libp2p's "v2.0" extras, and they
            # change what was asked: adaptive D bounds, a 10 msg/s/topic rate
            # limit on forwarding, extra GRAFTs for IP diversity, and peer
            # scoring (go's routers here run without a score function).
            adaptive_gossip_enabled=False, spam_protection_enabled=False, eclipse_protection_enabled=False,
        )
        for attr, value in script.params.attrs.items():
            setattr(self.router, attr, value)
        self.router.scorer = None
        self.pubsub = IsolatingPubsub(lines, self.host, self.router, strict_signing=True)
        self.pubsub.on_bad_peer = self._drop
        self.host.get_network().register_notifee(IsolationNotifee(self))
        self.peer_id = self.host.get_id()
        self.dialled: dict[ID, tuple[str, int]] = {}
        self.shutdown = trio.Event()
        self.nursery: trio.Nursery

    # ------------------------------------------------------------ run

    async def run(self) -> None:
        host, port = self.settings.listen
        listen = multiaddr.Multiaddr(f"/ip4/{host}/tcp/{port}")
        self.lines.emit("PeerID", id=self.peer_id.to_base58(), node_id=self.settings.node_id)
        async with (self.host.run([listen]), background_trio_service(self.pubsub),
                    background_trio_service(self.router), trio.open_nursery() as nursery):
            self.nursery = nursery
            await self.pubsub.wait_until_ready()
            if self.settings.control is not None:
                chost, cport = self.settings.control
                await nursery.start(functools.partial(trio.serve_tcp, self._serve_control, cport, host=chost))
            nursery.start_soon(self._signals)
            nursery.start_soon(self._run_script)
            await self.shutdown.wait()
            await self._leave_all()
            nursery.cancel_scope.cancel()

    async def _serve_control(self, stream: trio.SocketStream) -> None:
        await serve_control(self, stream)

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                self.request_shutdown()

    def request_shutdown(self) -> None:
        self.shutdown.set()

    async def _leave_all(self) -> None:
        """Graceful: leave every topic (PRUNE to the mesh), let the queues drain."""
        for topic in list(self.pubsub.topic_ids):
            await self.unsubscribe(topic)
        with trio.move_on_after(DRAIN_S):
            while any(len(q) for q in self.pubsub.peer_queues.values()):
                await trio.sleep(0.02)

    async def _run_script(self) -> None:
        for step in self.script.steps:
            kind = step["type"]
            if kind == "connect":
                async with trio.open_nursery() as dials:
                    for target in step["connectTo"]:
                        dials.start_soon(self.connect_node, target)
            elif kind == "subscribeToTopic":
                await self.subscribe(step["topicID"])
            elif kind == "publish":
                await self.publish(step["topicID"], workload_data(step["messageID"], step["messageSizeBytes"]))
            elif kind == "waitUntil":
                await trio.sleep(max(0.0, STARTED + step["elapsedSeconds"] - time.monotonic()))

    # ------------------------------------------------------------ peers

    def _address_of(self, node_id: int, peer: ID) -> tuple[str, int]:
        known = self.settings.addresses.get(peer.to_base58())
        if known is not None:
            return known
        return socket.gethostbyname(f"node{node_id}"), CONTRACT_PORT

    async def connect_node(self, node_id: int) -> None:
        peer = peer_id_for(node_id)
        try:
            address = await trio.to_thread.run_sync(self._address_of, node_id, peer)
        except OSError as exc:
            print(f"pylibp2p-adapter: cannot resolve node{node_id}: {exc}", file=sys.stderr, flush=True)
            return
        try:
            await self._connect(peer, address, self.settings.persistent)
        except Exception:  # noqa: BLE001 - reported by _connect; the script goes on, as test-plans' nodes do
            return

    async def _connect(self, peer: ID, address: tuple[str, int], persistent: bool) -> None:
        if persistent and peer not in self.dialled:
            self.dialled[peer] = address
            self.nursery.start_soon(self._keep_connected, peer)
        try:
            await self._dial(peer, address)
        except Exception as exc:  # noqa: BLE001 - a failed dial is reported, and retried when persistent
            print(f"pylibp2p-adapter: dial {peer.to_base58()} at {address}: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
            if not persistent:
                raise

    async def _dial(self, peer: ID, address: tuple[str, int]) -> None:
        addr = multiaddr.Multiaddr(f"/ip4/{address[0]}/tcp/{address[1]}")
        with trio.fail_after(DIAL_TIMEOUT_S):
            await self.host.connect(PeerInfo(peer, [addr]))

    def _connected(self, peer: ID) -> bool:
        return bool(self.host.get_network().get_connections(peer))

    async def _keep_connected(self, peer: ID) -> None:
        first, cap = self.settings.backoff_s
        delay = first
        while True:
            if self._connected(peer) or self.pubsub.is_peer_blacklisted(peer):
                delay = first
                await trio.sleep(CONNECTED_POLL_S)
                continue
            await trio.sleep(delay)
            try:
                await self._dial(peer, self.dialled[peer])
                delay = first
            except Exception:  # noqa: BLE001 - the peer is down or unreachable: back off and retry
                delay = min(cap, delay * 2)

    def _drop(self, peer: ID) -> None:
        self.nursery.start_soon(self._close_connections, peer)

    async def _close_connections(self, peer: ID) -> int:
        """Closes every connection to `peer`, each by itself. Not
        `host.disconnect`: py-libp2p's `close_peer` awaits the closes and then
        drops the peer's whole connection list, so a connection registered
        meanwhile (a peer redialling while we refuse it) stays open and
        unlisted: no pubsub peer, and the dialler never redials."""
        connections = list(self.host.get_network().get_connections(peer))
        for conn in connections:
            await conn.close()
        return len(connections)

    async def connect_address(self, host: str, port: int, name: str | None, persistent: bool) -> str:
        b58 = self.names.by_name.get(name or "") or next(
            (b for b, addr in self.settings.addresses.items() if addr == (host, port)), None)
        if b58 is None:
            raise ValueError("py-libp2p dials a known peer id: give the name of a peer in peer_names, "
                             f"or an initial peer's address ({host}:{port} is neither)")
        peer = ID.from_base58(b58)
        await self._connect(peer, (host, port), persistent)
        return self.names.name(peer)

    async def disconnect(self, who: str) -> int:
        return await self._close_connections(self.names.peer(who))

    async def isolate(self, who: list[str] | None) -> int:
        if who is None:
            self.pubsub.isolate_all = True
            peers = list(self.host.get_network().get_connections_map())
        else:
            peers = [self.names.peer(w) for w in who]
            self.pubsub.blacklisted_peers.update(peers)
        return sum([await self._close_connections(peer) for peer in peers])

    def rejoin(self, who: list[str] | None) -> None:
        if who is None:
            self.pubsub.isolate_all = False
            self.pubsub.blacklisted_peers.clear()
        else:
            self.pubsub.blacklisted_peers.difference_update(self.names.peer(w) for w in who)

    # ------------------------------------------------------------ topics

    async def subscribe(self, topic: str) -> None:
        if topic in self.pubsub.topic_ids:
            return
        self.lines.emit("Joined", topic=topic)  # before the GRAFTs joining sends, as go traces JOIN
        subscription = await self.pubsub.subscribe(topic)
        self.nursery.start_soon(self._drain, subscription)

    @staticmethod
    async def _drain(subscription: Any) -> None:
        """Deliveries are reported where py-libp2p makes them (observed.py);
        the subscription's queue only has to be emptied."""
        try:
            while True:
                await subscription.get()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return

    async def unsubscribe(self, topic: str) -> None:
        if topic not in self.pubsub.topic_ids:
            return
        self.lines.emit("Left", topic=topic)  # before the PRUNEs leaving sends, as go traces LEAVE
        await self.pubsub.unsubscribe(topic)

    async def publish(self, topic: str, data: bytes) -> bytes:
        await self.pubsub.publish(topic, data)
        return message_id(data)

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        counters = self.pubsub.counters
        keys = ("delivered", "published", "duplicates", "rpcs_in", "rpcs_out", "bytes_in", "bytes_out",
                "peers_dropped")
        return {
            "name": self.settings.name, "peer_id": self.peer_id.to_base58(), "router": IMPLEMENTATION,
            "node_id": self.settings.node_id, "security": self.settings.security, "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - STARTED, 3),
            "listen": list(self.settings.listen),
            "peers": sorted(self.names.name(p) for p in self.pubsub.peers),
            "topics": sorted(self.pubsub.topic_ids),
            "mesh": {t: sorted(self.names.name(p) for p in peers) for t, peers in self.router.mesh.items()},
            "fanout": {t: sorted(self.names.name(p) for p in peers) for t, peers in self.router.fanout.items()},
            "isolated": "all" if self.pubsub.isolate_all else sorted(
                self.names.name(p) for p in self.pubsub.blacklisted_peers) or None,
            "counters": {k: counters.get(k, 0) for k in keys},
            "params": self.script.params.go,
            "params_ignored": self.script.params.ignored,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="py-libp2p gossipsub node (gossipsub-interop contract)")
    parser.add_argument("--params", type=Path, required=True, help="the script: JSON {\"script\": [...]}")
    parser.add_argument("--config", type=Path, help="the testbed's NodeConfig JSON (extensions)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = _settings_from_config(args.config) if args.config else _settings_from_hostname()
        script = load_script(args.params, settings.node_id)
    except (BadInput, ScriptError) as exc:
        print(f"pylibp2p-adapter: {exc}", file=sys.stderr)
        return 2
    if script.params.ignored:
        print(f"pylibp2p-adapter: py-libp2p 0.8.1 cannot apply {json.dumps(script.params.ignored)}",
              file=sys.stderr, flush=True)
    trio.run(Adapter(settings, script, Lines()).run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
