"""Experiment variants: one file, several routers, an identical set-up.

Every variant resolves to the same nodes, node seeds, overlay, links,
workload and churn as the others; only its name, routers, router parameters
and (optionally) expectations differ. A bad `variants:` entry is one
InputError with file:line: field.path, and `testbed validate` exits 2."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from cli_helpers import run_cli
from orchestrator.experiment.spec import experiment_json_schema, load_experiment, parse_experiment, resolved_to_yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "topologies" / "floodsub-vs-gossipsub.yaml"

SINGLE = """\
name: cmp
nodes:
  count: 12
  router: gossipsub
  router_params: {D: 4, D_low: 3, D_high: 8}
  topics: [t]
overlay: {type: random, degree: 3}
links:
  latency: {model: uniform, min_ms: 10, max_ms: 150}
  loss: 0.01
workload:
  messages: 10
  interval: 0.5
  publishers: {count: 3}
churn:
  timeline:
    - at: 1s
      action: kill
      select: {count: 2}
      for: 2s
expectations:
  - delivery_ratio >= 0.99
"""

GROUPS = """\
name: multi
groups:
  - name: eu
    count: 10
    router: gossipsub
    topics: [t]
    region: europe
  - name: us
    count: 8
    router: meshsub
    topics: [t]
    region: america
overlay: {type: random_regular, degree: 4}
links:
  latency:
    model: regions
    matrix:
      europe: {europe: 5, america: 40}
      america: {america: 8}
workload:
  - messages: 6
    interval: 0.3
    inject: 3
  - messages: 4
    interval: 1
    start: 0.1
    publishers: {count: 2, group: us}
    order: random
churn:
  timeline:
    - every: 2s
      from: 1s
      until: 5s
      action: pause
      select: {count: 1, group: eu}
      for: 1s
  steady:
    fraction: 0.25
    select: {group: us}
    session: {distribution: exponential, mean: 2s}
expectations:
  - delivery_ratio >= 0.9
variants:
  flood:
    router: floodsub
  random:
    groups:
      eu: {router: randomsub, router_params: {D: 3}}
  tuned:
    router_params: {D: 5}
    groups:
      us: {router_params: {D: 3, D_low: 2}}
    expectations: [delivery_ratio >= 0.5]
