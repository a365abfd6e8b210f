"""Foreign routers without Docker: what `testbed validate` and `testbed sim`
refuse (console script, exit 2), the script compiler on golden cases, the
one mapping to go's parameter names, and the NDJSON -> trace converter on
good lines, duplicates, restarts and garbage."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import textwrap
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
import trio
import yaml

from node.interop.go_params import from_go, go_gossipsub_params
from node.libp2p.identity import identity_for_index
from node.interop.contract import NdjsonTrace, contract_config, hostname_index, rfc3339, serve
from node.trace.interop import convert, message_id_bytes, parse_time
from node.trace.file import read_trace
from node.trace.vocab import TraceType
from orchestrator.experiment.dump import resolved_to_yaml
from orchestrator.experiment.spec import load_experiment
from orchestrator.routers.kinds import kind_of
from orchestrator.routers.interop_script import node_script, publish_instructions, wait_seconds
from orchestrator.routers.nodeconfigs import dials

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(ROOT / ".venv" / "bin" / "testbed")

MIXED = """\
name: mixed
seed: 3
groups:
  - {name: ours, count: 3, router: gossipsub, router_params: {D: 2, D_low: 1, D_high: 4}}
  - name: bare
    count: 2
    router: {image: "example/go-node:1", contract: gossipsub-interop}
    router_params: {D: 2, D_low: 1, D_high: 4, heartbeat_interval: 0.7}
