"""A py-libp2p gossipsub host for the interop tests, run by the virtualenv
scripts/pylibp2p-venv.sh makes (py-libp2p needs protobuf<7 and may never be
imported by the project itself).

    host.py --index I --port P --security noise|plaintext --topic T [--dial MULTIADDR ...]

Its identity is test-plans' key for index I (the seed is I as a
little-endian u32, zero-padded to 32 bytes), so the testbed knows its peer id.
It speaks to the test through JSON lines: commands on stdin, events on stdout.

    stdin:  {"cmd": "publish", "data": "..."} | {"cmd": "mesh"} | {"cmd": "leave"} | {"cmd": "stop"}
    stdout: {"event": "ready", "peer_id": ..., "addr": ...}
            {"event": "deliver", "from": <b58>, "seqno": <hex>, "data": ...}
            {"event": "mesh", "peers": [<b58>, ...]}
            {"event": "published"} | {"event": "left"}
"""

from __future__ import annotations

import argparse
import json
import sys

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport
from libp2p.tools.anyio_service import background_trio_service


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def security_options(key_pair, security: str):
    if security == "plaintext":
        return {PLAINTEXT_PROTOCOL_ID: InsecureTransport(key_pair)}
    return None  # py-libp2p's default: noise


async def main(args: argparse.Namespace) -> None:
    key_pair = create_new_key_pair(args.index.to_bytes(4, "little") + bytes(28))
    host = new_host(key_pair=key_pair, sec_opt=security_options(key_pair, args.security))
    router = GossipSub(
        protocols=[PROTOCOL_ID_V11, PROTOCOL_ID], degree=args.degree, degree_low=args.degree_low,
        degree_high=args.degree_high, heartbeat_interval=args.heartbeat, heartbeat_initial_delay=0.2,
    )
    pubsub = Pubsub(host, router, strict_signing=args.strict_signing)
    listen = multiaddr.Multiaddr(f"/ip4/{args.host}/tcp/{args.port}")
    async with host.run([listen]), background_trio_service(pubsub), background_trio_service(router):
        await pubsub.wait_until_ready()
        for addr in args.dial:
            await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(addr)))
        subscription = await pubsub.subscribe(args.topic)
        emit(event="ready", peer_id=host.get_id().to_base58(), addr=f"{listen}/p2p/{host.get_id().to_base58()}")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deliveries, subscription)
            await commands(pubsub, router, args.topic)
            nursery.cancel_scope.cancel()


async def deliveries(subscription) -> None:
    while True:
        msg = await subscription.get()
        emit(event="deliver", **{"from": ID(msg.from_id).to_base58()}, seqno=msg.seqno.hex(),
             data=msg.data.decode(errors="replace"))


async def commands(pubsub: Pubsub, router: GossipSub, topic: str) -> None:
    stdin = trio.wrap_file(sys.stdin)
    async for line in stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "publish":
            await pubsub.publish(topic, cmd["data"].encode())
            emit(event="published")
        elif cmd["cmd"] == "mesh":
            emit(event="mesh", peers=sorted(p.to_base58() for p in router.mesh.get(topic, ())))
        elif cmd["cmd"] == "leave":
            await pubsub.unsubscribe(topic)
            emit(event="left")
        elif cmd["cmd"] == "stop":
            return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--security", choices=("noise", "plaintext"), default="noise")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--dial", action="append", default=[])
    parser.add_argument("--degree", type=int, default=2)
    parser.add_argument("--degree-low", type=int, default=1)
    parser.add_argument("--degree-high", type=int, default=3)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--strict-signing", action="store_true")
    trio.run(main, parser.parse_args())
