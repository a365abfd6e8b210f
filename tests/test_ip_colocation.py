"""P6, IP colocation, from the address each runtime gives the engine with
the peer: the engine's score of colocated peers (with and without a weight,
whitelisted), the simulator's packed identities (`identities_per_host`)
sharing an address and showing in scores/<node>.csv, the real backends'
refusal of packed files, and the daemon's view of a peer's address."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from engine_harness import lone
from node.engine.adversary import Censor, Sybil
from node.engine.api import MESHSUB_V11_ID, NS
from node.engine.peer_score import PeerScore
from node.libp2p.identity import identity_for_index
from node.runtime.addresses import source_address
from node.trace.scores import COLUMNS
from orchestrator.errors import InputError
from orchestrator.experiment.links import LOOPBACK
from orchestrator.experiment.spec import parse_experiment
from orchestrator.backends.docker import own_bridge
from orchestrator.backends.docker import wiring as docker_wiring
from orchestrator.backends.registry import backend_class
from orchestrator.dockerapi.names import LABEL_TESTBED
from orchestrator.routers.colocation import MAX_PER_HOST, check_packing
from orchestrator.shaping.split import ShapingCapabilities, shape_in_kernel
from orchestrator.sim.node import host_addresses
from docker_fixtures import needs_docker, unique_testbed
from spark_fixtures import requires_java
from test_simulator import simulate
from trace_census import b58decode, read_records, trace_module

V11 = "gossipsub-v1.1"
TESTBED = Path(sys.executable).with_name("testbed")
# Three peers behind 10.0.0.9, two alone: threshold 1, so each colocated
# peer's P6 is (3 - 1)^2 = 4, times the weight.
PEERS = {b"c0": "10.0.0.9", b"c1": "10.0.0.9", b"c2": "10.0.0.9", b"a0": "10.0.0.1", b"a1": "10.0.0.2"}


def scores(params: dict, wrap=None, whitelist: tuple[str, ...] = ()) -> dict[bytes, float]:
    r = lone(V11, params)
    if whitelist:  # the engine's input, not an experiment parameter (docs/gossipsub-v1.1.md)
        r.score = PeerScore(replace(r.score.params, IPColocationFactorWhitelist=whitelist))
    engine = wrap(r) if wrap else r
    for peer, ip in PEERS.items():
        engine.add_peer(0, peer, MESHSUB_V11_ID, address=ip)
    return {peer: r.score.score(peer) for peer in PEERS}


def test_colocated_peers_score_the_weight_times_the_square_of_the_surplus():
    got = scores({"IPColocationFactorWeight": -2.0, "IPColocationFactorThreshold": 1})
    assert got == {b"c0": -8.0, b"c1": -8.0, b"c2": -8.0, b"a0": 0.0, b"a1": 0.0}


def test_without_a_weight_colocation_costs_nothing():
    assert set(scores({"IPColocationFactorThreshold": 1}).values()) == {0.0}


def test_whitelisted_networks_are_not_counted():
    got = scores({"IPColocationFactorWeight": -2.0, "IPColocationFactorThreshold": 1}, whitelist=("10.0.0.0/24",))
    assert set(got.values()) == {0.0}


def test_a_threshold_at_the_count_spares_them():
    assert set(scores({"IPColocationFactorWeight": -2.0, "IPColocationFactorThreshold": 3}).values()) == {0.0}


def test_a_sybil_hands_the_address_to_its_engine():
    got = scores({"IPColocationFactorWeight": -2.0, "IPColocationFactorThreshold": 1},
                 wrap=lambda r: Sybil(r, (Censor(),), random.Random(0)))
    assert got[b"c0"] == -8.0 and got[b"a0"] == 0.0


def test_a_colocated_peer_counts_until_its_retained_score_expires():
    """As go's: a peer that left with a negative score is retained, and
    its address with it, for RetainScore; then the others' surplus drops."""
    r = lone(V11, {"IPColocationFactorWeight": -2.0, "IPColocationFactorThreshold": 1, "RetainScore": 10.0})
    for peer, ip in PEERS.items():
        r.add_peer(0, peer, MESHSUB_V11_ID, address=ip)
    r.remove_peer(0, b"c2")
    r.score.refresh(9 * NS)
    assert r.score.score(b"c0") == -8.0
    r.score.refresh(11 * NS)
    assert r.score.score(b"c0") == -2.0


