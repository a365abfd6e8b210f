"""gossipsub v1.2 across implementations on docker: 4 of our gossipsub-v1.2
routers and 4 rust-libp2p adapters (rust-libp2p's gossipsub, libp2p 0.57),
full overlay, 8 KiB messages (above the 1 KiB IDONTWANT threshold), every
node scoring with positive P1/P2 weights and a 6 s PRUNE backoff given to
both kinds in the specs' names (docs/gossipsub-v1.1.md, "Foreign routers").
Our routers want more mesh peers (D 5) than their own group holds and the
rust nodes fewer (D 2, D_high 3), so each side PRUNEs the other.

Checked from the traces of both sides:
- IDONTWANT crosses both ways, seen by both ends: our traces have RPCs sent
  to and received from the rust nodes with IDONTWANT in their meta (go's
  ControlMeta field 5); the rust nodes' traces (the adapter's tap reads the
  RPCs rust-libp2p logs at debug level) have the same, and every id a rust
  node says it sent one of ours, that router of ours says it received from
  it, and the other way round;
- each side scores the other: our routers' scores/<node>.csv (the
  publishing rust nodes earn P2, a positive score) and the rust nodes'
  (rust-libp2p's `peer_score`, once per heartbeat: the publishing routers of
  ours score positive there too);
- PRUNE backoff holds both ways: after a PRUNE from one side, no GRAFT from
  the pruned side within the backoff (our traces, RPC by RPC), and no rust
  node re-adds a pruned peer to its mesh within it (the rust nodes' traces,
  from its mesh events).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from node.libp2p.identity import identity_for_index
from node.trace.file import read_trace
from node.trace.vocab import TraceType
from orchestrator.images.rust import toolchain_problem
from tests.docker_fixtures import *  # noqa: F403
from tests.docker_fixtures import needs_docker, run_file_on_docker

NO_CARGO = toolchain_problem()
BACKOFF_S = 6.0
SLACK_NS = 100_000_000  # container clocks are the host's; RPCs take 10 ms each way

EXPERIMENT = f"""\
name: interop-rust-v12
seed: 7
groups:
  - name: ours
    count: 4
    router: gossipsub-v1.2
    router_params: &ours {{D: 5, D_low: 4, D_high: 6, D_out: 1, D_score: 2, heartbeat_interval: 0.5,
                          PruneBackoff: {BACKOFF_S}, TopicWeight: 1, TimeInMeshWeight: 0.1, TimeInMeshCap: 10,
                          FirstMessageDeliveriesWeight: 1, FirstMessageDeliveriesDecay: 0.9,
                          FirstMessageDeliveriesCap: 50}}
  - name: rust
    count: 4
    router: rust-libp2p
    router_params: {{<<: *ours, D: 2, D_low: 1, D_high: 3, D_out: 0, D_score: 1}}
overlay: {{type: full}}
links: {{latency: 10}}
workload: {{messages: 12, interval: 0.5s, start: 2s, size: 8192, publishers: {{nodes: [ours-0, rust-0, ours-2, rust-2]}}}}
linger: 3s
"""
OURS = [f"ours-{i}" for i in range(4)]
RUST = [f"rust-{i}" for i in range(4)]


@pytest.fixture(scope="module")
def run_dir(node_image, tmp_path_factory) -> Path:
    if NO_CARGO is not None:
        pytest.skip(NO_CARGO)
    tmp = tmp_path_factory.mktemp("interop-rust-v12")
    path = tmp / "interop.yaml"
    path.write_text(EXPERIMENT)
    return run_file_on_docker(path, tmp, "--no-report")


def _ids() -> dict[bytes, str]:
    """Peer id -> node name (node index = position in the file)."""
    return {identity_for_index(i).peer_id: n for i, n in enumerate(OURS + RUST)}


def _rpcs(run_dir: Path, node: str):
    """(time, "send"/"recv", peer name, control meta) for each RPC in `node`'s trace."""
    names = _ids()
    for ev in read_trace(run_dir / "traces" / f"{node}.pb"):
        if ev.type not in (TraceType.SEND_RPC, TraceType.RECV_RPC):
            continue
        send = ev.type == TraceType.SEND_RPC
        rpc = ev.sendRPC if send else ev.recvRPC
        yield ev.timestamp, "send" if send else "recv", names.get(rpc.sendTo if send else rpc.receivedFrom, "?"), \
            rpc.meta.control


def _control(run_dir: Path, node: str) -> list[tuple[int, str, str, str]]:
    """(time, "send"/"recv", peer name, kind) for every GRAFT, PRUNE and
    IDONTWANT in `node`'s RPCs."""
    return [(t, direction, peer, kind) for t, direction, peer, control in _rpcs(run_dir, node)
            for kind in ("graft", "prune", "idontwant") if len(getattr(control, kind))]


@needs_docker
@pytest.mark.docker
def test_idontwant_crosses_both_ways(run_dir):
    ways = {(d, k) for n in OURS for _, d, peer, k in _control(run_dir, n) if peer in RUST}
    assert {("send", "idontwant"), ("recv", "idontwant")} <= ways, ways


def _idontwant_ids(run_dir: Path, node: str) -> set[tuple[str, str, str, bytes]]:
    """(direction, this node, the peer, message id) for every IDONTWANT id in
    `node`'s traced RPCs."""
    return {(direction, node, peer, mid) for _, direction, peer, control in _rpcs(run_dir, node)
            for idontwant in control.idontwant for mid in idontwant.messageIDs}