overlay: {type: explicit, edges: [[ours-0, bare-0], [bare-0, bare-1], [ours-1, bare-1], [ours-0, ours-2]]}
wire: {message_id: first-8-bytes}
workload: {messages: 3, interval: 0.4s, size: 32, start: 1.3s, publishers: {nodes: [bare-1]}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def run_testbed(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([TESTBED, *argv], capture_output=True, text=True, timeout=300)


def test_the_mixed_file_is_valid(tmp_path):
    proc = run_testbed("validate", str(write(tmp_path, MIXED)))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("old, new, where, words", [
    ("wire: {message_id: first-8-bytes}", "wire: {message_id: from-seqno}", "x.yaml:10: wire.message_id:",
     "the routers present can all run: first-8-bytes"),
    ("message_id: first-8-bytes}", "message_id: first-8-bytes, authenticity: author}", "x.yaml:10: wire.authenticity:",
     "the routers present can all run: anonymous (a gossipsub-interop contract node publishes unsigned"),
    ("message_id: first-8-bytes}", "message_id: first-8-bytes, authenticity: strict}", "x.yaml:10: wire.authenticity:",
     "StrictNoSign + WithNoAuthor"),
    ("{name: ours, count: 3, router: gossipsub,", "{name: ours, count: 3, router: py-libp2p,", "x.yaml:7: groups[1].router:",
     "group 'bare' runs image:example/go-node:1, whose messages (authenticity: anonymous) no other router here"),
    ("publishers: {nodes: [bare-1]}", "inject: 2", "x.yaml:11: workload.inject:", "only publishes its own"),
    ("heartbeat_interval: 0.7}", "seen_ttl: 30}", "x.yaml:8: groups[1].router_params.seen_ttl:", "go's GossipSubParams"),
    ("contract: gossipsub-interop}", "contract: other}", "x.yaml:7: groups[1].router.contract:",
     "expected contract: gossipsub-interop"),
])
def test_validate_refuses_what_cannot_combine(tmp_path, old, new, where, words):
    assert old in MIXED
    proc = run_testbed("validate", str(write(tmp_path, MIXED.replace(old, new))))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert where in proc.stderr and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_contract_wire_is_the_default_next_to_bare_images(tmp_path):
    """Bare images run only the contract's wire (unsigned, first-8-bytes
    ids): the user need not write it, and the resolved file records it."""
    exp = load_experiment(write(tmp_path, MIXED.replace("wire: {message_id: first-8-bytes}\n", "")))
    assert (exp.wire.authenticity, exp.wire.message_id) == ("anonymous", "first-8-bytes")
    assert yaml.safe_load(resolved_to_yaml(exp.resolve(), exp))["wire"] == {
        "security": "noise", "authenticity": "anonymous", "message_id": "first-8-bytes"}
    proc = run_testbed("validate", str(write(tmp_path, MIXED.replace("wire: {message_id: first-8-bytes}", "wire: {}"))))
    assert proc.returncode == 0, proc.stderr
    assert "anonymous authenticity, message ids first-8-bytes" in proc.stdout


def test_adapters_alone_keep_the_signed_default(tmp_path):
    """rust-libp2p and py-libp2p sign by default; ids must still be the
    contract's, which is then the default; py-libp2p's only wire is signed."""
    text = MIXED.replace('{image: "example/go-node:1", contract: gossipsub-interop}', "rust-libp2p").replace(
        "wire: {message_id: first-8-bytes}\n", "").replace("publishers: {nodes: [bare-1]}", "publishers: {nodes: [ours-1]}")
    exp = load_experiment(write(tmp_path, text))
    assert (exp.wire.authenticity, exp.wire.message_id) == ("strict", "first-8-bytes")
    anonymous = load_experiment(write(tmp_path, text + "wire: {authenticity: anonymous}\n"))
    assert (anonymous.wire.authenticity, anonymous.wire.message_id) == ("anonymous", "first-8-bytes")


def test_py_libp2p_cannot_run_anonymous(tmp_path):
    text = MIXED.replace('{image: "example/go-node:1", contract: gossipsub-interop}', "py-libp2p").replace(
        "wire: {message_id: first-8-bytes}", "wire: {message_id: first-8-bytes, authenticity: anonymous}")
    proc = run_testbed("validate", str(write(tmp_path, text)))
    assert proc.returncode == 2 and "x.yaml:10: wire.authenticity: group 'bare' runs py-libp2p, which cannot run " \
        "authenticity anonymous" in proc.stderr and "always puts from and seqno" in proc.stderr, proc.stderr


def test_sim_and_leave_join_refused(tmp_path):
    path = write(tmp_path, MIXED)
    proc = run_testbed("sim", str(path), "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "the simulator cannot run foreign routers: bare-0" in proc.stderr, proc.stderr
    assert not (tmp_path / "run").exists()
    churn = MIXED + "churn: {timeline: [{at: 1s, action: leave, select: {nodes: [bare-0]}}]}\n"
    proc = run_testbed("validate", str(write(tmp_path, churn)))
    assert proc.returncode == 2 and "leave needs the node's control endpoint" in proc.stderr, proc.stderr


def test_bare_image_refused_on_the_process_backend(tmp_path):
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([TESTBED, "run", str(write(tmp_path, MIXED)), "--backend", "process", "--out",
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "cannot run container images; use --backend docker" in proc.stderr
    assert not (tmp_path / "run" / "traces").exists()


def test_schema_and_resolved_file_keep_the_image_mapping(tmp_path):
    exp = load_experiment(write(tmp_path, MIXED))
    bare = exp.groups[1]
    assert bare.router == "image:example/go-node:1"
    assert bare.dump()["router"] == {"image": "example/go-node:1", "contract": "gossipsub-interop"}
    assert kind_of(bare.router).implementation == "image:example/go-node:1"
    assert kind_of(bare.router).trace_events == ("DELIVER_MESSAGE", "DUPLICATE_MESSAGE", "JOIN", "PUBLISH_MESSAGE")
    assert kind_of("gossipsub").trace_events is None and kind_of("gossipsub").implementation == "gossip-testbed"


def test_go_names_and_back():
    go = go_gossipsub_params({"D": 5, "D_low": 3, "D_high": 9, "D_lazy": None, "heartbeat_interval": 0.7,
                              "heartbeat_initial_delay": 0.1, "fanout_ttl": 60.0, "mcache_len": 5,
                              "mcache_gossip": 3, "seen_ttl": 120.0})
    assert go == {"D": 5, "Dlo": 3, "Dhi": 9, "Dlazy": 5, "HistoryLength": 5, "HistoryGossip": 3,
                  "HeartbeatInitialDelay": 100_000_000, "HeartbeatInterval": 700_000_000,
                  "FanoutTTL": 60_000_000_000}
    assert from_go({**go, "GossipFactor": 0.25}) == {
        "D": 5, "D_low": 3, "D_high": 9, "D_lazy": 5, "mcache_len": 5, "mcache_gossip": 3,
        "heartbeat_initial_delay": 0.1, "heartbeat_interval": 0.7, "fanout_ttl": 60.0}


def test_script_golden(tmp_path):
    resolved = load_experiment(write(tmp_path, MIXED)).resolve(3)
    dialled = dials(resolved)
    # each edge once, dialled by the side started later: ours in order, then the bare images
    assert dialled == {"ours-0": [], "ours-1": [], "ours-2": ["ours-0"], "bare-0": ["ours-0"],
                       "bare-1": ["bare-0", "ours-1"]}
    # v1.1/v1.2's at go's defaults, said explicitly; Dscore and Dout left to the router (D is 2)
    init = {"type": "initGossipSub", "gossipSubParams": {
        "D": 2, "Dlo": 1, "Dhi": 4, "Dlazy": 2, "HistoryLength": 5, "HistoryGossip": 3,
        "HeartbeatInitialDelay": 100_000_000, "HeartbeatInterval": 700_000_000, "FanoutTTL": 60_000_000_000,
        "GossipFactor": 0.25, "GossipRetransmission": 3, "PrunePeers": 16, "PruneBackoff": 60_000_000_000,
        "UnsubscribeBackoff": 10_000_000_000, "OpportunisticGraftTicks": 60, "OpportunisticGraftPeers": 2,
        "GraftFloodThreshold": 10_000_000_000, "MaxIHaveLength": 5000, "MaxIHaveMessages": 10,
        "IWantFollowupTime": 3_000_000_000, "IDontWantMessageThreshold": 1024, "MaxIDontWantLength": 10,
        "MaxIDontWantMessages": 1000, "IDontWantMessageTTL": 3}}
    # node indices: ours-0..2 = 0..2, bare-0 = 3, bare-1 = 4
    assert node_script(resolved, "bare-0", dialled) == [
        init, {"type": "subscribeToTopic", "topicID": "t"}, {"type": "connect", "connectTo": [0]}]
    # started 10.2 s before the workload: messages at 1.3, 1.7, 2.1 s wait 12, 12 and 13 s
    assert node_script(resolved, "bare-1", dialled, start_s=-10.2)[2:] == [
        {"type": "connect", "connectTo": [3, 1]},
        {"type": "waitUntil", "elapsedSeconds": 12},
        {"type": "publish", "messageID": 0, "messageSizeBytes": 32, "topicID": "t"},
        {"type": "publish", "messageID": 1, "messageSizeBytes": 32, "topicID": "t"},
        {"type": "waitUntil", "elapsedSeconds": 13},
        {"type": "publish", "messageID": 2, "messageSizeBytes": 32, "topicID": "t"},
    ]
    # restarted at t=1.5 s: message 0 is past and dropped, never re-published
    restarted = node_script(resolved, "bare-1", dialled, start_s=1.5)
    assert [i["messageID"] for i in restarted if i["type"] == "publish"] == [1, 2]
    assert [i["elapsedSeconds"] for i in restarted if i["type"] == "waitUntil"] == [1]
    assert wait_seconds(3.0, 1.0) == 2 and wait_seconds(0.5, 1.0) == 0 and publish_instructions([], 0.0) == []


def lines_for(*rows: tuple[str, str, dict]) -> list[str]:
    return [json.dumps({"time": t, "msg": msg, **fields}) for t, msg, fields in rows]


def test_converter_contract_lines_duplicates_and_garbage(tmp_path):
    me, a, b = (identity_for_index(i).peer_id_b58 for i in (3, 0, 1))
    lines = lines_for(
        ("2026-01-02T03:04:05.000000001Z", "PeerID", {"id": me, "node_id": 3}),
        ("2026-01-02T03:04:06.5Z", "Received Message", {"id": "7", "from": a, "topic": "t"}),
        ("2026-01-02T03:04:06.6+00:00", "Received Message", {"id": "7", "from": b, "topic": "t"}),
        ("2026-01-02T03:04:07Z", "Received Message", {"id": 8, "from": b, "topic": "t"}),
        ("2026-01-02T03:04:07Z", "Something Else", {}),
    ) + ["not json", '{"msg": "Received Message"}', json.dumps(
        {"time": "2026-01-02T03:04:08Z", "msg": "Received Message", "id": "x", "from": a, "topic": "t"})]
    script = [{"type": "subscribeToTopic", "topicID": "t"}, {"type": "waitUntil", "elapsedSeconds": 2},
              {"type": "publish", "messageID": 9, "messageSizeBytes": 20, "topicID": "t"}]
    out = tmp_path / "trace.pb"
    result = convert(lines, out, identity_for_index(3).peer_id, [script])
    assert result.garbage == 3 and result.unknown == {"Something Else": 1} and result.starts == 1
    assert result.garbage_samples[0] == "not json"
    evs = list(read_trace(out))
    start = parse_time("2026-01-02T03:04:05.000000001Z")
    got = [(TraceType(e.type).name, e.timestamp - start) for e in evs]
    assert got == [("JOIN", 0), ("DELIVER_MESSAGE", 1_499_999_999), ("DUPLICATE_MESSAGE", 1_599_999_999),
                   ("DELIVER_MESSAGE", 1_999_999_999), ("PUBLISH_MESSAGE", 2_000_000_000),
                   ("DELIVER_MESSAGE", 2_000_000_000)]
    assert evs[1].deliverMessage.messageID == message_id_bytes("7") == (7).to_bytes(8, "big")
    assert evs[1].deliverMessage.receivedFrom == identity_for_index(0).peer_id
    assert evs[2].duplicateMessage.receivedFrom == identity_for_index(1).peer_id
    assert evs[5].deliverMessage.receivedFrom == identity_for_index(3).peer_id  # its own publish
    assert all(e.peerID == identity_for_index(3).peer_id for e in evs)


def test_converter_extension_lines_and_restart(tmp_path):
    """What our contract entry point prints (NdjsonTrace) converts back:
    extension lines win over the script, the seen set starts again at each
    PeerID (a restart), RPC sizes survive."""
    from io import StringIO

    from node.engine.api import TraceEvent
    from node.wire.rpc import Rpc

    me, peer = identity_for_index(2), identity_for_index(5)
    buf = StringIO()
    nd = NdjsonTrace(buf, me.peer_id)
    mid = (4).to_bytes(8, "big")
    for t0 in (1_000_000_000, 9_000_000_000):
        nd.line(t0, "PeerID", id=me.peer_id_b58, node_id=2)
        nd.write([TraceEvent(TraceType.JOIN, t0 + 1, topic="t"),
                  TraceEvent(TraceType.ADD_PEER, t0 + 2, peer=peer.peer_id, protocol="/meshsub/1.1.0"),
                  TraceEvent(TraceType.RECV_RPC, t0 + 3, peer=peer.peer_id, rpc=Rpc()),
                  TraceEvent(TraceType.DELIVER_MESSAGE, t0 + 4, mid, "t", peer=peer.peer_id),
                  TraceEvent(TraceType.DUPLICATE_MESSAGE, t0 + 5, mid, "t", peer=peer.peer_id),
                  TraceEvent(TraceType.GRAFT, t0 + 6, topic="t", peer=peer.peer_id),
                  TraceEvent(TraceType.PUBLISH_MESSAGE, t0 + 7, (5).to_bytes(8, "big"), "t"),
                  TraceEvent(TraceType.DELIVER_MESSAGE, t0 + 7, (5).to_bytes(8, "big"), "t", peer=me.peer_id)])
    lines = buf.getvalue().splitlines()
    assert json.loads(lines[0])["time"] == rfc3339(1_000_000_000) == "1970-01-01T00:00:01.000000000Z"
    script = [{"type": "subscribeToTopic", "topicID": "t"}]
    result = convert(lines, tmp_path / "t.pb", me.peer_id, [script, script])
    assert result.garbage == 0 and result.starts == 2 and result.unknown == {}
    kinds = [TraceType(e.type).name for e in read_trace(tmp_path / "t.pb")]
    one = ["JOIN", "ADD_PEER", "RECV_RPC", "DELIVER_MESSAGE", "DUPLICATE_MESSAGE", "GRAFT",
           "PUBLISH_MESSAGE", "DELIVER_MESSAGE"]
    assert kinds == one + one  # the JOIN is the node's own line, not the script's; the seen set restarts


def test_converter_idontwant_rpcs_and_peer_scores(tmp_path):
    """The rust adapter's lines: RPC lines with IDONTWANT ids and no size
    (the RPC's meta carries the ids), our entry point's with both, and
    "Peer Scores" rows for the score file (totals, components empty, which
    the analysis reads); a score that is no number is garbage."""
    from analysis.scores import read_scores
    from node.engine.api import TraceEvent
    from node.trace.scores import COLUMNS, ScoreFile
    from node.wire.rpc import Control, IDontWant, Rpc

    me, a, b = identity_for_index(4), identity_for_index(0), identity_for_index(1)
    buf = StringIO()
    ours = Rpc(control=Control(idontwant=(IDontWant(((9).to_bytes(8, "big"),)),)))
    NdjsonTrace(buf, me.peer_id).write([TraceEvent(TraceType.RECV_RPC, 5_000_000_000, peer=b.peer_id, rpc=ours)])
    lines = lines_for(
        ("1970-01-01T00:00:01Z", "PeerID", {"id": me.peer_id_b58, "node_id": 4}),
        ("1970-01-01T00:00:02Z", "RPC Sent", {"peer": a.peer_id_b58, "idontwant": ["7", "8"]}),
        ("1970-01-01T00:00:03Z", "Peer Scores", {"scores": {a.peer_id_b58: 12.5, b.peer_id_b58: -3}}),
        ("1970-01-01T00:00:04Z", "Peer Scores", {"scores": {a.peer_id_b58: "high"}}),
        ("1970-01-01T00:00:04Z", "RPC Sent", {"peer": a.peer_id_b58}),
    ) + buf.getvalue().splitlines()
    result = convert(lines, tmp_path / "t.pb", me.peer_id)
    assert result.garbage == 2 and result.unknown == {}
    rpcs = [e for e in read_trace(tmp_path / "t.pb") if e.type in (TraceType.SEND_RPC, TraceType.RECV_RPC)]
    sent, received = rpcs
    assert sent.sendRPC.sendTo == a.peer_id
    assert list(sent.sendRPC.meta.control.idontwant[0].messageIDs) == [(7).to_bytes(8, "big"), (8).to_bytes(8, "big")]
    assert received.recvRPC.receivedFrom == b.peer_id
    assert list(received.recvRPC.meta.control.idontwant[0].messageIDs) == [(9).to_bytes(8, "big")]
    assert result.scores == [(3_000_000_000, [(a.peer_id, 12.5), (b.peer_id, -3.0)])]
    out = ScoreFile(tmp_path / "run" / "scores" / "n.csv")
    for t, rows in result.scores:
        out.write_totals(t, rows)
    out.close()
    header, first, _ = (tmp_path / "run" / "scores" / "n.csv").read_text().splitlines()
    assert header.split(",") == list(COLUMNS) and first.split(",") == ["3000000000", a.peer_id_b58, "12.5", *[""] * 8]
    scores = read_scores(tmp_path / "run")
    assert sorted(scores["score"]) == [-3.0, 12.5] and set(scores["node"]) == {"n"}


class FullStdout(StringIO):
    """A stdout whose every flush fails as a full disk does."""

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_contract_node_stops_when_its_stdout_trace_cannot_be_written(tmp_path):
    """Under the contract the trace is stdout: a write that fails stops the
    router (`main` then exits 1) instead of letting it run on untraced."""
    cfg = replace(contract_config(0), listen_host="127.0.0.1", listen_port=0, control_host="127.0.0.1",
                  control_port=0, trace_path="/dev/null", lag_path=str(tmp_path / "lag.json"))
    script = [{"type": "subscribeToTopic", "topicID": "t"}, {"type": "waitUntil", "elapsedSeconds": 30}]
    async def bounded() -> str:
        with trio.fail_after(10):  # the script alone would wait 30 s
            return await serve(cfg, script, False, FullStdout())

    assert trio.run(bounded) == "cannot write its trace: [Errno 28] No space left on device"


def test_hostname_gives_the_index():
    assert hostname_index("node12") == 12
    with pytest.raises(ValueError, match="nodeN"):
        hostname_index("n12")


def test_converter_takes_the_bare_minimum_of_the_contract(tmp_path):
    """`from` and `topic` are only a SHOULD: without them a copy still
    counts, on the script's one topic; go's zone offsets parse."""
    me = identity_for_index(1).peer_id_b58
    lines = lines_for(("1999-12-31T16:08:12.4030048-08:00", "PeerID", {"id": me, "node_id": 1}),
                      ("1999-12-31T16:08:13.4030048-08:00", "Received Message", {"id": "31", "level": "INFO"}))
    result = convert(lines, tmp_path / "t.pb", identity_for_index(1).peer_id, [[{"type": "subscribeToTopic", "topicID": "x"}]])
    assert result.garbage == 0
    deliver = [e for e in read_trace(tmp_path / "t.pb") if e.type == TraceType.DELIVER_MESSAGE][0]
    assert deliver.deliverMessage.topic == "x" and deliver.deliverMessage.receivedFrom == b""
    assert deliver.timestamp == parse_time("2000-01-01T00:08:13.403004800Z")


def test_workload_bounds_keep_the_scripts_start():
    from orchestrator.routers.foreign_nodes import workload_bounds

    s = 1_000_000_000
    assert workload_bounds(None, 0, 50 * s, 8.0) == (50 * s, 58 * s, None)
    # + start slack + the node's own start-up + waitUntil's second
    assert workload_bounds(60 * s, 2 * s, 50 * s, 8.0) == (60 * s, 81 * s, None)
    t0, end, late = workload_bounds(60 * s, 2 * s, 63 * s, 8.0)
    assert (t0, end) == (60 * s, 81 * s) and "up 3.0 s after the workload's fixed start" in late


def test_every_script_waits_until_the_run_is_over(tmp_path):
    """A contract node exits when its script ends: each start's params.json
    closes with a waitUntil to the run's end (workload, churn, linger, drain,
    collection), counted from that start; a restart's script likewise from
    its own start, its due publishes dropped; without a fixed end (`up`)
    the wait outlasts any run."""
    from orchestrator.routers.foreign_nodes import (LEAD_PER_NODE_S, RUN_TAIL_S, START_ALLOWANCE_S, UNTIL_DOWN_S,
                                                    before_start, planned_workload_t0, run_end_ns, write_pieces)
    from orchestrator.run.drain import DRAIN_S
    churn = "churn: {timeline: [{at: 9s, action: kill, select: {nodes: [ours-2]}, for: 4s}]}\nlinger: 2s\n"
    resolved = load_experiment(write(tmp_path, MIXED + churn)).resolve(3)
    assert resolved.end_time() == 15.0  # the churn's restart at 13 s is the last action, then 2 s linger
    s = 1_000_000_000
    t0 = planned_workload_t0(resolved, 100 * s)
    assert t0 == 100 * s + (10 + 5) * s
    end = run_end_ns(resolved, t0, DRAIN_S)
    assert end == t0 + round((15.0 + 5 * LEAD_PER_NODE_S + 1 + START_ALLOWANCE_S + DRAIN_S + RUN_TAIL_S) * s)
    write_pieces(resolved, tmp_path, t0, True, ["bare-0", "bare-1", "ours-0"], DRAIN_S)
    assert not (tmp_path / "nodes" / "ours-0").exists()

    def script(node: str, now_ns: int) -> list[dict]:
        before_start(tmp_path, node, now_ns)
        return json.loads((tmp_path / "nodes" / node / "params.json").read_text())["script"]

    first = script("bare-1", 110 * s)  # 5 s before the workload: publishes at 1.3, 1.7, 2.1 s
    assert [i for i in first if i["type"] == "waitUntil"] == [
        {"type": "waitUntil", "elapsedSeconds": 7}, {"type": "waitUntil", "elapsedSeconds": 8},
        {"type": "waitUntil", "elapsedSeconds": -(-(end - 110 * s) // s)}]
    assert first[-1]["elapsedSeconds"] > 5 + 15 + DRAIN_S
    again = script("bare-1", t0 + 2 * s)  # restarted after two of its publishes
    assert [i["messageID"] for i in again if i["type"] == "publish"] == [2]
    assert again[-1] == {"type": "waitUntil", "elapsedSeconds": -(-(end - t0 - 2 * s) // s)}
    write_pieces(resolved, tmp_path, None, False, ["bare-0"], DRAIN_S)
    assert script("bare-0", 110 * s)[-1] == {"type": "waitUntil", "elapsedSeconds": UNTIL_DOWN_S}


def test_each_variant_gets_the_wire_of_its_own_routers(tmp_path):
    text = """\
name: var
seed: 1
groups:
  - {name: a, count: 3, router: gossipsub}
  - {name: b, count: 2, router: gossipsub}
overlay: {type: full}
workload: {messages: 2, size: 64, publishers: {group: a}}
variants:
  ours: {}
  img: {groups: {b: {router: {image: "x/y:1", contract: gossipsub-interop}}}}
"""
    exp = load_experiment(write(tmp_path, text))
    wires = {name: (v.resolve().authenticity, v.resolve().message_id) for name, v in exp.variants()}
    assert wires == {"ours": ("strict", "from-seqno"), "img": ("anonymous", "first-8-bytes")}
