"""The Spark job: from the ingested trace table and the run directory's own
files to the metrics tables (RUN_DIR/metrics/*.parquet) and summary.json.

Every definition lives in docs/metrics.md; the names here follow it. In short:
a message's expected recipients are the nodes subscribed to its topic at its
publish time (JOIN/LEAVE in the traces) that were up then (node_down/node_up
in events.jsonl) and did not publish it; a delivery is a node's first
DELIVER_MESSAGE of it; latency is first delivery minus first publish.

The job is a chain of named stages, each a function returning a DataFrame.
What grows with the number of events is Spark's, over the ingested events
(scanned, not cached), in at most six actions (event_counts,
structure_events, messages with their duplicates, first_deliveries,
time_series_control and, only where some link's receiver recorded fewer RPCs
than were sent to it, unreceived_rpcs), each brought to
the driver once as Arrow. What those return is small next to the events, and
the stages over it run on the driver (analysis/deliveries.py: expected
recipients and their first deliveries, lower bound, per message, the
delivery time series, per node, latency distribution, in flight; here:
subscription and up/down intervals, short links, mesh degree, recovery;
mesh churn, peer scores from the score files, IDONTWANT and PRUNE figures:
analysis/mesh_churn.py, scores.py, idontwant.py) and `summarize`.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis import deliveries as dlv
from analysis.assertions import ALWAYS_ALIASED, SOMETIMES_ALIASED
from analysis.completeness import check_complete
from analysis.honest import honest_summary, sybil_names, victim_names
from analysis.ingest import SCHEMA as EVENTS_SCHEMA
from analysis.ingest import IngestResult
from analysis.idontwant import idontwant_summary
from analysis.implementations import declared, per_implementation
from analysis.loss_repair import loss_summary, repair_after_loss, subtree_repair, subtree_summary
from analysis.mesh_churn import churn_summary, mesh_churn
from analysis.mesh import mesh_link_changes, mesh_links_at, snapshot_times
from analysis.mesh_sybils import mesh_sybil_samples, mesh_sybil_summary
from analysis.rundir import RunDir
from analysis.scores import read_scores, score_summary, scores_by_side, scores_over_time
from analysis.spread import first_delivery_tree
from analysis.tree import tree_summary
from node.trace.vocab import (
    ADD_PEER,
    DELIVER,
    DROP_RPC,
    DUPLICATE,
    GRAFT,
    JOIN,
    LEAVE,
    PRUNE,
    PUBLISH,
    RECV_RPC,
    REJECT,
    REMOVE_PEER,
    SEND_RPC,
    RunEvent,
)

NS = 1_000_000_000
INF = 1 << 62  # "never" on the run's nanosecond clock
NEG_INF = -(1 << 62)


CDF_POINTS = [i / 100 for i in range(101)]
PRE_EVENT_WINDOW_NS = 10 * NS  # the pre-event delivery level is taken over this window
RECOVERY_FRACTION = 0.99  # recovered: back to >= 99% of the pre-event level
CODEGEN_MIN_EVENTS = 1_000_000
# Below this many events expressions are interpreted, not compiled: on a tiny
# run compiling each query's projections and aggregations (Janino) is most of
# the Spark server's CPU (3k events warm through Connect: 2.9 -> 2.0 CPU s).
INTERPRETED_MAX_EVENTS = 100_000
# The ingested table's columns for Spark: given, not inferred (inferring them
# from the Parquet footers is a Spark job of its own)
_SPARK_TYPES = {pa.string(): "string", pa.int8(): "tinyint", pa.int32(): "int", pa.int64(): "long"}
EVENTS_COLUMNS = [(f.name, _SPARK_TYPES[f.type]) for f in EVENTS_SCHEMA]


@dataclass
class Context:
    """Facts from the run directory the Spark job needs, small enough for the driver."""

    t0: int
    t_end: int
    teardown: int  # when `down` began (the first run_end), at most t_end: every router leaves after it
    nodes: list[str]
    subscriptions: list[tuple[str, str, int, int]]  # node, topic, start, end
    down: list[tuple[str, int, int]]  # node, start, end (node unreachable)
    resets: list[tuple[str, int]]  # node, ts: the node's router state was lost (down)
    churn: list[dict[str, Any]]
    publishes: list[dict[str, Any]]  # events.jsonl publish entries


# --------------------------------------------------------------------- driver-side facts


def subscription_intervals(
    join_leave: list[tuple[str, int, int, str]], topo_topics: dict[str, list[str]]
) -> list[tuple[str, str, int, int]]:
    """(node, topic, start, end) from JOIN/LEAVE rows (node, type, ts, topic),
    in trace order. A node with no JOIN/LEAVE at all is taken as subscribed for
    the whole run to the topics topology.json lists for it."""
    by_key: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    seen_nodes = set()
    for node, typ, ts, topic in join_leave:
        by_key[(node, topic)].append((ts, typ))
        seen_nodes.add(node)
    out = []
    for (node, topic), evs in by_key.items():
        evs.sort(key=lambda e: e[0])
        start: int | None = None
        first = True
        for ts, typ in evs:
            if typ == JOIN:
                if start is None:
                    start = ts
            elif typ == LEAVE:
                if start is None and first:
                    start = NEG_INF  # left a topic it was in before its trace began
                if start is not None:
                    out.append((node, topic, start, ts))
                    start = None
            first = False
        if start is not None:
            out.append((node, topic, start, INF))
    for node, topics in topo_topics.items():
        if node not in seen_nodes:
            out.extend((node, topic, NEG_INF, INF) for topic in topics)
    return sorted(out)


def down_intervals(
    events: list[dict[str, Any]], has_events: bool, alive: dict[str, tuple[int, int]]
) -> tuple[list[tuple[str, int, int]], list[tuple[str, int]]]:
    """(node, start, end) while a node was unreachable, and the times its
    router state was lost. From events.jsonl node_down/node_up; without
    events.jsonl (go traces) a node counts as up between its first and last
    trace event ("seen alive").

    A node is down from the moment the churn action that took it down was
    issued (its `churn` event), not only from its node_down, which is logged
    when the action is done: a docker kill takes a few hundred ms to land, and
    a message published meanwhile cannot be expected of a node being killed.
    In the simulator both are the same instant."""
    down: list[tuple[str, int, int]] = []
    resets: list[tuple[str, int]] = []
    if has_events:
        open_since: dict[str, int] = {}
        issued: dict[tuple[str, str], int] = {}  # (node, action) -> when the latest such churn was issued
        for ev in events:
            kind, node = ev.get("kind"), ev.get("node")
            if kind == RunEvent.CHURN:
                for name in ev.get("nodes") or ():
                    issued[(name, ev.get("action"))] = int(ev["t_ns"])
            if not node:
                continue
            if kind == RunEvent.NODE_DOWN:
                t = int(ev["t_ns"])
                open_since.setdefault(node, min(t, issued.pop((node, ev.get("cause")), t)))
                resets.append((node, t))
            elif kind == RunEvent.NODE_UP and node in open_since:
                down.append((node, open_since.pop(node), int(ev["t_ns"])))
        down.extend((node, start, INF) for node, start in open_since.items())
    else:
        for node, (first, last) in alive.items():
            down.append((node, NEG_INF, first))
            down.append((node, last + 1, INF))
    return sorted(down), sorted(resets)


def shortest_paths(edges: list[dict[str, Any]], sources: list[str]) -> dict[str, dict[str, float]]:
    """Dijkstra over the overlay's one-way link latencies (ms), from each source."""
    adj: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for e in edges:
        a, b, w = str(e["a"]), str(e["b"]), float(e.get("latency_ms") or 0.0)
        adj[a].append((b, w))
        adj[b].append((a, w))
    out = {}
    for src in sources:
        dist = {src: 0.0}
        heap = [(0.0, src)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist.get(u, math.inf):
                continue
            for v, w in adj.get(u, ()):
                nd = d + w
                if nd < dist.get(v, math.inf):
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
        out[src] = dist
    return out


def gini(values: list[float]) -> float | None:
    """Gini coefficient of non-negative values: 0 even, ->1 concentrated."""
    xs = sorted(float(v) for v in values)
    n, total = len(xs), sum(xs)
    if n == 0 or total <= 0:
        return None if n == 0 else 0.0
    weighted = sum((i + 1) * x for i, x in enumerate(xs))
    return 2 * weighted / (n * total) - (n + 1) / n


def recovery_after_churn(
    msgs: pd.DataFrame, churn: list[dict[str, Any]], t0: int, t_end: int
) -> list[dict[str, Any]]:
    """Per churn event, how long until delivery recovered (docs/metrics.md):
    pre-event level L = pooled delivery ratio of messages published in the 10 s
    before it; the messages published from the event until the next (strictly
    later) churn event or the end of the run are grouped in 1-second buckets
    by publish time relative to the event; recovery_s is the start of the
    first bucket from which every non-empty bucket has ratio >= 0.99 L."""
    out = []
    if msgs.empty:
        pub = expd = dlv = None
    else:
        m = msgs[msgs["expected"] > 0].sort_values("publish_ts")
        pub = m["publish_ts"].to_numpy()
        expd = m["expected"].to_numpy()
        dlv = m["delivered"].to_numpy()
    times = sorted({int(c["t_ns"]) for c in churn})
    for c in churn:
        tc = int(c["t_ns"])
        later = [t for t in times if t > tc]
        end = later[0] if later else max(t_end, tc)
        rec: dict[str, Any] = {
            "t_s": (tc - t0) / NS,
            "action": c.get("action"),
            "nodes": list(c.get("nodes") or []),
            "window_s": (end - tc) / NS,
            "pre_ratio": None,
            "min_ratio": None,
            "recovered": None,
            "recovery_s": None,
        }
        if pub is not None:
            pre = (pub >= tc - PRE_EVENT_WINDOW_NS) & (pub < tc)
            if not pre.any():
                pre = pub < tc
            level = float(dlv[pre].sum() / expd[pre].sum()) if pre.any() else 1.0
            rec["pre_ratio"] = level
            post = (pub >= tc) & ((pub < end) | (not later and pub == end))
            if post.any():
                buckets: dict[int, list[int]] = {}
                for p, e, d in zip(pub[post], expd[post], dlv[post]):
                    b = buckets.setdefault(int((p - tc) // NS), [0, 0])
                    b[0] += int(e)
                    b[1] += int(d)
                ratios = sorted((k, d / e) for k, (e, d) in buckets.items())
                rec["min_ratio"] = min(r for _, r in ratios)
                target = RECOVERY_FRACTION * level
                recovery = None
                for k, r in reversed(ratios):
                    if r + 1e-12 < target:
                        break
                    recovery = k
                rec["recovered"] = recovery is not None
                rec["recovery_s"] = float(recovery) if recovery is not None else None
        out.append(rec)
    return out


# --------------------------------------------------------------------- the job's stages
#
# Each stage is a function from DataFrames to a DataFrame, named as
# docs/metrics.md names the quantity. `compute` chains them, caches what
# several stages read, and launches as few Spark jobs as it can.


def _pct(values: list | None, i: int) -> float | None:
    if values is None:
        return None
    v = values[i]
    return None if v is None else float(v)


def _write_pandas(df: pd.DataFrame, path: Path) -> None:
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def local_frame(spark, rows: list[tuple], columns: list[tuple[str, str]]):
    """A DataFrame of driver-side rows, handed over as Arrow: a list of
    tuples would go through `parallelize` and start Python workers."""
    pdf = pd.DataFrame(rows, columns=[name for name, _ in columns])
    for name, kind in columns:
        if kind == "long":
            pdf[name] = pdf[name].astype("int64")
        elif kind == "double":
            pdf[name] = pdf[name].astype("float64")
        else:
            pdf[name] = pdf[name].astype("object")
    return spark.createDataFrame(pdf, spark_schema(columns))


def spark_schema(columns: list[tuple[str, str]]):
    """The Spark schema of (name, type) columns, built here: given as DDL,
    a classic session would parse it in the JVM, whose parser's first use
    costs a new JVM about a quarter of a second (docs/metrics.md)."""
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "tinyint": T.ByteType(), "int": T.IntegerType(), "long": T.LongType(),
             "double": T.DoubleType(), "array<string>": T.ArrayType(T.StringType())}
    return T.StructType([T.StructField(name, kinds[kind]) for name, kind in columns])


def _write_table(table: pa.Table, path: Path) -> None:
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    pq.write_table(table, path)


CONTROL_COUNTS = ("graft", "prune", "ihave", "iwant", "ihave_ids", "iwant_ids", "px", "idontwant", "idontwant_ids")


def event_counts(E):
    """Per node, event type and, for RPCs sent and received, peer: events,
    first and last timestamp, and the sums of the per-event counts. A few
    rows per node and one per directed link and direction: the per-node
    counts (per_node_counts) and the RPCs per link (short_links) are read
    from it on the driver. One narrow aggregation, where a column per figure
    was a CASE per figure per event."""
    from pyspark.sql import functions as F

    rpc = F.col("type").isin(SEND_RPC, RECV_RPC)
    return E.groupBy("node", "type", F.when(rpc, F.col("peer")).alias("peer")).agg(
        F.count(F.lit(1)).alias("events"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.sum("n_msgs").alias("n_msgs"),
        F.sum("size").alias("size"),
        *[F.sum(f"n_{c}").alias(f"n_{c}") for c in CONTROL_COUNTS],
    )


def per_node_counts(counts: pd.DataFrame) -> pd.DataFrame:
    """Per node (event_counts' rows summed): events by type, RPC and control
    entry sums, bytes (null where no such RPC recorded a size), first and
    last event."""
    out = counts.groupby("node", dropna=False, sort=False).agg(
        events=("events", "sum"), first_ts=("first_ts", "min"), last_ts=("last_ts", "max")
    )

    def of(t: int, col: str = "events", nulls: bool = False) -> pd.Series:
        got = counts[counts["type"] == t].groupby("node", dropna=False, sort=False)[col].sum(min_count=int(nulls))
        return got.reindex(out.index) if nulls else got.reindex(out.index, fill_value=0).astype("int64")

    figures = {
        "published": of(PUBLISH),
        "delivered": of(DELIVER),
        "duplicated": of(DUPLICATE),
        "rejected": of(REJECT),
        "msgs_received": of(RECV_RPC, "n_msgs"),
        "msgs_sent": of(SEND_RPC, "n_msgs"),
        "rpcs_sent": of(SEND_RPC),
        "rpcs_received": of(RECV_RPC),
        "rpcs_dropped": of(DROP_RPC),
        "bytes_sent": of(SEND_RPC, "size", nulls=True),
        "bytes_received": of(RECV_RPC, "size", nulls=True),
        "bytes_dropped": of(DROP_RPC, "size", nulls=True),
        **{
            f"{c}_{d}": of(t, f"n_{c}")
            for c in CONTROL_COUNTS
            for t, d in ((SEND_RPC, "sent"), (RECV_RPC, "received"))
        },
        "msgs_dropped": of(DROP_RPC, "n_msgs"),
        "mesh_grafts": of(GRAFT),
        "mesh_prunes": of(PRUNE),
        "peers_added": of(ADD_PEER),
        "peers_removed": of(REMOVE_PEER),
    }
    return pd.concat([out, pd.DataFrame(figures, index=out.index)], axis=1).reset_index()


def structure_events(E) -> pd.DataFrame:
    """The events that shape subscriptions and meshes (JOIN, LEAVE, GRAFT,
    PRUNE, REMOVE_PEER), in trace order: they grow with membership and mesh
    churn, not with messages, so the driver takes them in one pass (and
    sorts them: a Spark sort would be two more jobs)."""
    from pyspark.sql import functions as F

    rows = (
        E.where(F.col("type").isin(JOIN, LEAVE, GRAFT, PRUNE, REMOVE_PEER))
        .select("node", "type", "topic", "peer", "ts", "seq")
        .toArrow()
    )
    return rows.sort_by([("node", "ascending"), ("ts", "ascending"), ("seq", "ascending")]).to_pandas()


def build_context(run: RunDir, per_node: pd.DataFrame, structure: pd.DataFrame) -> Context:
    """Driver-side facts from the run directory, the per-node aggregates and
    the structure events."""
    jl = structure[structure["type"].isin([JOIN, LEAVE])]
    join_leave = [
        (node, int(typ), int(ts), topic)
        for node, typ, ts, topic in jl[["node", "type", "ts", "topic"]].itertuples(index=False)
    ]
    topo_nodes = run.topology_nodes()
    topo_topics = {str(n["name"]): list(n.get("topics") or []) for n in topo_nodes if "name" in n}
    sample = run.traced_sample()
    if sample is not None:  # the figures are the traced nodes': the others' deliveries are not in the traces
        topo_topics = {name: topics for name, topics in topo_topics.items() if name in sample}
    nodes = sorted(set(topo_topics) | set(per_node["node"].dropna()))
    alive = {
        r.node: (int(r.first_ts), int(r.last_ts)) for r in per_node.itertuples() if r.node is not None
    }
    subs = subscription_intervals(join_leave, topo_topics)
    down, resets = down_intervals(run.events, run.has_events, alive)

    trace_t0 = int(per_node["first_ts"].min()) if len(per_node) else 0
    trace_end = int(per_node["last_ts"].max()) if len(per_node) else 0
    t0 = run.manifest.get("t0_ns")
    if t0 is None:
        starts = [e["t_ns"] for e in run.events if e.get("kind") == RunEvent.RUN_START]
        t0 = starts[0] if starts else trace_t0
    ends = [e["t_ns"] for e in run.events if e.get("kind") == RunEvent.RUN_END]
    t_end = max([trace_end, *ends])
    return Context(
        t0=int(t0),
        t_end=int(t_end),
        teardown=int(min([*ends, t_end])),
        nodes=nodes,
        subscriptions=subs,
        down=down,
        resets=resets,
        churn=[e for e in run.events if e.get("kind") == RunEvent.CHURN],
        publishes=log_publishes(run),
    )


def log_publishes(run: RunDir) -> list[dict[str, Any]]:
    """The workload's publish entries in events.jsonl (with a message id)."""
    return [e for e in run.events if e.get("kind") == RunEvent.PUBLISH and e.get("message_id")]


def _together(*actions):
    """Run independent Spark actions at once, each from its own thread;
    their results in order. A small input's action is mostly fixed latency
    (planning, scheduling, a round trip to a Connect server), which overlaps."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(actions)) as pool:
        futures = [pool.submit(action) for action in actions]
        return [f.result() for f in futures]


def messages(spark, E, publishes: list[dict[str, Any]]):
    """Per message: first publish time, topic and publishers, from
    PUBLISH_MESSAGE in the traces and, for messages no trace shows published,
    the workload's publish entries in events.jsonl."""
    from pyspark.sql import functions as F

    M_trace = (
        E.where(F.col("type") == PUBLISH)
        .groupBy("msg")
        .agg(
            F.min("ts").alias("publish_ts"),
            F.min("topic").alias("topic"),
            F.array_sort(F.collect_set("node")).alias("publishers"),
        )
    )
    if not publishes:
        return M_trace
    rows = []
    for p in publishes:
        pubs = [p["node"]] if p.get("node") else list(p.get("via") or [])
        rows.append((str(p["message_id"]).lower(), int(p["t_ns"]), p.get("topic"), sorted(pubs)))
    M_log = (
        local_frame(
            spark, rows, [("msg", "string"), ("publish_ts", "long"), ("topic", "string"),
                          ("publishers", "array<string>")]
        )
        .groupBy("msg")
        .agg(
            F.min("publish_ts").alias("publish_ts"),
            F.min("topic").alias("topic"),
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("publishers")))).alias("publishers"),
        )
    )
    return M_trace.unionByName(M_log.join(M_trace.select("msg"), "msg", "left_anti"))


