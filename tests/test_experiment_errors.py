"""Bad experiment files: `testbed validate` exits 2 with ONE message naming the
file, the line and the field path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path


from cli_helpers import run_cli

TESTBED = Path(sys.executable).with_name("testbed")

BASE = """\
name: t
nodes:
  count: 10
  router: gossipsub
  topics: [t]
overlay: {type: random, degree: 3}
links:
  latency: {model: constant, ms: 20}
workload:
  messages: 5
  interval: 0.5
  publishers: {nodes: [n0]}
"""


def run_validate(tmp_path: Path, text: str, capsys, *extra: str) -> tuple[int, str, Path]:
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    code = run_cli("validate", str(path), *extra)
    err = capsys.readouterr().err
    # rich wraps long lines at the console width; the message is one logical line
    return code, " ".join(err.split()), path


def assert_error(tmp_path, capsys, text: str, line: int, field: str, *words: str) -> str:
    code, err, path = run_validate(tmp_path, text, capsys)
    assert code == 2, err
    assert err.startswith("error:"), err
    assert f"{path}:{line}: {field}:" in err, err
    for w in words:
        assert w in err, err
    return err


def test_real_console_script_exits_2_with_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace("count: 10", "count: -3"))
    env = {**os.environ, "COLUMNS": "300"}
    out = subprocess.run([TESTBED, "validate", str(path)], capture_output=True, text=True, env=env)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert re.match(rf"error: {re.escape(str(path))}:3: nodes\.count: expected a node count >= 1, got -3$", lines[0])


def test_valid_file_exits_0_and_prints_summary(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(BASE)
    assert run_cli("validate", str(path), "--json") == 0
    out = capsys.readouterr().out
    assert '"nodes": 10' in out and '"messages": 5' in out


def test_wrong_type(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE.replace("count: 10", "count: ten"), 3, "nodes.count", "expected a node count", "'ten'")


def test_unknown_top_level_key(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE + "durration: 10\n", 13, "durration", "unknown key", "duration")


def test_unknown_nested_key(tmp_path, capsys):
    text = BASE.replace("  topics: [t]\n", "  topics: [t]\n  regoin: eu\n")
    assert_error(tmp_path, capsys, text, 6, "nodes.regoin", "unknown key")


def test_negative_count(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE.replace("messages: 5", "messages: -1"), 10, "workload.messages", ">= 0")


def test_unknown_router(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE.replace("router: gossipsub", "router: gossipsup"), 4, "nodes.router", "floodsub", "'gossipsup'")


def test_bad_router_params_point_at_the_parameter(tmp_path, capsys):
    text = """\
    groups:
      - name: a
        count: 5
        router: floodsub
      - name: b
        count: 5
        router: gossipsub
        router_params:
          D: 20
    overlay: {type: random, degree: 3}
    """
    assert_error(tmp_path, capsys, text, 9, "groups[1].router_params.D", "D_high")


def test_unknown_router_param(tmp_path, capsys):
    text = BASE.replace("  topics: [t]\n", "  topics: [t]\n  router_params: {Dx: 3}\n")
    assert_error(tmp_path, capsys, text, 6, "nodes.router_params.Dx", "unknown key", "D_low")


def test_router_param_type(tmp_path, capsys):
    text = BASE.replace("  topics: [t]\n", "  topics: [t]\n  router_params:\n    heartbeat_interval: soon\n")
    assert_error(tmp_path, capsys, text, 7, "nodes.router_params.heartbeat_interval", "expected a number")


def test_degree_larger_than_node_count(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE.replace("degree: 3", "degree: 12"), 6, "overlay.degree", "too large for 10 nodes")


def test_random_regular_odd(tmp_path, capsys):
    text = BASE.replace("count: 10", "count: 9").replace("type: random,", "type: random_regular,")
    assert_error(tmp_path, capsys, text, 6, "overlay.degree", "odd")


def test_latency_matrix_missing_a_region_pair(tmp_path, capsys):
    text = """\
    groups:
      - {name: a, count: 4, router: gossipsub, region: eu}
      - {name: b, count: 4, router: gossipsub, region: us}
    overlay: {type: random, degree: 2}
    links:
      latency:
        model: regions
        matrix:
          eu: {eu: 5, us: 40}
          us: {}
    """
    assert_error(tmp_path, capsys, text, 8, "links.latency.matrix", "'us' and 'us'")


def test_region_not_in_matrix(tmp_path, capsys):
    text = """\
    groups:
      - {name: a, count: 4, router: gossipsub, region: eu}
      - {name: b, count: 4, router: gossipsub, region: asia}
    overlay: {type: random, degree: 2}
    links:
      latency: {model: regions, matrix: {eu: {eu: 5}}}
    """
    assert_error(tmp_path, capsys, text, 3, "groups[1].region", "'asia'")


def test_loss_outside_unit_interval(tmp_path, capsys):
    text = BASE.replace("  latency: {model: constant, ms: 20}\n", "  latency: {model: constant, ms: 20}\n  loss: 1.5\n")
    assert_error(tmp_path, capsys, text, 9, "links.loss", "[0, 1]")


def test_min_latency_above_max(tmp_path, capsys):
    text = BASE.replace("{model: constant, ms: 20}", "{model: uniform, min_ms: 150, max_ms: 10}")
    assert_error(tmp_path, capsys, text, 8, "links.latency.min_ms", "larger than max_ms")


def test_selector_percent_rounding_to_nothing(tmp_path, capsys):
    text = BASE + "churn:\n  timeline:\n    - {at: 1, action: kill, select: {percent: 1}}\n"
    assert_error(tmp_path, capsys, text, 15, "churn.timeline[0].select.percent", "matches nothing")


def test_selector_unknown_node(tmp_path, capsys):
    text = BASE + "churn:\n  timeline:\n    - at: 1\n      action: kill\n      select: {nodes: [n3, n42]}\n"
    assert_error(tmp_path, capsys, text, 17, "churn.timeline[0].select.nodes[1]", "no node named 'n42'")


def test_selector_matching_no_eligible_node_at_its_time(tmp_path, capsys):
    text = BASE + (
        "churn:\n  timeline:\n"
        "    - {at: 1, action: start, select: {count: 1}}\n"
    )
    assert_error(tmp_path, capsys, text, 15, "churn.timeline[0].select", "t=1s", "only 0")


def test_unpause_without_pause(tmp_path, capsys):
    text = BASE + "churn:\n  timeline:\n    - at: 1\n      action: unpause\n      select: n4\n"
    assert_error(tmp_path, capsys, text, 17, "churn.timeline[0].select", "cannot unpause n4", "not paused")


def test_for_on_an_action_without_undo(tmp_path, capsys):
    text = BASE + "churn:\n  timeline:\n    - at: 1\n      action: restart\n      select: n4\n      for: 2\n"
    assert_error(tmp_path, capsys, text, 18, "churn.timeline[0].for", "kill")


def test_conflicting_undo(tmp_path, capsys):
    text = BASE + (
        "churn:\n  timeline:\n"
        "    - {at: 1, action: kill, select: n4, for: 2}\n"
        "    - {at: 2, action: start, select: n4}\n"
    )
    assert_error(tmp_path, capsys, text, 15, "churn.timeline[0].for", "already running")


def test_action_after_duration(tmp_path, capsys):
    text = BASE + "churn:\n  timeline:\n    - {at: 1, action: kill, select: n4, for: 20}\nduration: 10\n"
    assert_error(tmp_path, capsys, text, 15, "churn.timeline[0]", "after the experiment's duration")


def test_bad_expectation(tmp_path, capsys):
    text = BASE + "expectations:\n  - delivery_ratio >= 0.99\n  - latency p99 < 3\n"
    assert_error(tmp_path, capsys, text, 15, "expectations[1]", "<metric> <op> <number>")


def test_yaml_syntax_error(tmp_path, capsys):
    code, err, path = run_validate(tmp_path, BASE + "expectations: [unclosed\n", capsys)
    assert code == 2 and f"{path}:" in err and "not valid YAML" in err


def test_duplicate_key(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE + "seed: 3\nseed: 4\n", 14, "seed", "duplicate key")


def test_missing_file(tmp_path, capsys):
    assert run_cli("validate", str(tmp_path / "nope.yaml")) == 2
    assert "no such file" in capsys.readouterr().err


def test_schema_command_prints_json(capsys):
    import json

    assert run_cli("schema") == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["properties"]["overlay"]["properties"]["type"]["enum"] == [
        "random", "random_regular", "explicit", "full",
    ]


def test_wire_values_and_combinations(tmp_path, capsys):
    assert_error(tmp_path, capsys, BASE + "wire: {security: tls}\n", 13, "wire.security", "noise or plaintext", "'tls'")
    assert_error(tmp_path, capsys, BASE + "wire: {authenticity: signed}\n", 13, "wire.authenticity",
                 "strict, author or anonymous")
    assert_error(tmp_path, capsys, BASE + "wire:\n  authenticity: anonymous\n", 14, "wire.authenticity",
                 "first-8-bytes")
    small = BASE.replace("  messages: 5", "  messages: 5\n  size: 7")
    assert_error(tmp_path, capsys, small + "wire: {message_id: first-8-bytes}\n", 11, "workload.size",
                 "at least 8 bytes", "got 7")


def test_wire_fields_resolve_with_defaults(tmp_path):
    from orchestrator.experiment.spec import load_experiment  # noqa: PLC0415

    path = tmp_path / "exp.yaml"
    path.write_text(BASE)
    r = load_experiment(path).resolve(1)
    assert (r.security, r.authenticity, r.message_id) == ("noise", "strict", "from-seqno")
    path.write_text(BASE + "wire: {security: plaintext, authenticity: anonymous, message_id: first-8-bytes}\n")
    r2 = load_experiment(path).resolve(1)
    assert (r2.security, r2.authenticity, r2.message_id) == ("plaintext", "anonymous", "first-8-bytes")
    assert r.digest() != r2.digest()
