"""An independent count of a run's raw traces, for the differential tests.

The analysis (analysis/) is checked against this and nothing else of ours:
it compiles node/proto/trace.proto itself with grpcio-tools' protoc (not the
project's generated trace_pb2), reads the uvarint-delimited records with
plain protobuf, maps peer ids to names with its own base58, and counts with
plain Python what docs/metrics.md defines: DELIVER events, deliveries to
expected recipients, per-node deliveries, duplicates, RPCs and control
entries sent and received (IDONTWANT and PRUNE's PX peers too), GRAFT and
PRUNE trace events per node and minute, latency from the traces' own
timestamps, and, beside the traces, the peer scores of scores/*.csv read
with the csv module. It shares no
code with the analysis, so a figure both agree on was computed twice.

Expected recipients follow docs/metrics.md's words: subscribed to the topic
at the publish time (JOIN/LEAVE in the node's own trace, or topology.json's
topics when it has none), up then (not between a node_down, or the `churn`
event that issued it, and the next node_up in events.jsonl), and not a
publisher."""

from __future__ import annotations

import csv
import importlib
import json
import math
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from google.protobuf import json_format

PROTO = Path(__file__).resolve().parents[1] / "node" / "proto" / "trace.proto"
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
NEVER = 1 << 62
US = 1e-3  # latencies agree within 1 microsecond (figures are in ms)

# TraceEvent.Type numbers, as written in trace.proto (checked against the
# compiled enum in trace_module()).
PUBLISH, REJECT, DUPLICATE, DELIVER = 0, 1, 2, 3
RECV_RPC, SEND_RPC, DROP_RPC, JOIN, LEAVE, GRAFT, PRUNE = 6, 7, 8, 9, 10, 11, 12
MINUTE_NS = 60 * 10**9


@cache
def trace_module():
    """trace.proto compiled afresh into a scratch directory, imported."""
    from grpc_tools import protoc

    out = Path(tempfile.mkdtemp(prefix="trace-census-"))
    rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", str(PROTO)])
    assert rc == 0, f"protoc failed on {PROTO}"
    sys.path.insert(0, str(out))
    try:
        mod = importlib.import_module("trace_pb2")
    finally:
        sys.path.remove(str(out))
    t = mod.TraceEvent
    assert (t.PUBLISH_MESSAGE, t.DELIVER_MESSAGE, t.SEND_RPC, t.JOIN) == (PUBLISH, DELIVER, SEND_RPC, JOIN)
    return mod


def b58decode(text: str) -> bytes:
    n = 0
    for ch in text:
        n = n * 58 + B58.index(ch)
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * (len(text) - len(text.lstrip("1"))) + raw


def read_records(path: Path) -> list:
    """Every whole TraceEvent in a trace file: uvarint length + protobuf for
    .pb, one JSON object a line otherwise. A record cut short at the end (a
    writer killed mid-write) is not counted."""
    TraceEvent = trace_module().TraceEvent
    data = path.read_bytes()
    out = []
    if path.suffix != ".pb":
        for line in data.splitlines():
            if line.strip():
                try:
                    out.append(json_format.Parse(line, TraceEvent(), ignore_unknown_fields=True))
                except json_format.ParseError:
                    pass
        return out
    pos = 0
    while pos < len(data):
        length, shift = 0, 0
        while pos < len(data):
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + length > len(data):
            break  # cut short
        ev = TraceEvent()
        ev.ParseFromString(data[pos:pos + length])
        out.append(ev)
        pos += length
    return out


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values, dtype=np.float64), q * 100))


