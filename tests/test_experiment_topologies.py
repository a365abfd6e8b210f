"""The ready experiment files in topologies/ and topologies/scale/, and the
JSON Schema. The scale files are too long for CI to run (test_ready_files
runs every file of topologies/ itself); those up to a few thousand nodes
still resolve here, the larger ones are checked against the schema."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.experiment import graphs
from orchestrator.experiment.spec import experiment_json_schema, load_experiment, parse_experiment, resolved_to_yaml

ROOT = Path(__file__).resolve().parents[1]
TESTBED = Path(sys.executable).with_name("testbed")
FILES = sorted((ROOT / "topologies").glob("*.yaml"))
SCALE_FILES = sorted((ROOT / "topologies" / "scale").glob("*.yaml"))
RESOLVED_UP_TO = 2_000  # nodes: a scale file this size resolves in seconds; 100,000 take half a minute


def test_the_expected_files_exist():
    names = {f.name for f in FILES}
    assert {"quick.yaml", "simsub-100.yaml", "simsub-1000.yaml", "churn-30.yaml", "ci-smoke.yaml",
            "floodsub-vs-gossipsub.yaml", "mixed.yaml"} <= names


@pytest.mark.parametrize("path", FILES + [f for f in SCALE_FILES if load_experiment(f).nodes_on("sim") <= RESOLVED_UP_TO],
                         ids=lambda p: str(p.relative_to(ROOT / "topologies")))
def test_every_topology_validates_resolves_and_round_trips(path: Path):
    assert path.read_text().startswith("#"), "each file starts with a comment saying what it is for"
    e = load_experiment(path)
    r = e.resolve()
    assert r.name == path.stem and r.seed == 1
    assert r.nodes and r.edges and r.publishes and r.expectations
    assert graphs.components([n.name for n in r.nodes], r.edges) == 1
    assert all(p.at <= r.duration for p in r.publishes)
    assert all(c.at <= r.duration for c in r.churn)
    again = parse_experiment(resolved_to_yaml(r, e), "experiment.resolved.yaml").resolve()
    assert again.digest() == r.digest()


def test_simsub_reference_setups():
    for name, n, m, interval in (("simsub-100", 100, 10, 1.0), ("simsub-1000", 1000, 100, 0.1)):
        r = load_experiment(ROOT / "topologies" / f"{name}.yaml").resolve()
        assert len(r.nodes) == n and {x.router for x in r.nodes} == {"simsub"}
        deg = graphs.degrees([x.name for x in r.nodes], r.edges)
        assert min(deg.values()) >= 10
        assert all(10 <= p.latency_ms <= 150 for p in r.links.values())
        assert len(r.publishes) == m
        assert r.publishes[1].at - r.publishes[0].at == pytest.approx(interval)
        assert all(p.publisher is None and len(set(p.via)) == 5 for p in r.publishes)


def test_churn_30_churns_30_percent():
    r = load_experiment(ROOT / "topologies" / "churn-30.yaml").resolve()
    churned = {n for c in r.churn for n in c.nodes}
    assert len(churned) == 30 and len(r.nodes) == 100
    assert {c.action for c in r.churn} == {"kill", "start"}
    assert not churned & {p.publisher for p in r.publishes}


def test_quick_kills_and_restarts_one_node():
    r = load_experiment(ROOT / "topologies" / "quick.yaml").resolve()
    assert [(c.action, c.nodes) for c in r.churn] == [("kill", ("n7",)), ("start", ("n7",))]
    assert 12 <= len(r.nodes) <= 20


def test_floodsub_vs_gossipsub_variants_differ_only_in_the_router():
    # more in test_experiment_variants.py
    (_, f), (_, g) = load_experiment(ROOT / "topologies" / "floodsub-vs-gossipsub.yaml").variants()
    f, g = f.resolve(), g.resolve()
    assert f.edges == g.edges and f.links == g.links and f.publishes == g.publishes and f.churn == g.churn
    assert [n.seed for n in f.nodes] == [n.seed for n in g.nodes]
    assert {n.router for n in f.nodes} == {"floodsub"} and {n.router for n in g.nodes} == {"gossipsub"}


def test_testbed_schema_accepts_every_topology_and_refuses_a_typo():
    """`testbed schema` (the console script) prints the schema generated from
    the model; every shipped file is valid against it."""
    out = subprocess.run([TESTBED, "schema"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    schema = json.loads(out.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in FILES + SCALE_FILES:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    quick = yaml.safe_load((ROOT / "topologies" / "quick.yaml").read_text())
    for broken in ({**quick, "durration": 3}, {**quick, "seed": 2**70}, {**quick, "linger": "soon"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)
    assert schema["properties"]["nodes"]["anyOf"][0]["properties"]["count"]["maximum"] == 1_000_000

    def patterns(node):
        if isinstance(node, dict):
            yield from ([node["pattern"]] if isinstance(node.get("pattern"), str) else [])
            for x in node.values():
                yield from patterns(x)
        elif isinstance(node, list):
            for x in node:
                yield from patterns(x)

    found = list(patterns(schema))
    assert found and not [p for p in found if "?P<" in p]  # JSON Schema regexes have no Python named groups


def test_model_link_without_pair_function_falls_back_to_default():
    r = load_experiment(ROOT / "topologies" / "ci-smoke.yaml").resolve()
    bare = dataclasses.replace(r, pair_link=None)
    a, b = r.edges[0]
    assert bare.link(a, b) == r.link(a, b)
    non_edge = next((x, y) for x in ("n0",) for y in (n.name for n in r.nodes) if y != x and (x, y) not in r.edges and (y, x) not in r.edges)
    assert bare.link(*non_edge) == r.default_link
    assert r.link(*non_edge).latency_ms == 10