"""


def with_variants(text: str, variants: str) -> str:
    return text + textwrap.dedent(variants)


def setup_of(r) -> tuple:
    """Everything but the name, routers, router parameters and expectations."""
    nodes = tuple((n.name, n.group, n.topics, n.seed, n.region, n.uplink_bps, n.memory, n.cpus) for n in r.nodes)
    return (r.seed, nodes, r.edges, dict(r.links), r.default_link, r.publishes, r.churn, r.duration, r.linger)


def all_pairs(r) -> list:
    names = [n.name for n in r.nodes]
    return [r.link(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


# --------------------------------------------------------------------------
# The API


def test_a_file_without_variants_has_none():
    assert parse_experiment(SINGLE, "cmp.yaml").variants() == []
    assert load_experiment(ROOT / "topologies" / "quick.yaml").variants() == []


def test_single_group_variants_override_the_router():
    exp = parse_experiment(with_variants(SINGLE, """\
        variants:
          floodsub: {router: floodsub}
          gossipsub: {}
          randomsub: {router: randomsub, router_params: {D: 2}, name: cmp-random}
        """), "cmp.yaml")
    variants = exp.variants()
    assert [v for v, _ in variants] == ["floodsub", "gossipsub", "randomsub"]
    by = dict(variants)
    assert [e.name for _, e in variants] == ["cmp-floodsub", "cmp-gossipsub", "cmp-random"]
    assert all(e.variant == v and e.variants() == [] for v, e in variants)
    assert by["floodsub"].groups[0].router == "floodsub"
    assert by["floodsub"].groups[0].router_params == {"seen_ttl": 120.0}  # gossipsub's D etc. dropped
    assert by["gossipsub"].groups == exp.groups  # an empty variant is the file as written
    assert by["randomsub"].groups[0].router_params["D"] == 2
    assert exp.variant is None and exp.name == "cmp"


@pytest.mark.parametrize("seed", [1, 7])
def test_variants_resolve_identically_except_for_the_router(seed):
    exp = parse_experiment(with_variants(SINGLE, """\
        variants:
          floodsub: {router: floodsub}
          gossipsub: {router: gossipsub}
        """), "cmp.yaml")
    base = exp.resolve(seed)
    (_, f), (_, g) = exp.variants()
    rf, rg = f.resolve(seed), g.resolve(seed)
    assert setup_of(rf) == setup_of(rg) == setup_of(base)
    assert all_pairs(rf) == all_pairs(rg)  # latencies of non-overlay pairs too
    assert rf.churn and rf.publishes
    assert {n.router for n in rf.nodes} == {"floodsub"} and {n.router for n in rg.nodes} == {"gossipsub"}
    assert rf.digest() != rg.digest()
    assert (rf.name, rg.name) == ("cmp-floodsub", "cmp-gossipsub")


@pytest.mark.parametrize("seed", [1, 3])
def test_group_variants_share_everything_random(seed):
    """Regions, injection, random publishers, repeated churn and steady churn:
    none of their draws depends on the router."""
    exp = parse_experiment(GROUPS, "multi.yaml")
    base = exp.resolve(seed)
    resolved = {v: e.resolve(seed) for v, e in exp.variants()}
    assert base.churn and any(p.publisher is None for p in base.publishes)
    for r in resolved.values():
        assert setup_of(r) == setup_of(base)
    routers = {v: {n.group: n.router for n in r.nodes} for v, r in resolved.items()}
    assert routers == {
        "flood": {"eu": "floodsub", "us": "floodsub"},
        "random": {"eu": "randomsub", "us": "meshsub"},
        "tuned": {"eu": "gossipsub", "us": "meshsub"},
    }


def test_group_overrides_merge_over_the_variant_and_the_file():
    by = dict(parse_experiment(GROUPS, "multi.yaml").variants())
    eu, us = by["tuned"].groups
    # variant-wide D: 5 applies to every group; us's own D: 3 wins there
    assert (eu.router_params["D"], eu.router_params["D_low"], eu.router_params["D_high"]) == (5, 4, 12)
    assert (us.router_params["D"], us.router_params["D_low"]) == (3, 2)
    assert by["random"].groups[0].router_params == {"D": 3, "seen_ttl": 120.0}
    assert by["random"].groups[1] == parse_experiment(GROUPS, "multi.yaml").groups[1]


def test_same_router_params_merge_over_the_file_ones():
    exp = parse_experiment(with_variants(SINGLE, """\
        variants:
          d5: {router_params: {D: 5}}
          d5b: {router: gossipsub, router_params: {D: 5}}
          meshsub: {router: meshsub}
        """), "cmp.yaml")
    by = dict(exp.variants())
    for v in ("d5", "d5b"):
        p = by[v].groups[0].router_params
        assert (p["D"], p["D_low"], p["D_high"]) == (5, 3, 8)  # D_low/D_high from the file
    p = by["meshsub"].groups[0].router_params  # another router: the file's D: 4 is dropped
    assert (p["D"], p["D_low"], p["D_high"]) == (6, 4, 12)


def test_expectations_apply_to_every_variant_unless_overridden():
    by = dict(parse_experiment(GROUPS, "multi.yaml").variants())
    assert [e.text for e in by["flood"].resolve().expectations] == ["delivery_ratio >= 0.9"]
    assert [e.text for e in by["tuned"].resolve().expectations] == ["delivery_ratio >= 0.5"]


# --------------------------------------------------------------------------
# experiment.resolved.yaml of a variant


@pytest.mark.parametrize("path", ["shipped", "multi"])
def test_each_variant_round_trips_as_an_experiment_of_its_own(tmp_path, path):
    if path == "shipped":
        exp, source = load_experiment(SHIPPED), SHIPPED
    else:
        source = tmp_path / "multi.yaml"
        source.write_text(GROUPS)
        exp = load_experiment(source)
    assert exp.variants()
    for v, e in exp.variants():
        for seed in (None, 5):
            r = e.resolve(seed)
            text = resolved_to_yaml(r, e)
            doc = yaml.safe_load(text)
            assert "variants" not in doc and doc["name"] == e.name
            assert f"Variant {v!r}" in text
            again_exp = parse_experiment(text, "experiment.resolved.yaml")
            assert again_exp.variants() == []
            again = again_exp.resolve()
            assert again.digest() == r.digest()
            assert [n.router for n in again.nodes] == [n.router for n in r.nodes]
            # without the experiment, the source file is loaded and the variant found by name
            assert resolved_to_yaml(r) == text


# --------------------------------------------------------------------------
# The shipped comparison file


def test_the_shipped_comparison_file():
    assert SHIPPED.read_text().startswith("#")
    exp = load_experiment(SHIPPED)
    variants = exp.variants()
    assert [v for v, _ in variants] == ["floodsub", "gossipsub"]
    (_, f), (_, g) = variants
    rf, rg = f.resolve(), g.resolve()
    assert setup_of(rf) == setup_of(rg)
    assert all_pairs(rf) == all_pairs(rg)
    assert len(rf.nodes) == 50 and {n.router for n in rf.nodes} == {"floodsub"}
    assert {n.router for n in rg.nodes} == {"gossipsub"}
    assert all(10 <= p.latency_ms <= 150 for p in rf.links.values())
    assert len(rf.publishes) == 40 and rf.publishes[1].at - rf.publishes[0].at == pytest.approx(0.25)
    assert 2 <= len({p.publisher for p in rf.publishes}) <= 8
    assert [e.text for e in rf.expectations] == [e.text for e in rg.expectations] == ["delivery_ratio >= 0.99"]


def test_validate_shows_the_variants(capsys):
    assert run_cli("validate", str(SHIPPED), "--json") == 0
    s = json.loads(capsys.readouterr().out)
    assert [v["variant"] for v in s["variants"]] == ["floodsub", "gossipsub"]
    assert [v["name"] for v in s["variants"]] == ["floodsub-vs-gossipsub-floodsub", "floodsub-vs-gossipsub-gossipsub"]
    assert [v["groups"][0]["router"] for v in s["variants"]] == ["floodsub", "gossipsub"]
    assert all(v["same_setup"] for v in s["variants"])
    assert run_cli("validate", str(SHIPPED)) == 0
    out = capsys.readouterr().out
    assert "variants" in out and "floodsub-vs-gossipsub-gossipsub" in out


def test_validate_without_variants_lists_none(tmp_path, capsys):
    path = tmp_path / "cmp.yaml"
    path.write_text(SINGLE)
    assert run_cli("validate", str(path), "--json") == 0
    assert json.loads(capsys.readouterr().out)["variants"] == []


def _mapping_branch(node: dict) -> dict:
    """The member of an anyOf (or the node itself) that describes a mapping."""
    return next((m for m in node.get("anyOf", [node]) if m.get("type") == "object"), node)


def test_schema_has_variants_and_accepts_the_files():
    schema = experiment_json_schema()
    variants = _mapping_branch(schema["properties"]["variants"])
    variant = _mapping_branch(next(iter(variants["patternProperties"].values())))
    assert set(variant["properties"]) == {"name", "router", "router_params", "groups", "expectations"}
    groups = _mapping_branch(variant["properties"]["groups"])
    per_group = _mapping_branch(groups["additionalProperties"])
    assert set(per_group["properties"]) == {"router", "router_params"}
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(yaml.safe_load(SHIPPED.read_text()), schema)
    jsonschema.validate(yaml.safe_load(GROUPS), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(with_variants(SINGLE, "variants: {a: {routr: x}}\n")), schema)


# --------------------------------------------------------------------------
# Errors: exit 2, one line, file:line: field.path


def assert_error(tmp_path: Path, capsys, text: str, line: int, field: str, *words: str) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    code = run_cli("validate", str(path))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert err.startswith("error:"), err
    assert f"{path}:{line}: {field}:" in err, err
    for w in words:
        assert w in err, err
    return err


L = SINGLE.count("\n")  # the line before `variants:`

ERRORS = [
    # (variants text, line offset from `variants:`, field, words)
    ("variants: {}\n", 1, "variants", ("at least one variant",)),
    ("variants: [floodsub, gossipsub]\n", 1, "variants", ("expected a mapping",)),
    ("variants:\n  flood:\n    routr: floodsub\n", 3, "variants.flood.routr", ("unknown key", "router_params")),
    ("variants:\n  flood:\n    router: flodsub\n", 3, "variants.flood.router", ("expected a router", "floodsub")),
    ("variants:\n  big:\n    router_params: {D: 20}\n", 3, "variants.big.router_params.D", ("bad gossipsub parameters", "D_high")),
    ("variants:\n  flood:\n    router: floodsub\n    router_params:\n      D: 3\n", 5, "variants.flood.router_params.D",
     ("unknown key", "seen_ttl")),
    ("variants:\n  slow:\n    router_params:\n      heartbeat_interval: soon\n", 4,
     "variants.slow.router_params.heartbeat_interval", ("expected a number",)),
    ("variants:\n  x:\n    router_params: 5\n", 3, "variants.x.router_params", ("expected a mapping",)),
    ("variants:\n  ok: {}\n  two words: {}\n", 3, "variants.two words", ("expected a variant name",)),
    ("variants:\n  a.b: {router: floodsub}\n", 2, "variants.a.b", ("expected a variant name",)),
    ("variants:\n  a:\n    groups: {default: {router: floodsub}}\n", 3, "variants.a.groups", ("nodes:",)),
    ("variants:\n  a: {name: same}\n  b: {name: same}\n", 3, "variants.b.name", ("another 'name'",)),
    ("variants:\n  a: {name: 'bad name'}\n", 2, "variants.a.name", ("an experiment name",)),
    ("variants:\n  a:\n    expectations: [delivery_ratio >> 1]\n", 3, "variants.a.expectations[0]", ("<metric> <op> <number>",)),
    ("variants:\n  a: 5\n", 2, "variants.a", ("expected a mapping",)),
]


@pytest.mark.parametrize("variants,offset,field,words", ERRORS, ids=[e[2] + f"-{i}" for i, e in enumerate(ERRORS)])
def test_bad_variants_exit_2_with_file_line_and_field(tmp_path, capsys, variants, offset, field, words):
    assert_error(tmp_path, capsys, SINGLE + variants, L + offset, field, *words)


def test_merged_parameters_that_disagree_point_at_the_variant(tmp_path, capsys):
    # the file has D_high: 8; the variant's D: 10 breaks D <= D_high
    assert_error(tmp_path, capsys, SINGLE + "variants:\n  wide:\n    router_params:\n      D: 10\n",
                 L + 4, "variants.wide.router_params.D", "D_high=8")


def test_group_variant_errors(tmp_path, capsys):
    base = GROUPS.split("variants:")[0]
    n = base.count("\n")
    assert_error(tmp_path, capsys, base + "variants:\n  a:\n    groups:\n      asia: {router: floodsub}\n",
                 n + 4, "variants.a.groups.asia", "no group named 'asia'", "eu, us")
    assert_error(tmp_path, capsys, base + "variants:\n  a:\n    groups:\n      eu: {routr: floodsub}\n",
                 n + 4, "variants.a.groups.eu.routr", "unknown key")
    assert_error(tmp_path, capsys, base + "variants:\n  a:\n    groups:\n      eu:\n        router_params: {D: 1}\n",
                 n + 5, "variants.a.groups.eu.router_params.D", "bad gossipsub parameters")
    assert_error(tmp_path, capsys, base + "variants:\n  a:\n    groups: [eu]\n",
                 n + 3, "variants.a.groups", "expected a mapping")


def test_simsub_variant_needs_one_topic(tmp_path, capsys):
    text = SINGLE.replace("topics: [t]", "topics: [t, u]").replace("publishers: {count: 3}", "publishers: {count: 3}\n  topic: t")
    assert_error(tmp_path, capsys, text + "variants:\n  sim:\n    router: simsub\n",
                 text.count("\n") + 3, "variants.sim.router", "exactly one topic")


# --------------------------------------------------------------------------
# sizes: group counts on a backend that cannot host the file's own


def test_sizes_set_group_counts_on_their_backend_only(tmp_path):
    path = tmp_path / "sized.yaml"
    path.write_text(GROUPS.replace("variants:", "sizes:\n  docker: {eu: 4}\nvariants:"))
    full, docker = load_experiment(path), load_experiment(path, "docker")
    assert [len(g.node_names()) for g in full.groups] == [10, 8]
    assert [len(g.node_names()) for g in load_experiment(path, "process").groups] == [10, 8]
    assert [len(g.node_names()) for g in docker.groups] == [4, 8]
    assert all(len(exp.resolve().nodes) == 12 for _, exp in docker.variants())  # every variant is sized


def test_validate_shows_the_sizes(tmp_path, capsys):
    path = tmp_path / "sized.yaml"
    path.write_text(GROUPS.replace("variants:", "sizes:\n  docker: {eu: 4}\n  process: {us: 2}\nvariants:"))
    assert run_cli("validate", str(path), "--json") == 0
    assert json.loads(capsys.readouterr().out)["sizes"] == {"docker": 12, "process": 12}
    assert run_cli("validate", str(path)) == 0
    assert "12 nodes on docker, 12 nodes on process" in " ".join(capsys.readouterr().out.split())


def test_sizes_name_groups_that_exist(tmp_path, capsys):
    base = GROUPS.split("variants:")[0]
    assert_error(tmp_path, capsys, base + "sizes:\n  docker: {asia: 3}\n", base.count("\n") + 2,
                 "sizes.docker.asia", "no group named 'asia'", "eu, us")
    assert_error(tmp_path, capsys, base + "sizes:\n  kvm: {eu: 3}\n", base.count("\n") + 2, "sizes.kvm", "docker")