PACKED = """
name: packed
seed: 3
groups:
  - {{name: honest, prefix: h, count: 4, router: gossipsub-v1.1, topics: [t],
     router_params: {{IPColocationFactorWeight: {weight}, IPColocationFactorThreshold: 1}}}}
  - {{name: sybils, prefix: s, count: 6, router: gossipsub-v1.1, topics: [t], identities_per_host: 3,
     adversary: {{censor: true}}}}
overlay: {{type: full}}
links: {{latency: {{model: constant, ms: 10}}}}
workload: {{topic: t, messages: 3, interval: 1s, size: 100, publishers: {{nodes: [h0]}}}}
duration: 5s
linger: 1s
"""


def test_packed_identities_share_their_hosts_address():
    resolved = parse_experiment(PACKED.format(weight=-3.0), "packed.yaml").resolve(None)
    hosts = {n.name: n.host_name for n in resolved.nodes}
    assert [hosts[f"s{i}"] for i in range(6)] == ["s0", "s0", "s0", "s3", "s3", "s3"]
    address = host_addresses(resolved)
    assert len(set(address.values())) == 4 + 2
    assert address["s0"] != address["s3"]


def p6_rows(run, resolved) -> dict[str, dict[str, set[float]]]:
    name_of = {identity_for_index(i).peer_id_b58: n.name for i, n in enumerate(resolved.nodes)}
    out: dict[str, dict[str, set[float]]] = defaultdict(lambda: defaultdict(set))
    for node in ("h0", "h1", "h2", "h3"):
        with open(run / "scores" / f"{node}.csv") as f:
            for row in list(csv.DictReader(f, fieldnames=COLUMNS))[1:]:
                out[node][name_of[row["peer"]]].add(float(row["p6"]))
    return out


def test_p6_of_packed_sybils_is_in_the_honest_score_files(tmp_path):
    """Each honest node is connected to all six sybils, three per host:
    P6 = -3 * (3 - 1)^2 = -12 for every sybil in every row, 0 for the
    honest peers, each on its own host."""
    resolved, _ = simulate(PACKED.format(weight=-3.0), tmp_path / "run")
    for node, by_peer in p6_rows(tmp_path / "run", resolved).items():
        assert {p: v for p, v in by_peer.items() if p.startswith("s")} == {f"s{i}": {-12.0} for i in range(6)}, node
        assert {v for p, vs in by_peer.items() if p.startswith("h") for v in vs} == {0.0}, node


def assert_p6_recounted(run: Path) -> int:
    """An independent count (tests/trace_census.py's own decoding of the
    traces): each honest node's ADD_PEER/REMOVE_PEER records give whom it
    was connected to at each score row; topology.json's `host` groups them;
    P6 = weight * (peers on the host - threshold)^2. Returns the rows checked."""
    nodes = json.loads((run / "topology.json").read_text())["nodes"]
    name_of = {n["peer_id"]: n["name"] for n in nodes}
    by_raw = {b58decode(n["peer_id"]): n["name"] for n in nodes}
    host_of = {n["name"]: n.get("host", n["name"]) for n in nodes}
    assert host_of["s4"] == "s3" and host_of["h2"] == "h2"
    add, remove = trace_module().TraceEvent.ADD_PEER, trace_module().TraceEvent.REMOVE_PEER
    checked = 0
    for node in ("h0", "h1", "h2", "h3"):
        changes = []
        for ev in read_records(run / "traces" / f"{node}.pb"):
            if ev.type in (add, remove):
                peer = ev.addPeer.peerID if ev.type == add else ev.removePeer.peerID
                changes.append((ev.timestamp, ev.type == add, by_raw[peer]))
        with open(run / "scores" / f"{node}.csv") as f:
            for row in list(csv.DictReader(f, fieldnames=COLUMNS))[1:]:
                at = int(row["time_ns"])
                connected = set()
                for ts, added, peer in changes:
                    if ts <= at:
                        (connected.add if added else connected.discard)(peer)
                peer = name_of[row["peer"]]
                on_host = sum(host_of[q] == host_of[peer] for q in connected)
                assert float(row["p6"]) == -3.0 * max(on_host - 1, 0) ** 2, (node, row)
                checked += 1
    return checked


def test_p6_recounted_from_the_traces(tmp_path):
    run = tmp_path / "run"
    simulate(PACKED.format(weight=-3.0), run)
    assert assert_p6_recounted(run) > 0


def test_a_file_without_packing_keeps_its_resolved_digest():
    text = PACKED.format(weight=-3.0).replace(", identities_per_host: 3", "")
    a = parse_experiment(text, "a.yaml").resolve(None)
    assert all(n.host is None for n in a.nodes)
    assert "host" not in repr(a.digest())


