"""episub on the trio runtime over real TCP (a few in-process nodes on
127.0.0.1): the nodes negotiate /episub/1.0.0 and carry episub frames,
dial the peers their views choose beyond their initial ones, deliver every
message, repair the tree when a node of it dies, and a dial on send that
fails reaches the engine."""

from __future__ import annotations

from pathlib import Path

import trio

from node.config import NodeConfig, PeerAddress
from node.engine.api import Output, TraceType
from node.wire.episub import EPISUB_ID, EpisubRpc, GetTopics
from node.libp2p.identity import identity_for_index
from node.runtime.daemon import Node
from node.trace.file import read_trace
from tests.test_node_runtime import TOKEN, ctl, running, wait_for
from tests.ports import free_ports

NAMES = [f"e{i}" for i in range(5)]
INDEX = {name: 40 + i for i, name in enumerate(NAMES)}
PARAMS = {"N": 5, "C_near": 1, "stabilization_interval": 0.3, "passive_check_interval": 1.0}


def pid(name: str) -> str:
    return identity_for_index(INDEX[name]).peer_id_b58


def episub_cfgs(tmp: Path, book_extra: tuple[PeerAddress, ...] = ()) -> list[NodeConfig]:
    """A line of contacts e0-e1-e2-e3-e4: each node dials only its left
    neighbour; the address book knows everyone."""
    ports = dict(zip(NAMES, free_ports(len(NAMES))))
    book = tuple(PeerAddress(n, "127.0.0.1", ports[n], pid(n)) for n in NAMES) + book_extra
    return [
        NodeConfig(
            name=name, index=INDEX[name], router="episub", seed=7 + i, listen_host="127.0.0.1",
            listen_port=ports[name], control_host="127.0.0.1", control_port=0, token=TOKEN,
            trace_path=str(tmp / f"{name}.pb"), topics=("t",), params=PARAMS,
            initial_peers=(PeerAddress(NAMES[i - 1], "127.0.0.1", ports[NAMES[i - 1]], pid(NAMES[i - 1])),) if i else (),
            peer_names={pid(n): n for n in NAMES}, address_book=tuple(p for p in book if p.name != name),
        )
        for i, name in enumerate(NAMES)
    ]


def eager(node: Node) -> set[bytes]:
    return set(node.engine.overlays["t"].broadcast.eager)  # type: ignore[attr-defined]


def active(node: Node) -> set[bytes]:
    return set(node.engine.overlays["t"].membership.active)  # type: ignore[attr-defined]


async def joined(nodes: list[Node]) -> None:
    """Every node has active links (the overlay formed)."""
    await wait_for(lambda: all(active(n) for n in nodes), timeout=10)


def test_episub_nodes_speak_episub_dial_beyond_their_contacts_and_deliver(tmp_path):
    async def main():
        async with running(*episub_cfgs(tmp_path)) as nodes:
            first, last = nodes[0], nodes[-1]
            # the views reach past the line of contacts: someone dialled a peer it was not given
            await wait_for(lambda: any(len(n.links) > 2 for n in nodes), timeout=10)
            await joined(nodes)
            st = await ctl(first, "status")
            assert st["protocol"] == EPISUB_ID and st["router"] == "episub"
            ready = [link for n in nodes for link in n.links.values() if link.ready.is_set()]
            assert ready and all(link.protocol == EPISUB_ID for link in ready)
            for seq in range(3):
                assert (await ctl(first if seq % 2 == 0 else last, "publish", topic="t", size=200, seq=seq))["ok"]
                await wait_for(lambda: all(n.counters["delivered"] == seq + 1 for n in nodes), timeout=5)
        traces = {n.name: list(read_trace(Path(n.cfg.trace_path))) for n in nodes}
        sent = [ev for evs in traces.values() for ev in evs if ev.type == TraceType.SEND_RPC]
        assert any(ev.sendRPC.meta.messages for ev in sent)  # GOSSIP frames went over the wire and were traced
        assert not any(ev.type == TraceType.DROP_RPC for evs in traces.values() for ev in evs)

    trio.run(main)


def test_a_killed_tree_node_has_its_subtree_repaired_over_tcp(tmp_path):
    """The victim is killed, not shut down: its task is cancelled, so its
    connections end without LEAVE or GoAway."""
    async def main():
        scopes: dict[str, trio.CancelScope] = {}

        async def run(node: Node, task_status=trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scopes[node.name]:
                await node.run(handle_signals=False, task_status=task_status)

        async with trio.open_nursery() as nursery:
            nodes = [Node(cfg) for cfg in episub_cfgs(tmp_path)]
            for node in nodes:
                await nursery.start(run, node)
            src = nodes[0]
            await joined(nodes)
            await ctl(src, "publish", topic="t", size=100, seq=0)
            await wait_for(lambda: all(n.counters["delivered"] == 1 for n in nodes), timeout=10)
            victim = next(n for n in nodes[1:] if n.peer_id in eager(src))  # an inner node of the source's tree
            scopes[victim.name].cancel()
            alive = [n for n in nodes if n is not victim]
            # repaired: every survivor's active view is back to live neighbours (a message published
            # before that can miss a node whose every link changed: IHAVE goes only to links that exist)
            await wait_for(lambda: all(victim.peer_id not in n.links and active(n) and victim.peer_id not in active(n)
                                       for n in alive), timeout=10)
            for seq in range(1, 4):
                await ctl(src, "publish", topic="t", size=100, seq=seq)
                await wait_for(lambda: all(n.counters["delivered"] == seq + 1 for n in alive), timeout=5)
            assert all(victim.peer_id not in eager(n) for n in alive)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_failed_dial_on_send_drops_what_waited_and_reaches_the_engine(tmp_path):
    ghost = PeerAddress("ghost", "127.0.0.1", free_ports(1)[0], identity_for_index(90).peer_id_b58)
    cfg = episub_cfgs(tmp_path, (ghost,))[0]
    ghost_id = identity_for_index(90).peer_id
    nobody = identity_for_index(91).peer_id  # in no address book

    async def main():
        async with running(cfg) as (node,):
            removed: list[bytes] = []
            engine_remove = node.engine.remove_peer

            def remove_peer(now: int, peer: bytes) -> Output:
                removed.append(peer)
                return engine_remove(now, peer)

            node.engine.remove_peer = remove_peer  # type: ignore[method-assign]
            now = node.clock.now_ns()
            node._apply(Output(sends=((ghost_id, EpisubRpc((GetTopics(),))), (nobody, EpisubRpc((GetTopics(),))))),
                        now)
            await wait_for(lambda: len(removed) == 2, timeout=10)
            assert sorted(removed) == sorted([ghost_id, nobody])
            assert node.counters["dials_failed"] == 2 and node.counters["dropped"] == 2
        dropped = [ev.dropRPC.sendTo for ev in read_trace(Path(cfg.trace_path)) if ev.type == TraceType.DROP_RPC]
        assert sorted(dropped) == sorted([ghost_id, nobody])

    trio.run(main)
