"""Resolution: overlay, latency models, selectors, churn expansion, steady
churn, the workload, and determinism for a seed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.experiment import graphs
from orchestrator.errors import InputError
from orchestrator.experiment.spec import load_experiment, parse_experiment, resolved_to_yaml

ROOT = Path(__file__).resolve().parents[1]


def exp(text: str, name: str = "e.yaml"):
    return parse_experiment(textwrap.dedent(text), name)


def nodes_yaml(n: int = 20, router: str = "gossipsub", overlay: str = "{type: random, degree: 4}") -> str:
    return f"nodes: {{count: {n}, router: {router}, topics: [t]}}\noverlay: {overlay}\n"


# -- overlay


def test_random_overlay_is_n_connect():
    r = exp(nodes_yaml(50, overlay="{type: random, degree: 5}")).resolve()
    names = [n.name for n in r.nodes]
    assert names[:3] == ["n0", "n1", "n2"] and names[-1] == "n49"
    assert list(r.edges) == sorted(set(r.edges))
    assert all(a < b for a, b in r.edges)
    deg = graphs.degrees(names, r.edges)
    assert min(deg.values()) >= 5  # each dialled 5, may be dialled more
    assert 5 * 50 / 2 < len(r.edges) <= 5 * 50
    assert graphs.components(names, r.edges) == 1


def test_random_regular_has_exact_degrees():
    for n, d, conn in ((30, 4, "true"), (100, 10, "true"), (12, 9, "true"), (10, 1, "false"), (9, 2, "false")):
        overlay = f"{{type: random_regular, degree: {d}, connected: {conn}}}"
        r = exp(nodes_yaml(n, overlay=overlay)).resolve()
        deg = graphs.degrees([x.name for x in r.nodes], r.edges)
        assert set(deg.values()) == {d}, (n, d)


def test_explicit_and_full_overlays():
    text = """\
    nodes: {count: 4, router: floodsub}
    overlay:
      type: explicit
      edges: [[n1, n0], [n2, n3], [n0, n1]]
    """
    assert exp(text).resolve().edges == (("n0", "n1"), ("n2", "n3"))
    r = exp(nodes_yaml(5, overlay="{type: full}")).resolve()
    assert len(r.edges) == 10


def test_group_node_names_and_prefix():
    text = """\
    groups:
      - {name: edge, count: 3, router: gossipsub}
      - {name: core, count: 2, router: floodsub, prefix: c}
    overlay: {type: full}
    """
    r = exp(text).resolve()
    assert [n.name for n in r.nodes] == ["edge-0", "edge-1", "edge-2", "c0", "c1"]
    assert r.node("c1").router == "floodsub" and r.node("c1").group == "core"


# -- links


def test_uniform_latency_within_bounds_symmetric_and_for_any_pair():
    text = nodes_yaml(40) + "links: {latency: {model: uniform, min_ms: 10, max_ms: 150}, jitter_ms: 3, loss: 0.02}\n"
    r = exp(text).resolve()
    names = [n.name for n in r.nodes]
    values = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            p = r.link(a, b)
            assert p == r.link(b, a)
            assert 10 <= p.latency_ms <= 150 and p.jitter_ms == 3 and p.loss == 0.02
            values.append(p.latency_ms)
    assert len(set(values)) > len(values) * 0.9  # drawn per pair
    for (a, b), p in r.links.items():
        assert (a, b) in r.edges and r.link(a, b) == p
    assert set(r.links) == set(r.edges)
    # the same pair gets the same draw whatever else changes, a new seed redraws
    assert exp(text).resolve().link("n3", "n7") == r.link("n3", "n7")
    assert exp(text).resolve(seed=99).link("n3", "n7") != r.link("n3", "n7")


def test_regions_matrix():
    text = """\
    groups:
      - {name: a, count: 4, router: gossipsub, region: [eu, us]}
      - {name: b, count: 2, router: gossipsub, region: asia}
    overlay: {type: full}
    links:
      latency:
        model: regions
        matrix:
          eu: {eu: 5, us: 40, asia: 110}
          us: {us: 8}
          asia: {asia: 6, us: 75}
    """
    r = exp(text).resolve()
    assert [n.region for n in r.nodes] == ["eu", "us", "eu", "us", "asia", "asia"]
    assert r.link("a-0", "a-2").latency_ms == 5
    assert r.link("a-0", "a-1").latency_ms == 40
    assert r.link("b-1", "a-1").latency_ms == 75
    assert r.link("a-2", "b-0").latency_ms == 110
    assert r.link("b-0", "b-1").latency_ms == 6


def test_uplink_per_group_overrides_links():
    text = """\
    groups:
      - {name: a, count: 2, router: gossipsub, uplink: 5mbit}
      - {name: b, count: 2, router: gossipsub}
    overlay: {type: full}
    links: {latency: 10, uplink: 1gbit}
    """
    r = exp(text).resolve()
    assert r.node("a-0").uplink_bps == 5_000_000 and r.node("b-1").uplink_bps == 1_000_000_000
    with pytest.raises(InputError, match="bytes per second"):
        exp(text.replace("5mbit", "5mbps"))


# -- selectors and churn


def churn_exp(timeline: str, n: int = 20, extra: str = "") -> str:
    return textwrap.dedent("""\
    groups:
      - {name: a, count: %d, router: gossipsub, topics: [t]}
      - {name: b, count: 10, router: gossipsub, topics: [t]}
    overlay: {type: random, degree: 4}
    workload: {messages: 10, interval: 1, publishers: {nodes: [b-0]}}
    churn:
      timeline:
    """) % n + textwrap.indent(textwrap.dedent(timeline), "    ") + extra


def test_selectors_count_percent_group_names():
    r = exp(churn_exp("""\
    - {at: 1, action: pause, select: {count: 3}}
    - {at: 2, action: stop, select: {percent: 10, group: a}}
    - {at: 3, action: kill, select: {nodes: [a-4, b-2]}}
    - {at: 4, action: disconnect, select: {group: b, count: 2}, peers: {group: a}}
    - {at: 5, action: leave, select: {all: true, group: b}}
    """)).resolve()
    acts = {c.at: c for c in r.churn}
    assert len(acts[1].nodes) == 3 and len(set(acts[1].nodes)) == 3
    assert len(acts[2].nodes) == 2 and all(n.startswith("a-") for n in acts[2].nodes)
    assert acts[3].nodes == ("a-4", "b-2")
    assert len(acts[4].nodes) == 2 and all(n.startswith("b-") for n in acts[4].nodes)
    assert acts[4].peers == tuple(f"a-{i}" for i in range(20))
    # leave applies to the reachable nodes of b (lifecycle: not killed b-2,
    # not the paused; a partial disconnect keeps a node reachable)
    reachable_b = {f"b-{i}" for i in range(10)} - {"b-2"} - set(acts[1].nodes)
    assert acts[5].topic == "t" and set(acts[5].nodes) == reachable_b
    # random picks never take a node the timeline names (a-4 is killed at t=3)
    assert "a-4" not in acts[1].nodes + acts[2].nodes + acts[4].nodes


def test_random_selectors_pick_only_eligible_nodes():
    r = exp(churn_exp("""\
    - {at: 1, action: kill, select: {count: 15, group: a}}
    - {at: 2, action: kill, select: {count: 5, group: a}}
    - {at: 3, action: start, select: {count: 20, group: a}}
    """)).resolve()
    first, second, third = r.churn
    assert not set(first.nodes) & set(second.nodes)
    assert set(third.nodes) == {f"a-{i}" for i in range(20)}
    with pytest.raises(InputError, match=r"t=2s: selects 6 nodes to kill but only 5"):
        exp(churn_exp("""\
        - {at: 1, action: kill, select: {count: 15, group: a}}
        - {at: 2, action: kill, select: {count: 6, group: a}}
        """)).resolve()


def test_for_expands_to_action_and_undo():
    r = exp(churn_exp("""\
    - {at: 1, action: kill, select: a-1, for: 2}
    - {at: 1.5, action: stop, select: a-2, for: 1}
    - {at: 2, action: pause, select: a-3, for: 0.5}
    - {at: 2, action: disconnect, select: a-4, peers: [a-5, a-6], for: 3}
    - {at: 2, action: leave, select: a-7, for: 1}
    - every: 2
      from: 6
      until: 9
      action: kill
      select: {count: 1, group: b}
      for: 1
    """)).resolve()
    got = [(c.at, c.action, c.nodes, c.peers, c.topic) for c in r.churn]
    assert (1.0, "kill", ("a-1",), (), None) in got and (3.0, "start", ("a-1",), (), None) in got
    assert (1.5, "stop", ("a-2",), (), None) in got and (2.5, "start", ("a-2",), (), None) in got
    assert (2.0, "pause", ("a-3",), (), None) in got and (2.5, "unpause", ("a-3",), (), None) in got
    assert (2.0, "disconnect", ("a-4",), ("a-5", "a-6"), None) in got
    assert (5.0, "reconnect", ("a-4",), ("a-5", "a-6"), None) in got
    assert (2.0, "leave", ("a-7",), (), "t") in got and (3.0, "join", ("a-7",), (), "t") in got
    kills = [c for c in r.churn if c.action == "kill" and c.nodes[0].startswith("b-")]
    starts = [c for c in r.churn if c.action == "start" and c.nodes[0].startswith("b-")]
    assert [c.at for c in kills] == [6.0, 8.0] and [c.at for c in starts] == [7.0, 9.0]
    assert [c.nodes for c in kills] == [c.nodes for c in starts]
    assert [c.at for c in r.churn] == sorted(c.at for c in r.churn)
    assert all(c.source.startswith("churn.timeline[") for c in r.churn)


def test_steady_churn_fraction_and_sessions():
    text = nodes_yaml(100) + textwrap.dedent("""\
    workload: {messages: 5, interval: 1, publishers: {nodes: [n0, n1]}}
    churn:
      steady:
        fraction: 0.3
        action: stop
        session: {distribution: weibull, shape: 0.7, scale: 10}
        downtime: {distribution: exponential, mean: 3, min: 0.5}
        until: 200
    duration: 200
    """)
    r = exp(text).resolve()
    churned = {n for c in r.churn for n in c.nodes}
    assert len(churned) <= 30 and len(churned) > 20  # a few may never go down
    assert not churned & {"n0", "n1"}  # named publishers are never picked
    per_node: dict[str, list] = {}
    for c in r.churn:
        assert c.action in ("stop", "start") and c.source.startswith("churn.steady")
        per_node.setdefault(c.nodes[0], []).append(c)
    for acts in per_node.values():
        assert [a.action for a in acts] == ["stop", "start"] * (len(acts) // 2)
        for down, up in zip(acts[::2], acts[1::2]):
            assert up.at - down.at >= 0.5 - 1e-6 or up.at == 200
    assert max(c.at for c in r.churn) <= 200
    assert Counter(c.action for c in r.churn)["stop"] == Counter(c.action for c in r.churn)["start"]


def test_steady_selection_size_is_exact():
    text = nodes_yaml(50) + textwrap.dedent("""\
    churn:
      steady:
        fraction: 0.2
        session: {distribution: exponential, mean: 0.5}
        until: 100
    duration: 100
    """)
    r = exp(text).resolve()
    assert len({n for c in r.churn for n in c.nodes}) == 10


# -- workload


def test_injection_via_k_distinct_nodes():
    text = nodes_yaml(30) + "workload: {messages: 20, interval: 0.1, inject: 5, start: 2}\n"
    r = exp(text).resolve()
    assert [p.seq for p in r.publishes] == list(range(20))
    assert r.publishes[0].at == 2.0 and r.publishes[-1].at == pytest.approx(3.9)
    for p in r.publishes:
        assert p.publisher is None and len(p.via) == 5 and len(set(p.via)) == 5
    assert len({p.via for p in r.publishes}) > 15


def test_injection_skips_nodes_that_are_down():
    text = nodes_yaml(8) + textwrap.dedent("""\
    workload: {messages: 10, interval: 1, inject: 5}
    churn:
      timeline:
        - {at: 0, action: kill, select: [n0, n1, n2], for: 5}
    """)
    r = exp(text).resolve()
    for p in r.publishes:
        if p.at < 5:
            assert not set(p.via) & {"n0", "n1", "n2"} and len(p.via) == 5


def test_publishers_round_robin_skip_down_nodes():
    text = nodes_yaml(8) + textwrap.dedent("""\
    workload: {messages: 6, interval: 1, publishers: [n0, n1, n2]}
    churn:
      timeline:
        - {at: 0.5, action: kill, select: n1, for: 2}
    """)
    r = exp(text).resolve()
    assert [p.publisher for p in r.publishes] == ["n0", "n2", "n2", "n0", "n1", "n2"]
    assert all(p.via == (p.publisher,) for p in r.publishes)


def test_multiple_workloads_merge_by_time():
    text = """\
    groups:
      - {name: a, count: 4, router: gossipsub, topics: [x, y]}
    overlay: {type: full}
    workload:
      - {topic: x, messages: 3, interval: 1, publishers: [n0]}
      - {topic: y, messages: 2, interval: 1, start: 0.5, publishers: [n1]}
    """
    r = exp(text).resolve()
    assert [(p.seq, p.at, p.topic) for p in r.publishes] == [
        (0, 0.0, "x"), (1, 0.5, "y"), (2, 1.0, "x"), (3, 1.5, "y"), (4, 2.0, "x"),
    ]


def test_expectations_parsed():
    text = nodes_yaml(4, overlay="{type: full}") + "expectations: ['delivery_ratio >= 0.999', 'latency.p99_ms<1500', 'dup_ratio != 2e-3']\n"
    r = exp(text).resolve()
    assert [(e.metric, e.op, e.value) for e in r.expectations] == [
        ("delivery_ratio", ">=", 0.999), ("latency.p99_ms", "<", 1500.0), ("dup_ratio", "!=", 0.002),
    ]


def test_times_accept_units_and_default_duration():
    text = nodes_yaml(4, overlay="{type: full}") + "workload: {messages: 3, interval: 250ms, start: 1s}\nlinger: 2s\n"
    r = exp(text).resolve()
    assert [p.at for p in r.publishes] == [1.0, 1.25, 1.5]
    assert r.duration == 3.5 and r.end_time() == 3.5


def test_node_seeds_distinct_and_params_filled():
    r = exp(nodes_yaml(50) + "").resolve()
    assert len({n.seed for n in r.nodes}) == 50
    assert r.nodes[0].params["D"] == 6 and "gossip" not in r.nodes[0].params


# -- determinism and round trip


def test_same_seed_same_resolution_other_seed_differs():
    text = (ROOT / "topologies" / "quick.yaml").read_text()
    a = exp(text).resolve()
    assert exp(text).resolve().digest() == a.digest()
    assert exp(text).resolve(seed=a.seed).digest() == a.digest()
    b = exp(text).resolve(seed=2)
    assert b.digest() != a.digest() and b.edges != a.edges


def test_determinism_across_pythonhashseed():
    code = (
        "from pathlib import Path; from orchestrator.experiment.spec import load_experiment;"
        "import sys; print(load_experiment(Path(sys.argv[1])).resolve().digest())"
    )
    path = ROOT / "topologies" / "churn-30.yaml"
    digests = set()
    for hs in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hs}
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                             env=env, cwd=ROOT, check=True)
        digests.add(out.stdout.strip())
    assert digests == {load_experiment(path).resolve().digest()}


def test_resolved_yaml_round_trip(tmp_path):
    for name in ("quick.yaml", "churn-30.yaml", "regions-60.yaml"):
        e = load_experiment(ROOT / "topologies" / name)
        r = e.resolve(seed=7)
        text = resolved_to_yaml(r, e)
        assert f"digest {r.digest()}" in text
        again = parse_experiment(text, "experiment.resolved.yaml").resolve()
        assert again.digest() == r.digest(), name
        assert again.seed == 7
    # without the Experiment, the source file is read again
    r = load_experiment(ROOT / "topologies" / "quick.yaml").resolve()
    assert dataclasses.replace(parse_experiment(resolved_to_yaml(r), "x.yaml").resolve(), source=r.source) == r


def test_random_picks_skip_nodes_waiting_for_an_undo():
    r = exp(churn_exp("""\
    - {at: 1, action: kill, select: {count: 19, group: a}, for: 5}
    - {at: 2, action: kill, select: {count: 1, group: a}}
    - {at: 3, action: start, select: {count: 1, group: a}}
    """)).resolve()
    first, second, third = r.churn[:3]
    assert third.nodes == second.nodes  # not one of the 19 whose start is due at t=6
    assert r.churn[3].at == 6 and r.churn[3].nodes == first.nodes
