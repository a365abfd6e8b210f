"""`testbed status NAME --json` tells a libp2p host how to reach every node:
name, peer id (the test-plans identity of its index) and a multiaddr whose
address answers a libp2p (noise) dial with that peer id. Process backend, through the console
script."""

from __future__ import annotations

import json

import pytest
import trio

from node.libp2p.identity import identity_for_index, peer_id_from_b58, peer_id_to_b58
from node.libp2p.connection import upgrade
from test_cli_lifecycle import env, experiment, tb  # noqa: F401 - env is a fixture


def dial(host: str, port: int, peer_id: str) -> str:
    """Dial a multiaddr's address as an outside libp2p host (noise), expecting
    its peer id: the peer id the node proved in the handshake."""

    async def main() -> str:
        stream = await trio.open_tcp_stream(host, port)
        with trio.fail_after(10):
            conn = await upgrade(stream, identity_for_index(12345), "noise", dialing=True,
                                 expect=peer_id_from_b58(peer_id))
        await stream.aclose()
        return peer_id_to_b58(conn.peer_id)

    return trio.run(main)


@pytest.mark.slow
def test_status_json_lists_peer_ids_and_dialable_multiaddrs(env, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    tb(env, "up", str(experiment(tmp_path, count=3)), "--name", "ids", "--backend", "process", "--out", str(run))
    try:
        status = json.loads(tb(env, "status", "ids", "--json").stdout)
        for index, node in enumerate(status["nodes"]):
            assert node["name"] == f"n{index}"
            assert node["peer_id"] == identity_for_index(index).peer_id_b58
            (addr,) = node["multiaddrs"]
            _, ip4, host, tcp, port, p2p, peer_id = addr.split("/")
            assert (ip4, tcp, p2p, peer_id) == ("ip4", "tcp", "p2p", node["peer_id"])
            assert dial(host, int(port), node["peer_id"]) == node["peer_id"]
        topology = json.loads((run / "topology.json").read_text())
        assert [(n["name"], n["peer_id"]) for n in topology["nodes"]] == [
            (n["name"], n["peer_id"]) for n in status["nodes"]
        ]
    finally:
        tb(env, "down", "ids")