@needs_docker
@pytest.mark.docker
def test_both_ends_trace_the_same_idontwants(run_dir):
    """The rust nodes' own traces show IDONTWANT both ways, and what one end
    says it sent the other end says it received: the ids of each (sender,
    receiver) pair agree. A receiver may miss a few sent just before the
    teardown, none more."""
    ours = set().union(*(_idontwant_ids(run_dir, n) for n in OURS))
    rust = set().union(*(_idontwant_ids(run_dir, n) for n in RUST))
    rust_ways = {d for d, _, peer, _ in rust if peer in OURS}
    assert rust_ways == {"send", "recv"}, rust_ways

    def sent(ids, sender_side):
        return {(me, peer, mid) for d, me, peer, mid in ids if d == "send" and peer not in sender_side}

    def received(ids):
        return {(peer, me, mid) for d, me, peer, mid in ids if d == "recv"}

    rust_to_ours, ours_got = sent(rust, RUST), {k for k in received(ours) if k[0] in RUST}
    ours_to_rust, rust_got = sent(ours, OURS), {k for k in received(rust) if k[0] in OURS}
    assert rust_to_ours and ours_to_rust
    assert ours_got <= rust_to_ours and rust_got <= ours_to_rust  # nothing received that was not sent
    assert len(ours_got) >= 0.95 * len(rust_to_ours), (len(ours_got), len(rust_to_ours))
    assert len(rust_got) >= 0.95 * len(ours_to_rust), (len(rust_got), len(ours_to_rust))


def _score_rows(run_dir: Path, nodes: list[str], peers: dict[str, str]) -> list[tuple[str, str, float]]:
    """(scoring node, scored peer's name, score) for the rows of `nodes`'
    score files about `peers` (base58 -> name)."""
    rows = []
    for node in nodes:
        with (run_dir / "scores" / f"{node}.csv").open() as f:
            rows += [(node, peers[r["peer"]], float(r["score"])) for r in csv.DictReader(f) if r["peer"] in peers]
    return rows


@needs_docker
@pytest.mark.docker
def test_the_rust_nodes_score_our_routers(run_dir):
    """rust-libp2p's own scores, from its adapter's "Peer Scores" lines:
    every router of ours is scored, and the two that publish earn first
    deliveries, so a positive score, at some rust node."""
    ours_b58 = {identity_for_index(i).peer_id_b58: n for i, n in enumerate(OURS)}
    rows = _score_rows(run_dir, RUST, ours_b58)
    assert {peer for _, peer, _ in rows} == set(OURS)
    assert {peer for _, peer, score in rows if score > 0} >= {"ours-0", "ours-2"}


@needs_docker
@pytest.mark.docker
def test_our_routers_score_the_rust_nodes(run_dir):
    """Every rust node is scored; the two that publish earn first deliveries
    (P2), so a positive score, at some router of ours."""
    rust_b58 = {identity_for_index(4 + i).peer_id_b58: n for i, n in enumerate(RUST)}
    rows = []
    for node in OURS:
        with (run_dir / "scores" / f"{node}.csv").open() as f:
            rows += [row for row in csv.DictReader(f) if row["peer"] in rust_b58]
    assert {rust_b58[r["peer"]] for r in rows} == set(RUST)
    assert {rust_b58[r["peer"]] for r in rows if float(r["p2"]) > 0 and float(r["score"]) > 0} >= {"rust-0", "rust-2"}


def _grafts_within_backoff(events: list[tuple[int, str, str]]) -> list[tuple[int, int, str]]:
    """events: (time, who, what) with who the side acting ("us"/"them") and
    what "graft"/"prune"; every GRAFT by one side within the backoff of a
    PRUNE by the other."""
    bad, pruned_at = [], {}
    for t, who, what in sorted(events):
        if what == "prune":
            pruned_at[who] = t
        elif (other := "them" if who == "us" else "us") in pruned_at:
            if t - pruned_at[other] < BACKOFF_S * 1e9 - SLACK_NS:
                bad.append((pruned_at[other], t, who))
    return bad


@needs_docker
@pytest.mark.docker
def test_prune_backoff_is_respected_both_ways(run_dir):
    prunes, bad = set(), []
    for node in OURS:
        pairs: dict[str, list[tuple[int, str, str]]] = {}
        for t, direction, peer, kind in _control(run_dir, node):
            if peer in RUST and kind in ("graft", "prune"):
                pairs.setdefault(peer, []).append((t, "us" if direction == "send" else "them", kind))
                if kind == "prune":
                    prunes.add(direction)
        bad += [(node, peer, *b) for peer, evs in pairs.items() for b in _grafts_within_backoff(evs)]
    assert prunes == {"send", "recv"}, prunes  # PRUNEs went both ways, so the check below says something
    assert not bad, bad
    # the rust side: no rust node re-adds a peer to its mesh within the backoff of removing it
    names = _ids()
    for node in RUST:
        left: dict[str, int] = {}
        for ev in read_trace(run_dir / "traces" / f"{node}.pb"):
            if ev.type == TraceType.PRUNE:
                left[names.get(ev.prune.peerID, "?")] = ev.timestamp
            elif ev.type == TraceType.GRAFT and (peer := names.get(ev.graft.peerID, "?")) in left:
                assert ev.timestamp - left[peer] >= BACKOFF_S * 1e9 - SLACK_NS, (node, peer)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "left_early" not in manifest, manifest