def test_what_the_real_backends_cannot_pack_is_refused():
    """The process and docker backends pack our routers; swarm, foreign
    routers, more than MAX_PER_HOST on a host and churn of a packed identity
    are refused, each naming the file and where."""
    packed = parse_experiment(PACKED.format(weight=-3.0), "packed.yaml").resolve(None)
    for backend in ("process", "docker"):
        check_packing(packed, backend_class(backend))
    with pytest.raises(InputError, match=r"packed.yaml: group 'sybils': identities_per_host: the swarm backend"):
        check_packing(packed, backend_class("swarm"))
    foreign = parse_experiment(PACKED.format(weight=-3.0).replace(
        "router: gossipsub-v1.1, topics: [t], identities_per_host", "router: rust-libp2p, topics: [t], identities_per_host"
    ).replace("\n     adversary: {censor: true}", ""), "foreign.yaml").resolve(None)
    with pytest.raises(InputError, match=r"foreign.yaml: group 'sybils': identities_per_host: router 'rust-libp2p'"):
        check_packing(foreign, backend_class("docker"))
    crowded = parse_experiment(PACKED.format(weight=-3.0).replace("count: 6", f"count: {MAX_PER_HOST + 1}").replace(
        "identities_per_host: 3", f"identities_per_host: {MAX_PER_HOST + 1}"), "crowded.yaml").resolve(None)
    with pytest.raises(InputError, match=rf"crowded.yaml: group 'sybils': identities_per_host: {MAX_PER_HOST + 1} "):
        check_packing(crowded, backend_class("process"))
    churned = parse_experiment(PACKED.format(weight=-3.0) + CHURN, "churned.yaml").resolve(None)
    with pytest.raises(InputError, match=r"churned.yaml: churn.timeline\[0\].*: kill of s4, an identity packed"):
        check_packing(churned, backend_class("process"))
    check_packing(parse_experiment(PACKED.format(weight=-3.0).replace(", identities_per_host: 3", "") + CHURN,
                                   "plain.yaml").resolve(None), backend_class("swarm"))


CHURN = """
churn:
  timeline:
    - {at: 2s, action: kill, select: [s4]}
"""