@dataclass
class Census:
    """What the traces of one run say, counted by hand."""

    records: int = 0
    nodes_with_records: set[str] = field(default_factory=set)
    by_type: Counter = field(default_factory=Counter)
    per_node: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    control_sent: Counter = field(default_factory=Counter)
    control_received: Counter = field(default_factory=Counter)
    mesh_changes: Counter = field(default_factory=Counter)  # (minute since t0, node, GRAFT or PRUNE) -> events
    transmissions: int = 0
    messages: int = 0
    expected_deliveries: int = 0
    deliveries: int = 0
    delivered_by_node: Counter = field(default_factory=Counter)
    expected_by_node: Counter = field(default_factory=Counter)
    unexpected_deliveries: int = 0
    repeated_delivers: int = 0  # DELIVER events of a message a node had delivered before (a restart lost its seen-cache)
    latencies_ms: list[float] = field(default_factory=list)
    first_publish_ns: int | None = None
    # node -> its mesh changes in trace order: (ts, "graft" | "prune" | "remove" | "leave", topic, peer)
    mesh_log: dict[str, list[tuple[int, str, str, str]]] = field(default_factory=lambda: defaultdict(list))
    stayed_up_expected: int = 0  # expected recipients not down between the publish and the message's last delivery
    stayed_up_deliveries: int = 0
    expected_by_msg: dict[bytes, dict[str, int | None]] = field(default_factory=dict)  # receiver -> first DELIVER
    latencies_by_node: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # as a receiver
    publish_ts: dict[bytes, int] = field(default_factory=dict)  # message -> its first PUBLISH_MESSAGE
    publishers_of: dict[bytes, set[str]] = field(default_factory=dict)  # message -> the nodes that published it
    joins: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)  # node -> (ts, JOIN/LEAVE, topic)
    first_from: dict[tuple[str, bytes], str] = field(default_factory=dict)  # (node, message) -> its first copy's sender

    def test_plans(self, names: set[str]) -> dict[str, float | None]:
        """test-plans' gossipsub-interop figures (analyze_message_deliveries.py)
        for the receivers `names`, averaged over messages: p50 to disseminate
        from the first delivery anywhere, duplicates per node per message,
        reach (and its worst message)."""
        p50s, reach = [], []
        for m, receivers in sorted(self.expected_by_msg.items()):
            mine = [node for node in receivers if node in names]
            if not mine:
                continue
            got = sorted(receivers[node] for node in mine if receivers[node] is not None)
            reach.append(len(got) / len(mine))
            if got:
                first = min(ts for ts in receivers.values() if ts is not None)
                p50s.append((got[len(got) // 2] - first) / 1e6)
        dups = sum(self.per_node[node][DUPLICATE] for node in names)
        return {
            "dissemination_p50_ms": sum(p50s) / len(p50s) if p50s else None,
            "duplicates_per_node": dups / (len(names) * len(self.expected_by_msg)) if self.expected_by_msg else None,
            "reach": sum(reach) / len(reach) if reach else None,
            "reach_min": min(reach) if reach else None,
        }

    def as_receivers(self, names: set[str], records_rpcs: bool) -> dict[str, float | int | None]:
        """docs/metrics.md's per-implementation figures for the receivers
        `names`; RPCs only where their traces record SEND_RPC."""
        expected = sum(self.expected_by_node[n] for n in names)
        got = sum(self.delivered_by_node[n] for n in names)
        latencies = [ms for n in names for ms in self.latencies_by_node.get(n, ())]
        return {
            "nodes": len(names),
            "delivery_ratio": got / expected if expected else None,
            "latency_p50_ms": _percentile(latencies, 0.5) if latencies else None,
            "latency_p99_ms": _percentile(latencies, 0.99) if latencies else None,
            "duplicates_per_delivery": sum(self.per_node[n][DUPLICATE] for n in names) / got if got else None,
            "rpcs_sent": sum(self.per_node[n][SEND_RPC] for n in names) if records_rpcs else None,
            **self.test_plans(names),
        }

    @property
    def delivery_ratio(self) -> float | None:
        return self.deliveries / self.expected_deliveries if self.expected_deliveries else None

    def latency(self, q: float) -> float | None:
        return _percentile(self.latencies_ms, q) if self.latencies_ms else None


def _topology_nodes(run: Path) -> list[dict]:
    """topology.json's nodes; none without the file (a run of go traces, a synthetic one)."""
    path = run / "topology.json"
    return json.loads(path.read_text())["nodes"] if path.is_file() else []


def _traced(run: Path) -> set[str] | None:
    """The nodes a sampled simulator run traced, as its manifest lists them
    (docs/simulator.md, "Trace levels"): the only nodes whose deliveries the
    traces can show. None: every node was traced."""
    path = run / "manifest.json"
    trace = (json.loads(path.read_text()).get("trace") or {}) if path.is_file() else {}
    return set(trace["traced"]) if trace.get("level") == "sample" else None


def _names(nodes: list[dict]) -> dict[bytes, str]:
    return {b58decode(n["peer_id"]): n["name"] for n in nodes if n.get("peer_id")}


def _node_of(pid: bytes, names: dict[bytes, str]) -> str:
    return names.get(pid) or pid.decode("utf-8", "replace")


def _down_intervals(run: Path) -> dict[str, list[tuple[int, int]]]:
    """[start, end) while each node was down: from its node_down to its
    next node_up in events.jsonl, the start moved back to when the churn
    action that took it down was issued (the latest `churn` event of the
    node_down's cause for that node). A churn event with no node_down after
    it (a partition from some peers only) takes no node down."""
    path = run / "events.jsonl"
    down: dict[str, list[tuple[int, int]]] = defaultdict(list)
    if not path.is_file():
        return down
    since: dict[str, int] = {}
    issued: dict[tuple[str, str], int] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        ev = json.loads(line)
        kind, ts = ev.get("kind"), ev.get("t_ns")
        nodes = ev.get("nodes") or ([ev["node"]] if ev.get("node") else [])
        if kind == "churn":
            for n in nodes:
                issued[(n, ev.get("action"))] = ts
        elif kind == "node_down":
            for n in nodes:
                since.setdefault(n, min(ts, issued.get((n, ev.get("cause")), ts)))
        elif kind == "node_up":
            for n in nodes:
                if n in since:
                    down[n].append((since.pop(n), ts))
    for n, start in since.items():
        down[n].append((start, NEVER))
    return down


def count(run: Path, traces: Path | None = None) -> Census:
    """The census of RUN's traces (RUN/traces unless `traces` is given)."""
    nodes = _topology_nodes(run)
    names = _names(nodes)
    topics_of = {n["name"]: list(n.get("topics") or []) for n in nodes}
    c = Census()
    t0 = run_t0(run)
    published: dict[bytes, tuple[int, str, set[str]]] = {}
    first_deliver: dict[tuple[str, bytes], int] = {}
    joins: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    T = trace_module().TraceEvent
    for path in sorted((traces or run / "traces").iterdir()):
        if path.suffix not in (".pb", ".json", ".jsonl"):
            continue
        for ev in read_records(path):
            node = _node_of(ev.peerID, names)
            c.records += 1
            c.nodes_with_records.add(node)
            c.by_type[ev.type] += 1
            c.per_node[node][ev.type] += 1
            if ev.type == T.PUBLISH_MESSAGE:
                m = ev.publishMessage.messageID
                ts, topic, pubs = published.get(m, (ev.timestamp, ev.publishMessage.topic, set()))
                pubs.add(node)
                published[m] = (min(ts, ev.timestamp), topic, pubs)
            elif ev.type == T.DELIVER_MESSAGE:
                key = (node, ev.deliverMessage.messageID)
                if key in first_deliver:
                    c.repeated_delivers += 1
                if key not in first_deliver or ev.timestamp < first_deliver[key]:
                    first_deliver[key] = ev.timestamp
                    c.first_from[key] = _node_of(ev.deliverMessage.receivedFrom, names)
            elif ev.type in (T.JOIN, T.LEAVE):
                topic = ev.join.topic if ev.type == T.JOIN else ev.leave.topic
                joins[node].append((ev.timestamp, ev.type, topic))
            elif ev.type in (T.SEND_RPC, T.RECV_RPC):
                meta = ev.sendRPC.meta if ev.type == T.SEND_RPC else ev.recvRPC.meta
                if ev.type == T.SEND_RPC:
                    c.transmissions += len(meta.messages)
                _count_control(meta.control, c.control_sent if ev.type == T.SEND_RPC else c.control_received)
            elif ev.type in (T.GRAFT, T.PRUNE):
                c.mesh_changes[((ev.timestamp - t0) // MINUTE_NS, node, ev.type)] += 1
                change = ev.graft if ev.type == T.GRAFT else ev.prune
                c.mesh_log[node].append((ev.timestamp, "graft" if ev.type == T.GRAFT else "prune", change.topic,
                                         _node_of(change.peerID, names)))
            elif ev.type == T.REMOVE_PEER:
                c.mesh_log[node].append((ev.timestamp, "remove", "", _node_of(ev.removePeer.peerID, names)))
            if ev.type == T.LEAVE:
                c.mesh_log[node].append((ev.timestamp, "leave", ev.leave.topic, ""))
    down = _down_intervals(run)
    c.messages = len(published)
    c.publish_ts = {m: ts for m, (ts, _, _) in published.items()}
    c.publishers_of = {m: pubs for m, (_, _, pubs) in published.items()}
    c.joins = dict(joins)
    c.first_publish_ns = min((ts for ts, _, _ in published.values()), default=None)
    everyone = _traced(run) or set(topics_of) | c.nodes_with_records
    for m, (ts, topic, pubs) in published.items():
        expected_here: list[str] = []
        for node in everyone:
            if node in pubs:
                continue
            if not _subscribed(node, topic, ts, joins, topics_of) or any(
                a <= ts < b for a, b in down.get(node, ())
            ):
                c.unexpected_deliveries += (node, m) in first_deliver
                continue
            c.expected_deliveries += 1
            c.expected_by_node[node] += 1
            expected_here.append(node)
            got = first_deliver.get((node, m))
            c.expected_by_msg.setdefault(m, {})[node] = got
            if got is not None:
                c.deliveries += 1
                c.delivered_by_node[node] += 1
                c.latencies_ms.append((got - ts) / 1e6)
                c.latencies_by_node[node].append((got - ts) / 1e6)
        _count_stayed_up(c, m, ts, expected_here, first_deliver, down)
    return c


def _count_stayed_up(c: Census, m: bytes, ts: int, expected: list[str], first_deliver: dict, down: dict) -> None:
    """The recipients of m that no churn took down after its publish and
    before m reached them (or, if it never did, before its last first
    delivery to an expected recipient), and their deliveries."""
    spread_end = max([first_deliver[(n, m)] for n in expected if (n, m) in first_deliver] + [ts])
    for node in expected:
        until = first_deliver.get((node, m), spread_end)
        if any(ts < a <= until for a, _ in down.get(node, ())):
            continue
        c.stayed_up_expected += 1
        c.stayed_up_deliveries += (node, m) in first_deliver


def _count_control(ctl, into: Counter) -> None:
    into["graft"] += len(ctl.graft)
    into["prune"] += len(ctl.prune)
    into["ihave"] += len(ctl.ihave)
    into["ihave_ids"] += sum(len(x.messageIDs) for x in ctl.ihave)
    into["iwant"] += len(ctl.iwant)
    into["px"] += sum(len(p.peers) for p in ctl.prune)
    into["idontwant"] += len(ctl.idontwant)
    into["idontwant_ids"] += sum(len(x.messageIDs) for x in ctl.idontwant)


def run_t0(run: Path) -> int:
    """The run's start: manifest.json's t0_ns, else events.jsonl's run_start."""
    manifest = run / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text()).get("t0_ns") is not None:
        return int(json.loads(manifest.read_text())["t0_ns"])
    for ev in _events(run):
        if ev.get("kind") == "run_start":
            return int(ev["t_ns"])
    return 0


def _events(run: Path) -> list[dict]:
    path = run / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def publish_sizes(run: Path) -> set[int]:
    """The sizes events.jsonl's publish entries give."""
    return {int(ev["size"]) for ev in _events(run) if ev.get("kind") == "publish" and "size" in ev}


def scores_per_second(run: Path, t0: int) -> dict[int, list[float]]:
    """Every score in scores/*.csv, by whole second since t0."""
    out: dict[int, list[float]] = defaultdict(list)
    for path in sorted((run / "scores").glob("*.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                out[(int(row["time_ns"]) - t0) // 10**9].append(float(row["score"]))
    return out


def _subscribed(node: str, topic: str, ts: int, joins: dict, topics_of: dict) -> bool:
    evs = joins.get(node)
    if not evs:
        return topic in topics_of.get(node, ())
    state: bool | None = None
    for when, typ, t in sorted(evs, key=lambda e: e[0]):
        if t != topic:
            continue
        if when > ts:
            if state is None:  # the first event of the topic comes later
                return typ == LEAVE  # left later, never joined in the trace: in since before it began
            break
        state = typ == JOIN
    return bool(state)


def _summary_figures(s: dict) -> dict:
    return {
        "events": s["events"],
        "deliver_events": s["deliver_events"],
        "messages": s["messages"],
        "expected_deliveries": s["expected_deliveries"],
        "deliveries": s["deliveries"],
        "unexpected_deliveries": s["unexpected_deliveries"],
        "delivery_ratio": s["delivery_ratio"],
        "stayed_up_expected": s["stayed_up"]["expected"],
        "stayed_up_deliveries": s["stayed_up"]["delivered"],
        "duplicates": s["duplicates"],
        "rpcs_sent": s["rpcs"]["sent"],
        "transmissions": s["transmissions"],
        **{f"control_{k}": s["control"][k] for k in ("graft", "prune", "ihave", "iwant")},
        "latency_p50_ms": (s["latency_ms"] or {}).get("p50"),
        "latency_max_ms": (s["latency_ms"] or {}).get("max"),
    }


def figures(census: Census) -> dict:
    """The census's figures, under the names _summary_figures gives summary.json's."""
    return {
        "events": census.records,
        "deliver_events": census.by_type[DELIVER],
        "messages": census.messages,
        "expected_deliveries": census.expected_deliveries,
        "deliveries": census.deliveries,
        "unexpected_deliveries": census.unexpected_deliveries,
        "delivery_ratio": census.delivery_ratio,
        "stayed_up_expected": census.stayed_up_expected,
        "stayed_up_deliveries": census.stayed_up_deliveries,
        "duplicates": census.by_type[DUPLICATE],
        "rpcs_sent": census.by_type[SEND_RPC],
        "transmissions": census.transmissions,
        **{f"control_{k}": census.control_sent[k] for k in ("graft", "prune", "ihave", "iwant")},
        "latency_p50_ms": census.latency(0.5),
        "latency_max_ms": census.latency(1.0),
    }


def differences(summary: dict, census: Census) -> dict[str, tuple]:
    """name -> (summary's, census's) for every figure on which they differ
    (latencies by more than a microsecond)."""
    got, want = _summary_figures(summary), figures(census)
    out = {}
    for key, w in want.items():
        g = got[key]
        if key.startswith("latency_") and g is not None and w is not None:
            same = abs(g - w) <= US
        else:
            same = g == w
        if not same:
            out[key] = (g, w)
    return out


def assert_agrees(run: Path, census: Census, summary: dict | None = None) -> None:
    """summary.json and metrics/*.parquet against the census, figure by figure."""
    s = summary or json.loads((run / "summary.json").read_text())
    assert differences(s, census) == {}

    nodes = pq.read_table(run / "metrics" / "nodes.parquet").to_pandas().set_index("node")
    assert set(census.nodes_with_records) <= set(nodes.index)
    for node in census.nodes_with_records:
        counted = census.per_node[node]
        row = nodes.loc[node]
        assert (row["events"], row["delivered"], row["rpcs_sent"], row["duplicated"]) == (
            sum(counted.values()),
            counted[DELIVER],
            counted[SEND_RPC],
            counted[DUPLICATE],
        ), node
        assert row["delivered_expected"] == census.delivered_by_node[node], node
    messages = pq.read_table(run / "metrics" / "messages.parquet").to_pandas()
    assert int(messages["delivered"].sum()) == census.deliveries
    assert int(messages["expected"].sum()) == census.expected_deliveries
    if s.get("implementations"):
        assert_implementations_agree(run, census, s)
    if s.get("sybils"):
        assert_attack_agrees(run, census, s)


def implementation_figures(run: Path, census: Census) -> dict[str, dict]:
    """Each implementation of topology.json (no `implementation`: ours) and
    its figures as receivers, counted here."""
    by_impl: dict[str, list[dict]] = defaultdict(list)
    for n in _topology_nodes(run):
        by_impl[n.get("implementation") or "gossip-testbed"].append(n)
    return {impl: census.as_receivers({n["name"] for n in members}, all(
        n.get("trace_events") is None or "SEND_RPC" in n["trace_events"] for n in members))
        for impl, members in by_impl.items()}


def assert_implementations_agree(run: Path, census: Census, summary: dict) -> None:
    """summary.json's `implementations` against the census, figure by figure
    (latencies within a microsecond, averages within 1e-9)."""
    counted = implementation_figures(run, census)
    assert set(summary["implementations"]) == set(counted)
    for impl, want in counted.items():
        got = summary["implementations"][impl]
        for key, w in want.items():
            g = got[key]
            tol = US if key.endswith("_ms") else 1e-9
            assert (g is None and w is None) or (g is not None and w is not None and abs(g - w) <= tol), (
                impl, key, g, w)


def assert_attack_agrees(run: Path, census: Census, summary: dict) -> None:
    """A run with sybils: the honest and victim deliveries and the sybil
    share of honest meshes, against the census."""
    nodes = _topology_nodes(run)
    sybils = {n["name"] for n in nodes if n.get("adversary")}
    victims = {t for n in nodes if n.get("adversary") for t in n["adversary"].get("eclipse") or ()}
    for who, among in (("honest", lambda n: n not in sybils), ("victim", lambda n: n in victims)):
        expected = sum(v for n, v in census.expected_by_node.items() if among(n))
        delivered = sum(v for n, v in census.delivered_by_node.items() if among(n))
        if who == "honest" or victims:
            assert (summary[f"{who}_expected_deliveries"], summary[f"{who}_deliveries"]) == (expected, delivered), who
    for key, want in censored_figures(run, census).items():
        got = summary[key]
        tol = US if key.endswith("_ms") else 0
        assert (got is None and want is None) or (got is not None and want is not None and abs(got - want) <= tol), (
            key, got, want)
    for key, want in mesh_sybil_figures(run, census).items():
        got = summary[key]
        assert (got is None and want is None) or abs(got - want) <= 1e-9, (key, got, want)
    by_side = pq.read_table(run / "metrics" / "sybil_scores.parquet").to_pandas()
    counted = scores_by_side(run, {n["peer_id"] for n in nodes if n["name"] in sybils}, sybils)
    got = {(int(r.t_s), r.side): (int(r.samples), float(r.p50)) for r in by_side.itertuples()}
    assert set(got) == set(counted)
    for key, values in counted.items():
        assert got[key][0] == len(values) and abs(got[key][1] - _percentile(values, 0.5)) <= 1e-9, key


def censored_figures(run: Path, census: Census) -> dict:
    """summary.json's censored_* figures counted by hand: the honest
    recipients' expected deliveries of every message a node named in some
    sybil's `censor_publishers` published (its PUBLISH_MESSAGE in the
    traces), and their latencies from the first publish."""
    nodes = _topology_nodes(run)
    sybils = {n["name"] for n in nodes if n.get("adversary")}
    censored = {t for n in nodes if n.get("adversary") for t in n["adversary"].get("censor_publishers") or ()}
    expected, latencies = 0, []
    for m, receivers in census.expected_by_msg.items():
        if not census.publishers_of[m] & censored:
            continue
        for node, got in receivers.items():
            if node not in sybils:
                expected += 1
                if got is not None:
                    latencies.append((got - census.publish_ts[m]) / 1e6)
    return {
        "censored_publishers": len(censored),
        "censored_expected_deliveries": expected,
        "censored_deliveries": len(latencies),
        "censored_delivery_ratio": len(latencies) / expected if expected else None,
        "censored_latency_p50_ms": _percentile(latencies, 0.5) if latencies else None,
        "censored_latency_p99_ms": _percentile(latencies, 0.99) if latencies else None,
    }


def scores_by_side(run: Path, sybil_ids: set[str], sybils: set[str]) -> dict[tuple[int, str], list[float]]:
    """The scores honest nodes recorded, by whole second since t0 and side
    of the peer (honest or sybil), read with the csv module."""
    t0 = run_t0(run)
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    for path in sorted((run / "scores").glob("*.csv")):
        if path.stem in sybils:
            continue
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row.get("score"):
                    side = "sybil" if row["peer"] in sybil_ids else "honest"
                    out[((int(row["time_ns"]) - t0) // 10**9, side)].append(float(row["score"]))
    return out



def _teardown(run: Path) -> int:
    """When the teardown began: events.jsonl's first run_end."""
    return min(int(ev["t_ns"]) for ev in _events(run) if ev.get("kind") == "run_end")


def mesh_sybil_figures(run: Path, census: Census) -> dict:
    """summary.json's mesh_sybil_* figures counted by hand: each honest
    node's mesh replayed from its own GRAFT/PRUNE/REMOVE_PEER/LEAVE records
    (no churn: a node_down reset is not replayed), sampled at t0 + k s from
    the first publish until the teardown, sybils / mesh where the mesh is
    not empty."""
    nodes = _topology_nodes(run)
    sybils = {n["name"] for n in nodes if n.get("adversary")}
    victims = {t for n in nodes if n.get("adversary") for t in n["adversary"].get("eclipse") or ()}
    t0, end = run_t0(run), _teardown(run)
    shares: list[tuple[int, float]] = []  # (second, share)
    victim_shares: list[tuple[int, float]] = []
    for node, log in census.mesh_log.items():
        if node in sybils or census.first_publish_ns is None:
            continue
        k = -(-(census.first_publish_ns - t0) // 10**9)
        while t0 + k * 10**9 < end:
            for topic, mesh in _mesh_at(log, t0 + k * 10**9).items():
                if mesh:
                    share = len(mesh & sybils) / len(mesh)
                    shares.append((k, share))
                    if node in victims:
                        victim_shares.append((k, share))
            k += 1
    out = {}
    for prefix, got in (("", shares if sybils else []), ("victim_", victim_shares)):
        values = [v for _, v in got]
        last = max((k for k, _ in got), default=None)
        at_end = [v for k, v in got if k == last]
        out[f"{prefix}mesh_sybil_fraction_max"] = max(values) if values else None
        out[f"{prefix}mesh_sybil_fraction_mean"] = sum(values) / len(values) if values else None
        out[f"{prefix}mesh_sybil_fraction_end"] = sum(at_end) / len(at_end) if at_end else None
    out["victim_mesh_all_sybil_share"] = (
        sum(v == 1.0 for _, v in victim_shares) / len(victim_shares) if victim_shares else None)
    return out


def _mesh_at(log: list[tuple[int, str, str, str]], at: int) -> dict[str, set[str]]:
    """A node's meshes by topic after its records up to `at` (inclusive)."""
    meshes: dict[str, set[str]] = defaultdict(set)
    for ts, what, topic, peer in log:
        if ts > at:
            break
        if what == "graft":
            meshes[topic].add(peer)
        elif what == "prune":
            meshes[topic].discard(peer)
        elif what == "remove":
            for mesh in meshes.values():
                mesh.discard(peer)
        else:
            meshes[topic].clear()
    return meshes


def assert_counters_agree(sampled: Path, full: Census) -> None:
    """A sampled run's counters.csv, read with the csv module, against the
    census of the full traces of the same seeded run: every node's count of
    every trace event type."""
    T = trace_module().TraceEvent
    with open(sampled / "counters.csv", newline="") as f:
        rows = {row.pop("node"): row for row in csv.DictReader(f)}
    missing = set(full.per_node) - set(rows)
    assert not missing, f"counters.csv misses nodes that have traces: {sorted(missing)[:5]}"
    for node, row in rows.items():
        counted = {T.Type.Value(name): int(v) for name, v in row.items() if int(v)}
        assert counted == dict(full.per_node.get(node, {})), node


def _tree_rows(run: Path) -> dict[str, list[dict[str, str]]]:
    """Every tree/<node>.csv's rows with a time and an event, by node."""
    out: dict[str, list[dict[str, str]]] = {}
    for path in sorted((run / "tree").glob("*.csv")):
        with path.open(newline="") as f:
            out[path.stem] = [r for r in csv.DictReader(f) if r.get("time_ns") and r.get("event")]
    return out


def _node_downs(run: Path) -> list[tuple[str, int]]:
    return [(ev["node"], int(ev["t_ns"])) for ev in _events(run) if ev.get("kind") == "node_down" and ev.get("node")]


def tree_figures(run: Path, census: Census) -> dict:
    """summary.json's `tree` counted by hand from the tree files, the traces'
    census and events.jsonl (docs/metrics.md, "Tree figures")."""
    rows = _tree_rows(run)
    hops, depth = [], defaultdict(int)
    first: dict[tuple[str, str], int] = {}
    marked: dict[tuple[str, str], int] = {}
    asked: set[tuple[str, str]] = set()
    grafts = ups = downs = 0
    for node, rs in rows.items():
        for r in rs:
            key, ts = (node, r["message_id"]), int(r["time_ns"])
            if r["event"] == "deliver":
                first[key] = min(ts, first.get(key, ts))
                if int(r["hops"]) > 0:
                    hops.append(int(r["hops"]))
                    depth[r["message_id"]] = max(depth[r["message_id"]], int(r["hops"]))
            elif r["event"] == "missing":
                marked[key] = min(ts, marked.get(key, ts))
            elif r["event"] == "graft":
                grafts += 1
                asked.add(key)
            ups += r["event"] == "neighbor_up"
            downs += r["event"] == "neighbor_down"
    times = [(first[k] - marked[k]) / 1e9 for k in asked if k in first and k in marked]

    return {
        "nodes": len(rows), "deliveries": len(hops), "hops_mean": sum(hops) / len(hops) if hops else None,
        "hops_p50": _pct(hops, 50), "hops_p90": _pct(hops, 90), "hops_max": max(hops, default=None),
        "depth_p50": _pct(list(depth.values()), 50), "depth_max": max(depth.values(), default=None),
        "eager_transmissions": census.transmissions, "lazy_ids": census.control_sent["ihave_ids"],
        "eager_per_delivery": census.transmissions / len(hops) if hops else None,
        "lazy_per_delivery": census.control_sent["ihave_ids"] / len(hops) if hops else None,
        "grafts": grafts, "repairs": len(asked), "repaired": len(times),
        "unrepaired": sum(1 for k in asked if k not in first),
        "repair_p50_s": _pct(times, 50), "repair_p90_s": _pct(times, 90), "repair_max_s": max(times, default=None),
        "neighbor_ups": ups, "neighbor_downs": downs,
        **_active_degree(run, rows, census),
    }


def _pct(values: list, q: float) -> float | None:
    return float(np.percentile(np.array(values, dtype=np.float64), q)) if values else None


def repair_after_loss(run: Path, census: Census) -> dict:
    """summary.json's `repair_after_loss` counted by hand: per node_down,
    seconds to the last first delivery of the first message published at
    or after it that reached every expected recipient."""
    complete = sorted((census.publish_ts[m], max(got.values())) for m, got in census.expected_by_msg.items()
                      if got and all(v is not None for v in got.values()))
    per_loss = []
    for node, ts in sorted(_node_downs(run), key=lambda d: (d[1], d[0])):
        done = next((end for pub, end in complete if pub >= ts), None)
        per_loss.append({"node": node, "t_s": (ts - run_t0(run)) / 1e9,
                         "repair_s": (done - ts) / 1e9 if done is not None else None})
    times = [a["repair_s"] for a in per_loss if a["repair_s"] is not None]
    return {"losses": len(per_loss), "unrepaired": len(per_loss) - len(times), "p50_s": _pct(times, 50),
            "max_s": max(times, default=None), "per_loss": per_loss}


def subtree_repair(run: Path, census: Census) -> dict:
    """summary.json's `subtree_repair` counted by hand: per node_down, the
    nodes whose first copy (receivedFrom of their first DELIVER_MESSAGE)
    of each publisher's last message before it came from the lost node,
    less those down then; per child that was expected to receive a message
    published at or after the loss, its first such delivery."""
    down = _down_intervals(run)
    per_loss, latencies = [], []
    for node, ts in sorted(_node_downs(run), key=lambda d: (d[1], d[0])):
        last: dict[str, tuple[int, bytes]] = {}
        for m, pub in census.publish_ts.items():
            source = min(census.publishers_of[m])
            if pub < ts and source != node and (source not in last or pub >= last[source][0]):
                last[source] = (pub, m)
        children = {n for (n, m), sender in census.first_from.items()
                    if sender == node and n != node and m in {m for _, m in last.values()}
                    and not any(a <= ts < b for a, b in down.get(n, ()))}
        if not children:
            continue
        firsts: dict[str, tuple[int, float]] = {}
        waiting = set()
        for m, got in census.expected_by_msg.items():
            if census.publish_ts[m] < ts:
                continue
            for n in children & set(got):
                waiting.add(n)
                if got[n] is not None and (n not in firsts or got[n] < firsts[n][0]):
                    firsts[n] = (got[n], (got[n] - census.publish_ts[m]) / 1e6)
        never = len(waiting - set(firsts))
        lat = [v for _, v in firsts.values()]
        latencies += lat
        per_loss.append({"node": node, "t_s": (ts - run_t0(run)) / 1e9, "children": len(children),
                         "waiting": len(waiting), "unrepaired": never,
                         "repair_s": max((t - ts) / 1e9 for t, _ in firsts.values()) if firsts and not never else None,
                         "first_latency_max_ms": max(lat, default=None)})
    times = [a["repair_s"] for a in per_loss if a["repair_s"] is not None]
    return {"losses": len(per_loss), "children": sum(a["children"] for a in per_loss),
            "waiting": sum(a["waiting"] for a in per_loss), "unrepaired": sum(a["unrepaired"] for a in per_loss),
            "p50_s": _pct(times, 50), "max_s": max(times, default=None),
            "first_latency_p50_ms": _pct(latencies, 50), "first_latency_max_ms": max(latencies, default=None),
            "per_loss": per_loss}


def _active_degree(run: Path, rows: dict[str, list[dict[str, str]]], census: Census) -> dict:
    """Each node's active view replayed (emptied at its node_down) at every
    whole second since t0 it was up and subscribed to its topic."""
    t0, end = run_t0(run), max(int(r["time_ns"]) for rs in rows.values() for r in rs)
    for ev in _events(run):
        end = max(end, int(ev["t_ns"]))
    down, lost = _down_intervals(run), defaultdict(list)
    for node, ts in _node_downs(run):
        lost[node].append(ts)
    topics_of = {n["name"]: list(n.get("topics") or []) for n in _topology_nodes(run)}
    samples = []
    for node, rs in rows.items():
        steps = sorted([(ts, 0, None) for ts in lost[node]] + [(int(r["time_ns"]), 1, r) for r in rs],
                       key=lambda s: (s[0], s[1]))
        view: dict[str, str] = {}
        i = 0
        for k in range(math.ceil((end - t0) / 1e9) + 1):
            at = t0 + k * 10**9
            while i < len(steps) and steps[i][0] <= at:
                r = steps[i][2]
                if r is None:
                    view.clear()
                elif r["event"] == "neighbor_up":
                    view[r["peer"]] = r["link"]
                elif r["event"] == "neighbor_down":
                    view.pop(r["peer"], None)
                i += 1
            topic = rs[0]["topic"] if rs else ""
            up = not any(a <= at < b for a, b in down.get(node, ()))
            if up and _subscribed(node, topic, at, census.joins, topics_of):
                randoms = sum(1 for link in view.values() if link == "random")
                samples.append((randoms, len(view) - randoms))
    degree = [a + b for a, b in samples]
    return {
        "active_degree_mean": sum(degree) / len(degree) if degree else None,
        "active_degree_min": min(degree, default=None), "active_degree_max": max(degree, default=None),
        "active_random_mean": sum(a for a, _ in samples) / len(samples) if samples else None,
        "active_near_mean": sum(b for _, b in samples) / len(samples) if samples else None,
    }

