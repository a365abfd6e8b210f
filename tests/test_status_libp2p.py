"""`testbed status NAME --json` tells a libp2p host how to reach every node:
name, peer id (the test-plans identity of its index) and a multiaddr whose
address answers with that peer id. Process backend, through the console
script."""

from __future__ import annotations

import json
import socket

import pytest

from node.codec import FrameDecoder
from node.identity import identity_for_index
from node.runtime.handshake import Hello, parse_hello
from test_cli_lifecycle import env, experiment, tb  # noqa: F401 - env is a fixture
from test_node_runtime import RAW_PEER_ID


def hello_at(host: str, port: int) -> str:
    """The peer id a node announces on its listening address (we dial, so we
    say hello first)."""
    decoder = FrameDecoder()
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(Hello("probe", RAW_PEER_ID, ("/meshsub/1.0.0",)).encode())
        while True:
            frames = list(decoder.feed(sock.recv(4096)))
            if frames:
                return parse_hello(frames[0]).peer_id


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
            assert hello_at(host, int(port)) == node["peer_id"]
        topology = json.loads((run / "topology.json").read_text())
        assert [(n["name"], n["peer_id"]) for n in topology["nodes"]] == [
            (n["name"], n["peer_id"]) for n in status["nodes"]
        ]
    finally:
        tb(env, "down", "ids")
