"""Our router under libp2p test-plans' gossipsub-interop node contract:
`python -m node.interop.contract --params FILE [--config FILE]` (also `testbed node
--contract FILE`), so it can run as a bare `{image, contract}` node in our
testbed and join test-plans' own runs.

The contract: the node's index N comes from the hostname `nodeN`, its key
from N (node/libp2p/identity.py), it listens on TCP 9000, runs the params file's
script (initGossipSub in go's names, node/interop/go_params.py; connect N dials
nodeN:9000 expecting N's peer id; subscribeToTopic; publish with data =
workload_data(messageID, size), whose first 8 bytes are the message id;
waitUntil counts whole seconds from the node's start; ifNodeIDEquals),
runs unsigned (no signature, author or seqno, as test-plans' nodes do) and
prints NDJSON on stdout: a "PeerID" line at start and a "Received Message"
line for every copy received, duplicates included.

Beside those, it prints the extension lines our converter understands
(node/trace/interop.py): everything our engine traces, since the lines are
made from its trace events. With `--config` (our testbed extensions) the
NodeConfig gives the index, listen and control addresses, token and peer
names, and a connect to N dials the initial peer with N's peer id; the
control endpoint is served as for our daemon.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import trio

from node.config import NodeConfig
from node.engine.api import TraceEvent
from node.engine.authenticity import ANONYMOUS
from node.engine.registry import ROUTERS
from node.interop.go_params import from_go
from node.libp2p.identity import identity_for_index, peer_id_to_b58
from node.trace.file import TraceWriter
from node.trace.vocab import TraceType
from node.wire.rpc import FIRST_8_BYTES, rpc_size, workload_data

CONTRACT_PORT = 9000
ROUTER = "gossipsub"
HOST_RE = re.compile(r"^node(\d+)$")


def rfc3339(t_ns: int) -> str:
    seconds, ns = divmod(t_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


def _mid(message_id: bytes) -> str:
    return str(int.from_bytes(message_id[:8], "big"))


class NdjsonTrace(TraceWriter):
    """Trace events as the contract's stdout lines (and our extensions)
    instead of a trace file."""

    def __init__(self, out: TextIO, self_id: bytes) -> None:
        super().__init__(Path("/dev/null"), self_id)
        self.out = out

    def line(self, t_ns: int, msg: str, **fields: Any) -> None:
        self.out.write(json.dumps({"time": rfc3339(t_ns), "msg": msg, **fields}) + "\n")

    def write(self, events: tuple[TraceEvent, ...] | list[TraceEvent]) -> None:
        for ev in events:
            self.event(ev)
        self.events_written += len(events)
        self.out.flush()

    def event(self, ev: TraceEvent) -> None:
        t, kind = ev.timestamp, ev.type
        peer = peer_id_to_b58(ev.peer) if ev.peer else ""
        if kind in (TraceType.DELIVER_MESSAGE, TraceType.DUPLICATE_MESSAGE):
            if ev.peer != self.self_id:  # go's DELIVER from itself follows its publish
                self.line(t, "Received Message", id=_mid(ev.message_id), **{"from": peer}, topic=ev.topic)
        elif kind == TraceType.PUBLISH_MESSAGE:
            self.line(t, "Published Message", id=_mid(ev.message_id), topic=ev.topic)
        elif kind in (TraceType.JOIN, TraceType.LEAVE):
            self.line(t, "Joined" if kind == TraceType.JOIN else "Left", topic=ev.topic)
        elif kind == TraceType.ADD_PEER:
            self.line(t, "Peer Added", peer=peer, protocol=ev.protocol)
        elif kind == TraceType.REMOVE_PEER:
            self.line(t, "Peer Removed", peer=peer)
        elif kind in (TraceType.GRAFT, TraceType.PRUNE):
            self.line(t, "Graft" if kind == TraceType.GRAFT else "Prune", peer=peer, topic=ev.topic)
        elif kind in (TraceType.SEND_RPC, TraceType.RECV_RPC) and ev.rpc is not None:
            control = ev.rpc.control
            ids = [_mid(m) for d in (control.idontwant if control else ()) for m in d.message_ids]
            self.line(t, "RPC Sent" if kind == TraceType.SEND_RPC else "RPC Received", peer=peer,
                      size=rpc_size(ev.rpc), **({"idontwant": ids} if ids else {}))


def hostname_index(hostname: str) -> int:
    m = HOST_RE.match(hostname)
    if m is None:
        raise ValueError(f"the hostname must be nodeN (N the node's index), got {hostname!r}; or give --config")
    return int(m[1])


def contract_config(index: int) -> NodeConfig:
    """The contract's node: listens on 0.0.0.0:9000, publishes unsigned and
    without author and accepts only such messages (test-plans' nodes:
    go's StrictNoSign + WithNoAuthor), ids from the first 8 bytes; its
    control endpoint is local and unreachable (random token)."""
    return NodeConfig(
        name=f"node{index}", router=ROUTER, seed=index, listen_host="0.0.0.0", listen_port=CONTRACT_PORT,
        control_host="127.0.0.1", control_port=0, token=secrets.token_hex(16), trace_path="/dev/null",
        index=index, authenticity=ANONYMOUS, message_id=FIRST_8_BYTES,
    )


def gossipsub_params(script: list[dict[str, Any]]) -> dict[str, Any]:
    for instr in script:
        if instr.get("type") == "initGossipSub":
            return from_go(instr.get("gossipSubParams") or {})
    return {}


class ScriptRunner:
    """Runs the script's instructions on a started Node."""

    def __init__(self, node: Any, cfg: NodeConfig, started: float, addresses: Callable[[int], tuple[str, int]]) -> None:
        self.node, self.cfg, self.started, self.addresses = node, cfg, started, addresses

    async def run(self, script: list[dict[str, Any]]) -> None:
        for instr in script:
            await self.one(instr)

    async def one(self, instr: dict[str, Any]) -> None:
        kind = instr.get("type")
        if kind == "connect":
            for n in instr["connectTo"]:
                host, port = self.addresses(int(n))
                self.node.keep_connected(host, port, identity_for_index(int(n)).peer_id)
        elif kind == "subscribeToTopic":
            self.node.subscribe(instr["topicID"])
        elif kind == "publish":
            self.node.publish(instr["topicID"], workload_data(int(instr["messageID"]), int(instr["messageSizeBytes"])))
        elif kind == "waitUntil":
            await trio.sleep_until(self.started + float(instr["elapsedSeconds"]))
        elif kind == "ifNodeIDEquals":
            if int(instr["nodeID"]) == self.cfg.index:
                await self.one(instr["instruction"])
        elif kind != "initGossipSub":
            logging.getLogger("node").warning("ignoring unknown instruction %r", kind)


def address_book(cfg: NodeConfig, configured: bool) -> Callable[[int], tuple[str, int]]:
    """connect N -> (host, port): with --config the initial peer with N's peer
    id, else (and as a fall-back) DNS nodeN:9000."""
    by_peer_id = {p.peer_id: (p.host, p.port) for p in cfg.initial_peers} if configured else {}

    def lookup(index: int) -> tuple[str, int]:
        return by_peer_id.get(identity_for_index(index).peer_id_b58, (f"node{index}", CONTRACT_PORT))

    return lookup


async def serve(cfg: NodeConfig, script: list[dict[str, Any]], configured: bool, out: TextIO) -> str:
    """Until the script and the node end; why the node's trace (our stdout)
    could not be written, or ""."""
    from node.runtime.daemon import Node  # noqa: PLC0415 - trio runtime only when running

    started = trio.current_time()
    trace = NdjsonTrace(out, cfg.peer_id)
    node = Node(replace(cfg, initial_peers=(), topics=()), trace=trace)
    trace.line(time.time_ns(), "PeerID", id=cfg.identity.peer_id_b58, node_id=cfg.index)
    runner = ScriptRunner(node, cfg, started, address_book(cfg, configured))

    async def life(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await node.run(task_status=task_status)
        nursery.cancel_scope.cancel()  # shut down: the script stops too

    async with trio.open_nursery() as nursery:
        await nursery.start(life)
        await runner.run(script)
    return node.trace_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.interop.contract",
                                     description="Run our router under the gossipsub-interop node contract.")
    parser.add_argument("--params", required=True, type=Path, help='the script: JSON {"script": [...]}')
    parser.add_argument("--config", type=Path, help="our NodeConfig (testbed extensions: index, addresses, control)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        script = json.loads(args.params.read_text())["script"]
        if not isinstance(script, list):
            raise ValueError("'script' is not a list")
        if args.config is not None:
            cfg = NodeConfig.load(args.config)
        else:
            cfg = contract_config(hostname_index(socket.gethostname()))
        lag = cfg.lag_path if args.config is not None else str(Path(tempfile.gettempdir()) / "interop-lag.json")
        cfg = replace(cfg, router=ROUTER, params=gossipsub_params(script), trace_path="/dev/null", lag_path=lag)
        ROUTERS[ROUTER].make_params(cfg.params)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        failed = trio.run(serve, cfg, script, args.config is not None, sys.stdout)
    except OSError as exc:
        print(f"error: {cfg.name}: {exc}", file=sys.stderr)
        return 1
    return 1 if failed else 0  # the node logged why


if __name__ == "__main__":
    sys.exit(main())