def first_deliveries(E):
    """Each node's first DELIVER_MESSAGE of each message (the earliest in
    trace order) and the peer it came from."""
    from pyspark.sql import functions as F

    first = F.min(F.struct("ts", "seq", "peer"))
    return (
        E.where(F.col("type") == DELIVER)
        .groupBy("msg", "node")
        .agg(first.alias("first"))
        .select("msg", "node", F.col("first.ts").alias("deliver_ts"), F.col("first.peer").alias("from_peer"))
    )


def duplicates(E):
    """Per message: its DUPLICATE_MESSAGE events."""
    from pyspark.sql import functions as F

    return E.where(F.col("type") == DUPLICATE).groupBy("msg").agg(F.count(F.lit(1)).alias("duplicates"))


def time_series_control(E, t0: int):
    """Per second of event time: what went on the wire and what was delivered
    (unordered: the driver sorts the few rows)."""
    from pyspark.sql import functions as F

    esec = F.floor((F.col("ts") - F.lit(t0)) / NS).cast("long")
    send = F.col("type") == SEND_RPC
    return (
        E.where(F.col("type").isin(SEND_RPC, RECV_RPC, DELIVER, DUPLICATE, DROP_RPC))
        .withColumn("t_s", esec)
        .groupBy("t_s")
        .agg(
            F.sum(F.when(send, F.col("n_msgs")).otherwise(0)).alias("publish"),
            F.sum(F.when(F.col("type") == DELIVER, 1).otherwise(0)).alias("deliver"),
            F.sum(F.when(F.col("type") == DUPLICATE, 1).otherwise(0)).alias("duplicate"),
            F.sum(F.when(send, F.col("n_graft")).otherwise(0)).alias("graft"),
            F.sum(F.when(send, F.col("n_prune")).otherwise(0)).alias("prune"),
            F.sum(F.when(send, F.col("n_ihave")).otherwise(0)).alias("ihave"),
            F.sum(F.when(send, F.col("n_iwant")).otherwise(0)).alias("iwant"),
            F.sum(F.when(send, F.col("n_idontwant")).otherwise(0)).alias("idontwant"),
            F.sum(F.when(F.col("type") == RECV_RPC, F.col("n_idontwant_ids")).otherwise(0)).alias(
                "idontwant_ids_received"),
            F.sum(F.when(send, 1).otherwise(0)).alias("rpcs"),
            F.sum(F.when(send, F.col("size")).otherwise(0)).alias("bytes"),
            F.sum(F.when(F.col("type") == DROP_RPC, 1).otherwise(0)).alias("dropped"),
        )
    )