def test_testbed_run_of_a_churned_packed_file_exits_2_before_anything_starts(tmp_path):
    """The console script: one error naming the file, the entry and the
    node, exit 2, and no run directory."""
    path = tmp_path / "packed.yaml"
    path.write_text(PACKED.format(weight=-3.0) + CHURN)
    out = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([str(TESTBED), "run", str(path), "--backend", "process",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr
    err = " ".join(done.stderr.split())
    assert f"{path}: churn.timeline[0]" in err and "kill of s4" in err and "Traceback" not in err, err
    assert not out.exists()


def run_packed(tmp_path: Path, backend: str, testbed: str | None = None, **environ: str) -> Path:
    """PACKED (named `testbed`, if given) through the installed console
    script on a real backend; exit 0."""
    path = tmp_path / "packed.yaml"
    text = PACKED.format(weight=-3.0)
    path.write_text(text.replace("name: packed", f"name: {testbed}") if testbed else text)
    out = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state"), **environ}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([str(TESTBED), "run", str(path), "--backend", backend, "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=900, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


LISTENING = re.compile(r"listening on ([0-9.]+):(\d+), control on ([0-9.]+):(\d+)")


def assert_packed_addresses(run: Path) -> None:
    """Each host's identities listen on its one IP address, each on ports of
    its own: what every router logged when it started."""
    seen = {}
    for log in [*run.glob("node-logs/*.log"), *run.glob("nodes/*/node.log")]:
        if (found := LISTENING.search(log.read_text())) is not None:
            seen[log.stem if log.parent.name == "node-logs" else log.parent.name] = found.groups()
    assert set(seen) == {"h0", "h1", "h2", "h3", "s0", "s1", "s2", "s3", "s4", "s5"}, sorted(seen)
    for host, members in (("s0", ("s0", "s1", "s2")), ("s3", ("s3", "s4", "s5"))):
        assert {seen[m][0] for m in members} == {seen[m][2] for m in members} == {seen[host][0]}
        assert len({port for m in members for port in (seen[m][1], seen[m][3])}) == 6
    assert len({seen[n][0] for n in ("h0", "h1", "h2", "h3", "s0", "s3")}) == 6


@requires_java
@pytest.mark.slow
def test_packed_identities_on_the_process_backend_share_one_address(tmp_path):
    """Every honest node sees each host's three identities at one address:
    P6 in its score files is the traces' own count."""
    run = run_packed(tmp_path, "process")
    assert_packed_addresses(run)
    assert assert_p6_recounted(run) > 0


@needs_docker
@requires_java
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("network", docker_wiring.KINDS)
def test_packed_identities_on_docker_share_their_hosts_namespace(tmp_path, network):
    """On docker a host's identities are containers in its first one's
    network namespace: one IP, which P6 scores, and `down` leaves nothing,
    on either kind of testbed network."""
    import docker

    if network == docker_wiring.OWN_BRIDGE and (why := own_bridge.unavailable()):
        pytest.skip(why)
    testbed = unique_testbed("packed")
    run = run_packed(tmp_path, "docker", testbed, **{docker_wiring.ENV: network})
    assert not [w for w in json.loads((run / "manifest.json").read_text())["warnings"] if "stop failed" in w]
    assert_packed_addresses(run)
    assert assert_p6_recounted(run) > 0
    joined = {n: json.loads((run / "node-logs" / f"{n}.docker.json").read_text()).get("network_namespace_of")
              for n in ("h0", "s0", "s1", "s2", "s3", "s4", "s5")}
    assert joined == {"h0": None, "s0": None, "s1": "s0", "s2": "s0", "s3": None, "s4": "s3", "s5": "s3"}
    client = docker.from_env()
    try:
        assert client.containers.list(all=True, filters={"label": f"{LABEL_TESTBED}={testbed}"}) == []
    finally:
        client.close()


@pytest.mark.parametrize(("listen", "source"), [
    ("127.12.0.3", "127.12.0.3"), ("172.18.0.5", "172.18.0.5"), ("0.0.0.0", None), ("node-3", None), ("::", None),
])
def test_dials_leave_from_the_listen_address_when_it_is_one_ip(listen, source):
    assert source_address(listen) == source


def test_an_inbound_peer_is_seen_at_the_address_it_dialled_from():
    """Two process-backend nodes on 127.N.b.c: the dial leaves from the
    dialler's listen address, so the listener sees that, not 127.0.0.1."""
    import trio

    from node.runtime.addresses import remote_ip

    async def main() -> tuple[str, str]:
        seen: list[str] = []
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.7")
        port = listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            async def accept() -> None:
                stream = await listener.accept()
                seen.append(remote_ip(stream))
                await stream.aclose()

            nursery.start_soon(accept)
            client = await trio.open_tcp_stream("127.0.0.7", port, local_address=source_address("127.0.0.9"))
            dialled = remote_ip(client)
        await client.aclose()
        await listener.aclose()
        return seen[0], dialled

    assert trio.run(main) == ("127.0.0.9", "127.0.0.7")


def test_a_hosts_identities_share_its_links_and_talk_over_loopback():
    """So that one shaping program per namespace is right for all of them:
    a packed identity's links are its host's, and two of one host have no
    delay and no loss between them."""
    text = PACKED.format(weight=-3.0).replace("{model: constant, ms: 10}", "{model: uniform, min_ms: 10, max_ms: 90}")
    resolved = parse_experiment(text, "packed.yaml").resolve(None)
    for member in ("s1", "s2"):
        assert resolved.link("h0", member) == resolved.link("h0", "s0")
        assert resolved.link(member, "s4") == resolved.link("s0", "s3")
        assert resolved.link("s0", member) == LOOPBACK
    assert len({resolved.link("h0", h).latency_ms for h in ("h1", "h2", "h3", "s0", "s3")}) > 1
    unpacked = parse_experiment(text.replace(", identities_per_host: 3", ""), "plain.yaml").resolve(None)
    assert unpacked.link("h0", "h1") == resolved.link("h0", "h1")
    assert unpacked.link("h0", "s1") != resolved.link("h0", "s1")


def test_a_hosts_namespace_is_shaped_once_towards_every_peer_of_its_identities():
    calls = {}

    class Shaper:
        def apply_kernel_shaping(self, node, per_peer, uplink_bps):
            calls[node] = (dict(per_peer), uplink_bps)

    text = PACKED.format(weight=-3.0).replace("overlay: {type: full}", "overlay: {type: explicit, edges: "
                                               "[[h0, h1], [h1, h2], [h2, h3], [h0, s1], [h1, s2], [s0, s1], [h3, s4]]}")
    resolved = parse_experiment(text, "packed.yaml").resolve(None)
    caps = ShapingCapabilities(kernel_delay=True, kernel_rate=True, path="netem", detail="")
    shape_in_kernel(Shaper(), resolved, caps, [n.name for n in resolved.nodes])
    assert sorted(calls) == ["h0", "h1", "h2", "h3", "s0", "s3"]
    assert sorted(calls["s0"][0]) == ["h0", "h1"]  # s1's and s2's peers; s1 itself is loopback
    assert sorted(calls["s3"][0]) == ["h3"]
    assert sorted(calls["h0"][0]) == ["h1", "s1"]