def short_links(counts: pd.DataFrame, traced: list[str]) -> list[tuple[str, str, int]]:
    """(src, dst, received): the directed links whose receiver, one that
    wrote a trace, recorded fewer RECV_RPCs from the sender than the sender
    recorded SEND_RPCs to it (from event_counts' rows). Only their sends can
    be unreceived."""
    rpcs = counts[counts["peer"].notna()]
    sent = rpcs.loc[rpcs["type"] == SEND_RPC, ["node", "peer", "events"]].rename(
        columns={"node": "src", "peer": "dst", "events": "sent"}
    )
    got = rpcs.loc[rpcs["type"] == RECV_RPC, ["node", "peer", "events"]].rename(
        columns={"node": "dst", "peer": "src", "events": "received"}
    )
    both = sent.merge(got, on=["src", "dst"], how="left").fillna({"received": 0})
    short = both[(both["sent"] > both["received"]) & both["dst"].isin(set(traced))]
    return sorted((str(a), str(b), int(r)) for a, b, r in short[["src", "dst", "received"]].itertuples(index=False))


def unreceived_rpcs(spark, E, short: list[tuple[str, str, int]]) -> pd.DataFrame:
    """SEND_RPCs their receiver never recorded: on each short link (`short`:
    src, dst, received; see short_links) the sends beyond the receiver's
    RECV_RPC count, taken as the last ones (links deliver in order); one row
    (dst, ts, msg) per such send. Only the short links' sends are ordered,
    not every send of the run, and with none there is no Spark job. Whether
    each was lost to churn or still in flight at the end is decided on the
    driver (deliveries.in_flight)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not short:
        return pd.DataFrame({"dst": pd.Series([], dtype="object"), "ts": pd.Series([], dtype="int64"),
                             "msg": pd.Series([], dtype="object")})
    links = local_frame(spark, short, [("src", "string"), ("dst", "string"), ("received", "long")])
    sends = E.where(F.col("type") == SEND_RPC).select(
        F.col("node").alias("src"), F.col("peer").alias("dst"), "ts", "seq", "msg"
    )
    w = Window.partitionBy("src", "dst").orderBy("ts", "seq")
    return (
        sends.join(F.broadcast(links), ["src", "dst"])
        .withColumn("k", F.row_number().over(w))
        .where(F.col("k") > F.col("received"))
        .select("dst", "ts", "msg")
        .toArrow()
        .to_pandas()
    )


def events_frame(spark, ingested: IngestResult):
    """The ingested events as a DataFrame: a small run's table handed over
    as it is (a relation in memory, one chunk: ingest.in_memory_table; no
    Parquet reader and no file listing to start, which on a new JVM is a
    good part of a small run's analysis), else a scan of the Parquet files
    (vectorised, column-pruned, skipping the row groups of the event types a
    query does not read). Either way compute checks that every decoded event
    arrived (analysis/completeness.py)."""
    schema = spark_schema(EVENTS_COLUMNS)
    if ingested.table is not None:
        return spark.createDataFrame(ingested.table, schema=schema)
    return spark.read.schema(schema).parquet(str(ingested.events_dir))


def compute(spark, run: RunDir, ingested: IngestResult, progress=None) -> dict[str, Any]:
    """All the metrics of a run: writes RUN_DIR/metrics/*.parquet, returns the summary.

    Spark actions over the events in two rounds, each round's at once:
    the event counts (per node, type and link), structure events, messages
    and first deliveries; then the control time series (its seconds count
    from t0, which may come from the first round) and the unreceived RPCs of
    the links the first round found short. Everything after them is
    driver-side work on what they returned, the expected recipients and
    their deliveries first
    (analysis/deliveries.py)."""

    def step(name: str) -> None:
        if progress:
            progress(name)

    out_dir = run.metrics_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    _size_session(spark, ingested.events)
    # The events are not cached: each action scans them for the few columns
    # it reads, which costs less than building an in-memory copy of every
    # column first (docs/metrics.md).
    E = events_frame(spark, ingested)

    step("event counts, structure events, messages, first deliveries")
    counts, structure, msgs, first = _together(
        lambda: event_counts(E).toArrow().to_pandas(),
        lambda: structure_events(E),
        lambda: messages(spark, E, log_publishes(run)).join(duplicates(E), "msg", "left").toArrow().to_pandas(),
        lambda: first_deliveries(E).toArrow(),
    )
    check_complete(ingested.events, ingested.node_records(), counts)
    per_node = per_node_counts(counts)
    ctx = build_context(run, per_node, structure)
    short = short_links(counts, sorted(per_node["node"].dropna()))

    step("control time series, unreceived RPCs")
    time_series, unmatched = _together(
        lambda: time_series_control(E, ctx.t0).toArrow().to_pandas(),
        lambda: unreceived_rpcs(spark, E, short),
    )
    d = _deliveries(run, ctx, per_node, msgs, first, out_dir, step)
    step("time series")
    _write_pandas(dlv.time_series_delivery(d.frame, ctx.t0), out_dir / "timeseries_delivery.parquet")
    _write_pandas(time_series.sort_values("t_s", ignore_index=True), out_dir / "timeseries_control.parquet")
    mesh = _mesh(run, ctx, structure, msgs, out_dir, step)
    router = _router_figures(run, ctx, structure, per_node, mesh.sybils, out_dir, step)
    step("per-node load")
    nodes_df = _per_node_load(ctx, per_node, d.frame, out_dir)

    step("messages in flight at the end")
    in_flight = dlv.in_flight(unmatched, ctx.down, ctx.t_end, d.frame)

    recovery, router["repair_after_loss"], router["subtree_repair"], router["tree"] = _after_churn(
        run, ctx, per_node, d, first, out_dir, step)

    summary = summarize(
        run, ctx, per_node, nodes_df, d.per_message, d.per_message[d.per_message["expected"] > 0], d.latency,
        mesh.samples, recovery,
        unexpected=d.unexpected,
        has_lb=d.has_lower_bound,
        has_sizes=bool(per_node["bytes_sent"].notna().any()) if len(per_node) else False,
        in_flight=in_flight,
        stayed_up=dlv.stayed_up(d.table, ctx.down),
        router=router,
    )
    return _with_structure_figures(summary, run, ctx, per_node, nodes_df, d, mesh)


def _after_churn(run: RunDir, ctx: Context, per_node: pd.DataFrame, d: _Deliveries, first: Any, out_dir: Path,
                 step: Callable[[str], None]
                 ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """Recovery after churn, the time to repair after each node lost and
    its subtree (analysis/loss_repair.py), and the tree figures of a run
    with tree files (analysis/tree.py). `first`: the first deliveries."""
    step("recovery after churn")
    recovery = recovery_after_churn(d.per_message, ctx.churn, ctx.t0, ctx.t_end)
    loss = loss_summary(repair_after_loss(d.per_message, ctx.resets, ctx.t0))
    subtree = subtree_summary(subtree_repair(first.select(["msg", "node", "from_peer"]).to_pandas(), d.frame,
                                             d.publishers, ctx.resets, ctx.down, ctx.t0))
    step("tree figures")
    return recovery, loss, subtree, tree_summary(run.path, per_node, ctx.subscriptions, ctx.down, ctx.resets,
                                        (ctx.t0, ctx.t_end), out_dir)


def _with_structure_figures(summary: dict[str, Any], run: RunDir, ctx: Context, per_node: pd.DataFrame,
                            nodes_df: pd.DataFrame, d: _Deliveries, mesh: _Mesh) -> dict[str, Any]:
    """The summary with the mesh snapshots, the honest-node and sybil figures
    and, where the topology declares implementations, each one's figures."""
    summary["mesh_snapshots"] = [{"t_s": (snap.t_ns - ctx.t0) / NS, "label": snap.label,
                                  "down": sorted({n for n, start, end in ctx.down if start <= snap.t_ns < end})}
                                 for snap in mesh.snapshots]
    summary.update(honest_summary(run.topology_nodes(), d.frame, d.publishers))
    summary.update(mesh_sybil_summary(mesh.sybil_samples, mesh.sybils, mesh.victims, mesh.first_publish, ctx.t0,
                                      ctx.teardown))
    if declared(run.topology_nodes()):
        summary["implementations"] = per_implementation(run.topology_nodes(), nodes_df, per_node, d.frame)
    return summary


@dataclass(frozen=True)
class _Deliveries:
    """What compute's delivery stage hands on: the deliveries (as Arrow and
    pandas), the per-message table, the latency distribution, the
    deliveries nobody expected, whether a lower bound was computed, and
    each message's publishers."""

    table: Any
    frame: pd.DataFrame
    per_message: pd.DataFrame
    latency: Any
    unexpected: Any
    has_lower_bound: bool
    publishers: dict[str, list[str]]


def _deliveries(run: RunDir, ctx: Context, per_node: pd.DataFrame, msgs: pd.DataFrame, first: Any, out_dir: Path,
                step: Callable[[str], None]) -> _Deliveries:
    """Expected recipients and their first deliveries, the lower bound,
    per-message figures, latency CDF and duplicates histogram (each written)."""
    step("expected recipients and their deliveries")
    rows, unmatched_deliveries = dlv.with_first_deliveries(
        dlv.expected_recipients(msgs, ctx.subscriptions, ctx.down), first
    )
    publishers = {m: list(p) for m, p in zip(msgs["msg"], msgs["publishers"])}
    _write_pandas(first_delivery_tree(first, publishers), out_dir / "first_deliveries.parquet")

    step("lower bound (shortest paths)")
    edges = run.topology_edges()
    sources = sorted(
        set(per_node.loc[per_node["published"] > 0, "node"].dropna())
        | {p for e in ctx.publishes for p in ([e["node"]] if e.get("node") else e.get("via") or [])}
    )
    dist = run.network_paths() or (shortest_paths(edges, sources) if edges else None)
    table = dlv.deliveries_table(rows, publishers, dist)
    _write_table(table, out_dir / "deliveries.parquet")
    frame = table.to_pandas()

    step("per-message metrics")
    msg_pd = dlv.per_message(msgs, frame, ctx.t0)
    _write_pandas(msg_pd, out_dir / "messages.parquet")
    unexpected = dlv.unexpected_deliveries(unmatched_deliveries.to_pandas(), publishers)

    step("latency distribution")
    lat = dlv.latency_distribution(frame, CDF_POINTS)
    _write_pandas(dlv.cdf_frame(lat, CDF_POINTS), out_dir / "latency_cdf.parquet")
    dup_hist = (
        msg_pd.groupby("duplicates").size().reset_index(name="messages").sort_values("duplicates")
        if len(msg_pd)
        else pd.DataFrame({"duplicates": pd.Series([], dtype="int64"), "messages": pd.Series([], dtype="int64")})
    )
    _write_pandas(dup_hist, out_dir / "duplicates_hist.parquet")
    return _Deliveries(table, frame, msg_pd, lat, unexpected, bool(edges), publishers)


@dataclass(frozen=True)
class _Mesh:
    samples: pd.DataFrame
    snapshots: list
    sybil_samples: pd.DataFrame
    sybils: set[str]
    victims: set[str]
    first_publish: int | None


def _mesh(run: RunDir, ctx: Context, structure: Any, msgs: pd.DataFrame, out_dir: Path,
          step: Callable[[str], None]) -> _Mesh:
    """Mesh degree over time, the mesh links at the snapshots, and the sybil
    share of honest meshes (each written)."""
    step("mesh degree")
    mesh_samples, mesh_hist = mesh_degree(structure, ctx)
    _write_pandas(mesh_samples, out_dir / "mesh_degree.parquet")
    _write_pandas(mesh_hist, out_dir / "mesh_degree_hist.parquet")
    first_publish = int(msgs["publish_ts"].min()) if len(msgs) else None
    snapshots = snapshot_times(first_publish, ctx.churn, ctx.t0, ctx.teardown)
    links = mesh_link_changes(structure, ctx.resets)
    _write_pandas(mesh_links_at(links, snapshots, ctx.t0), out_dir / "mesh_links.parquet")
    sybils, victims = sybil_names(run.topology_nodes()), victim_names(run.topology_nodes())
    sybil_samples = mesh_sybil_samples(links, sybils, ctx.t0, ctx.t_end)
    _write_pandas(sybil_samples, out_dir / "mesh_sybils.parquet")
    return _Mesh(mesh_samples, snapshots, sybil_samples, sybils, victims, first_publish)


def _router_figures(run: RunDir, ctx: Context, structure: Any, per_node: pd.DataFrame, sybils: set[str],
                    out_dir: Path, step: Callable[[str], None]) -> dict[str, Any]:
    """Gossipsub v1.1/v1.2's figures: IDONTWANT, PRUNE, mesh churn, peer
    scores (the tables written; the summary groups returned)."""
    step("mesh churn, peer scores")
    t0 = ctx.t0
    churn = mesh_churn(structure, t0)
    _write_pandas(churn, out_dir / "mesh_churn.parquet")
    scores = read_scores(run.path)
    _write_pandas(scores_over_time(scores, t0), out_dir / "scores.parquet")
    sybil_ids = {str(n["peer_id"]) for n in run.topology_nodes() if n.get("name") in sybils and n.get("peer_id")}
    _write_pandas(scores_by_side(run.path, sybil_ids, sybils, t0), out_dir / "sybil_scores.parquet")
    duration_s = (ctx.t_end - t0) / NS if ctx.t_end > t0 else 0.0
    return {
        "idontwant": idontwant_summary(per_node, ctx.publishes),
        "prune": prune_summary(per_node),
        "mesh_churn": churn_summary(churn, len(ctx.nodes), duration_s),
        "scores": score_summary(scores),
    }


def _per_node_load(ctx: Context, per_node: pd.DataFrame, deliveries: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    """nodes.parquet: every node's counts and its own delivery ratio."""
    nodes_df = pd.DataFrame({"node": ctx.nodes})
    nodes_df = nodes_df.merge(per_node[per_node["node"].notna()], on="node", how="left").merge(
        dlv.per_node_delivery(deliveries), on="node", how="left"
    )
    count_cols = [c for c in nodes_df.columns if c not in ("node", "first_ts", "last_ts", "latency_p50_ms")]
    nodes_df[count_cols] = nodes_df[count_cols].fillna(0).astype("int64")
    nodes_df["delivery_ratio"] = nodes_df["delivered_expected"] / nodes_df["expected"].where(nodes_df["expected"] > 0)
    _write_pandas(nodes_df, out_dir / "nodes.parquet")
    return nodes_df


def _size_session(spark, n_events: int) -> None:
    """Shuffle partitions sized to the data and the cores (about 250k events
    each, at most two per core); adaptive execution wherever there is more
    than one (it coalesces them and picks joins from real sizes: with one
    partition it has nothing to adapt and only adds a job per stage);
    whole-stage code generation only where it pays off: on small inputs
    compiling the generated code costs more than it saves, and on tiny ones
    expressions are interpreted (Spark's `NO_CODEGEN` factory mode, the
    interpreted twin of every generated projection, ordering and predicate)."""
    from analysis.spark import parallelism

    cores = parallelism(spark)
    partitions = max(1, min(2 * cores, n_events // 250_000))
    spark.conf.set("spark.sql.codegen.wholeStage", "true" if n_events >= CODEGEN_MIN_EVENTS else "false")
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN" if n_events < INTERPRETED_MAX_EVENTS else "FALLBACK")
    spark.conf.set("spark.sql.adaptive.enabled", "true" if partitions > 1 else "false")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))


def summarize(
    run: RunDir,
    ctx: Context,
    per_node: pd.DataFrame,
    nodes_df: pd.DataFrame,
    msg_pd: pd.DataFrame,
    with_exp: pd.DataFrame,
    lat: dlv.LatencyDistribution,
    mesh_samples: pd.DataFrame,
    recovery: list[dict[str, Any]],
    unexpected: int,
    has_lb: bool,
    has_sizes: bool,
    in_flight: dict[str, int],
    stayed_up: dict[str, Any],
    router: dict[str, Any],
) -> dict[str, Any]:
    """summary.json's figures from the stages' driver-side results; `router`:
    the gossipsub v1.1/v1.2 figures (IDONTWANT, PRUNE and PX, mesh churn,
    peer scores) and the tree figures (analysis/tree.py), already summarized."""
    t0 = ctx.t0
    n_events = int(per_node["events"].sum()) if len(per_node) else 0
    delivered = int(msg_pd["delivered"].sum())
    expected = int(msg_pd["expected"].sum())
    n_messages = len(msg_pd)
    duplicates = int(msg_pd["duplicates"].sum())

    def total(col: str) -> int:
        return int(per_node[col].sum()) if len(per_node) else 0

    transmissions = total("msgs_sent")
    all_deliveries = delivered + unexpected
    summary: dict[str, Any] = {
        "run": run.name,
        "backend": run.manifest.get("backend"),
        "nodes": len(ctx.nodes),
        "events": n_events,
        "messages": n_messages,
        "expected_deliveries": expected,
        "deliveries": delivered,
        "unexpected_deliveries": unexpected,
        "deliver_events": total("delivered"),
        "delivery_ratio": delivered / expected if expected else None,
        "messages_lost": int((with_exp["delivered"] == 0).sum()),
        "messages_complete": int((with_exp["delivered"] == with_exp["expected"]).sum()),
        "min_message_delivery_ratio": float(with_exp["delivery_ratio"].min()) if len(with_exp) else None,
        "latency_ms": _latency_figures(lat),
        "duplicates": duplicates,
        "duplicates_per_message": duplicates / n_messages if n_messages else None,
        "duplicates_per_delivery": duplicates / all_deliveries if all_deliveries else None,
        "transmissions": transmissions,
        "amplification": transmissions / all_deliveries if all_deliveries else None,
        "control": {"publish": transmissions, "deliver": total("delivered"),
                    **{k: total(f"{k}_sent") for k in ("graft", "prune", "ihave", "iwant")}},
        "rpcs": {"sent": total("rpcs_sent"), "received": total("rpcs_received"), "dropped": total("rpcs_dropped")},
        "bytes": {k: int(nodes_df[f"bytes_{k}"].sum()) if has_sizes else None for k in ("sent", "received", "dropped")},
        "load": _load_figures(nodes_df, has_sizes),
        "stretch": _stretch_figures(lat),
        "lower_bound_available": has_lb,
        "mesh_degree": _mesh_degree_figures(mesh_samples),
        **_recovery_figures(recovery),
        "in_flight": in_flight,
        "stayed_up": stayed_up,
        **router,
        "t0_ns": t0,
        "duration_s": (ctx.t_end - t0) / NS if ctx.t_end > t0 else 0.0,
    }
    summary.update(flat_aliases(summary))
    return summary


def _latency_figures(lat: dlv.LatencyDistribution) -> dict[str, Any]:
    return {"p50": _pct(lat.q, 50), "p90": _pct(lat.q, 90), "p99": _pct(lat.q, 99), "max": lat.max, "mean": lat.mean}


def _stretch_figures(lat: dlv.LatencyDistribution) -> dict[str, Any]:
    return {
        "p50": _pct(lat.stretch_q, 0) if lat.stretch_n else None,
        "p90": _pct(lat.stretch_q, 1) if lat.stretch_n else None,
        "p99": _pct(lat.stretch_q, 2) if lat.stretch_n else None,
    }


def _load_figures(nodes_df: pd.DataFrame, has_sizes: bool) -> dict[str, Any]:
    """How evenly the nodes carried the run: bytes sent where RPC sizes are
    known, else RPCs sent."""
    basis = "bytes_sent" if has_sizes else "rpcs_sent"
    load = nodes_df[basis].astype(float).tolist()
    mean_load = sum(load) / len(load) if load else 0.0
    return {"basis": basis, "gini": gini(load),
            "max_over_mean": (max(load) / mean_load) if load and mean_load > 0 else None}


def _mesh_degree_figures(mesh_samples: pd.DataFrame) -> dict[str, Any]:
    values = mesh_samples["degree"] if len(mesh_samples) else pd.Series([], dtype=float)
    return {
        "mean": float(values.mean()) if len(values) else None,
        "p50": float(values.median()) if len(values) else None,
        "min": int(values.min()) if len(values) else None,
        "max": int(values.max()) if len(values) else None,
    }


def _recovery_figures(recovery: list[dict[str, Any]]) -> dict[str, Any]:
    """recovery, recovery_max_s (None when a churn event never recovered)
    and recovered_all (None without churn to recover from)."""
    done = [r for r in recovery if r["recovered"] is not None]
    recovered = all(r["recovered"] for r in done)
    return {
        "recovery": recovery,
        "recovery_max_s": max((r["recovery_s"] for r in done), default=0.0) if recovered else None,
        "recovered_all": recovered if done else None,
    }


def flat_aliases(summary: dict[str, Any]) -> dict[str, Any]:
    """Flat names for the nested figures, usable in expectations."""
    out: dict[str, Any] = {}
    for k in ("p50", "p90", "p99", "max", "mean"):
        out[f"latency_{k}_ms"] = summary["latency_ms"][k]
    for k, v in summary["control"].items():
        out[f"control_{k}"] = v
    for k, v in summary["stretch"].items():
        out[f"stretch_{k}"] = v
    for k, v in summary["mesh_degree"].items():
        out[f"mesh_degree_{k}"] = v
    for k, v in summary["rpcs"].items():
        out[f"rpcs_{k}"] = v
    for k, v in summary["bytes"].items():
        out[f"bytes_{k}"] = v
    out["load_gini"] = summary["load"]["gini"]
    out["load_max_over_mean"] = summary["load"]["max_over_mean"]
    out["dropped_rpcs"] = summary["rpcs"]["dropped"]
    for k, v in summary["in_flight"].items():
        out[k] = v
    for group in ALWAYS_ALIASED:
        for k, v in summary[group].items():
            out[f"{group}_{k}"] = v
    for group in SOMETIMES_ALIASED:
        for k, v in (summary.get(group) or {}).items():
            if not isinstance(v, list):
                out[f"{group}_{k}"] = v
    return out


def prune_summary(per_node: pd.DataFrame) -> dict[str, int]:
    """summary.json's `prune`: PRUNE control entries sent and received (in
    v1.1 and later each starts a backoff at both ends; go's trace meta does
    not record its duration) and the peers they offered (peer exchange)."""

    def total(col: str) -> int:
        return int(per_node[col].sum()) if len(per_node) else 0

    return {
        "sent": total("prune_sent"),
        "received": total("prune_received"),
        "px_peers_sent": total("px_sent"),
        "px_peers_received": total("px_received"),
    }


def _degree_steps(changes: dict[tuple, list[tuple]]) -> dict[tuple, list[tuple]]:
    """Per (node, topic): the mesh degree's steps (ts, seq, peer, delta), from
    each link's changes (analysis/mesh.py)."""

    def peer_key(peer):  # Spark orders nulls first
        return (peer is not None, peer or "")

    steps: dict[tuple, list[tuple]] = defaultdict(list)
    for (node, topic, peer), evs in changes.items():
        evs.sort()
        state = 0
        for ts, seq, new in evs:
            if new != state:
                steps[(node, topic)].append((ts, seq, peer_key(peer), new - state))
                state = new
    return steps


def _degree_samples(frames: list[pd.DataFrame]) -> pd.DataFrame:
    if not frames:
        return pd.DataFrame({"t_s": pd.Series([], dtype="int64"), "node": pd.Series([], dtype="object"),
                             "topic": pd.Series([], dtype="object"), "degree": pd.Series([], dtype="int32")})
    samples = pd.concat(frames, ignore_index=True)
    samples["degree"] = samples["degree"].astype("int32")
    return samples.sort_values(["t_s", "node", "topic"], kind="stable").reset_index(drop=True)


def mesh_degree(rows: pd.DataFrame, ctx: Context) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each node's mesh per topic, rebuilt from its GRAFT/PRUNE events (peer
    added to / removed from the mesh), REMOVE_PEER (gone from every topic's
    mesh), LEAVE (mesh of that topic emptied) and node_down (all state lost),
    sampled at t0 + k seconds while the node is up and subscribed.

    `rows` are the structure events (structure_events); the driver replays
    them, with numpy for the per-second grid."""
    import numpy as np

    steps = _degree_steps(mesh_link_changes(rows, ctx.resets))
    t0 = ctx.t0
    k_end = max(0, math.ceil((ctx.t_end - ctx.t0) / NS))
    ks = np.arange(k_end + 1, dtype=np.int64)
    sample_ts = t0 + ks * NS
    subs: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for node, topic, start, end in ctx.subscriptions:
        subs[(node, topic)].append((start, end))
    downs: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for node, start, end in ctx.down:
        downs[node].append((start, end))
    frames = []
    for (node, topic), intervals in sorted(subs.items()):
        st = sorted(steps.get((node, topic), ()))
        degree = np.zeros(len(ks), dtype=np.int64)
        if st:
            last_k: dict[int, int] = {}
            level = 0
            for ts, _seq, _peer, delta in st:
                level += delta
                last_k[max(math.ceil((ts - t0) / NS), 0)] = level
            kk = np.array(sorted(last_k), dtype=np.int64)
            vals = np.array([last_k[k] for k in kk], dtype=np.int64)
            idx = np.searchsorted(kk, ks, side="right") - 1
            degree = np.where(idx >= 0, vals[np.maximum(idx, 0)], 0)
        keep = np.zeros(len(ks), dtype=bool)
        for start, end in intervals:
            keep |= (start <= sample_ts) & (sample_ts < end)
        for start, end in downs.get(node, ()):
            keep &= ~((start <= sample_ts) & (sample_ts < end))
        if keep.any():
            frames.append(pd.DataFrame({"t_s": ks[keep], "node": node, "topic": topic, "degree": degree[keep]}))
    samples = _degree_samples(frames)
    hist = (
        samples.groupby("degree").size().reset_index(name="samples")
        if len(samples)
        else pd.DataFrame({"degree": pd.Series([], dtype="int32"), "samples": pd.Series([], dtype="int64")})
    )
    return samples, hist
