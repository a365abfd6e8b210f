"""Broken and hostile experiment files: each one makes `testbed validate` exit 2
within a few seconds with `error: FILE:LINE: ...` and never a traceback.

One test per category of input (YAML syntax, types, bounds, references, alias
bombs, nesting, size, encodings, impossible churn, non-finite numbers); the
rules they exercise are general (yamlsrc.py, values.py, check.py), so a file
not listed here is refused the same way. A few run the installed console
script, so the exit status is the one a shell sees.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cli_helpers import run_cli
from orchestrator.experiment import values
from orchestrator.experiment.spec import load_experiment, parse_experiment, resolved_to_yaml
from orchestrator.experiment.yamlsrc import MAX_FILE_BYTES
from test_experiment_errors import BASE  # the one minimal valid file both error suites vary

TESTBED = Path(sys.executable).with_name("testbed")


def refused(tmp_path: Path, capsys, content: str | bytes, line: int | None = None, *words: str,
            seconds: float = 5.0) -> str:
    """Validate `content` in-process; assert exit 2, one `error: FILE:LINE:`
    message, no traceback, within `seconds`. Returns the message."""
    path = tmp_path / "exp.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    start = time.monotonic()
    code = run_cli("validate", str(path))
    elapsed = time.monotonic() - start
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert code == 2, err or captured.out
    assert "Traceback" not in captured.err + captured.out
    assert err.startswith(f"error: {path}:"), err
    if line is not None:
        assert re.match(rf"error: {re.escape(str(path))}:{line}[:]", err), err
    for word in words:
        assert word in err, err
    assert elapsed < seconds, f"took {elapsed:.1f}s"
    return err


def script(path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "300"}
    return subprocess.run([TESTBED, "validate", str(path)], capture_output=True, text=True, env=env, timeout=60)


# -- YAML syntax


@pytest.mark.parametrize("text,line", [
    (BASE + "expectations: [unclosed\n", 14),
    (BASE + "extra:\n  a: 1\n   b: 2\n", 15),
    (BASE.replace("  count: 10", "\tcount: 10"), 3),
    (BASE + "seed: 1: 2\n", 13),
    (BASE + "---\nname: second\n", 13),
    ("", 1),
    ("# only a comment\n", 1),
])
def test_yaml_syntax_errors(tmp_path, capsys, text, line):
    refused(tmp_path, capsys, text, line)


# -- wrong types


@pytest.mark.parametrize("old,new,line,field", [
    ("count: 10", "count: [10]", 3, "nodes.count"),
    ("overlay: {type: random, degree: 3}", "overlay: random", 6, "overlay"),
    ("  messages: 5", "  messages: five", 10, "workload.messages"),
    ("  interval: 0.5", "  interval: soon", 11, "workload.interval"),
    ("publishers: {nodes: [n0]}", "publishers: {nodes: 5}", 12, "workload.publishers.nodes"),
    ("topics: [t]", "topics: t", 5, "nodes.topics"),
    ("name: t", "name: [t]", 1, "name"),
    ("ms: 20", "ms: '20'", 8, "links.latency.ms"),
    ("name: t", "name: t\nseed: true", 2, "seed"),
])
def test_wrong_types(tmp_path, capsys, old, new, line, field):
    refused(tmp_path, capsys, BASE.replace(old, new), line, f"{field}: expected")


# -- numbers out of their documented bounds


@pytest.mark.parametrize("old,new,line,field", [
    ("count: 10", "count: 1000000000", 3, "nodes.count"),
    ("count: 10", "count: 1000001", 3, "nodes.count"),
    ("  topics: [t]", "  topics: [t]\n  uplink: 1000000000000", 6, "nodes.uplink"),
    ("  topics: [t]", "  topics: [t]\n  uplink: 5tbit", 6, "nodes.uplink"),
    ("  topics: [t]", "  topics: [t]\n  resources: {memory: 5000g}", 6, "nodes.resources.memory"),
    ("  topics: [t]", "  topics: [t]\n  resources: {cpus: 0}", 6, "nodes.resources.cpus"),
    ("  topics: [t]", "  topics: [t]\n  router_params: {D_high: 1000000000000}", 6, "nodes.router_params.D_high"),
    ("ms: 20", "ms: 1000000000", 8, "links.latency.ms"),
    ("  messages: 5", "  messages: 1000000000", 10, "workload.messages"),
    ("  interval: 0.5", "  interval: 30d", 11, "workload.interval"),
    ("  interval: 0.5", "  interval: 0.5\n  size: 2MiB", 12, "workload.size"),
    ("name: t", "name: t\nseed: -1", 2, "seed"),
    ("name: t", "name: t\nseed: 100000000000000000000000", 2, "seed"),
    ("name: t", "name: t\nduration: 1e12", 2, "duration"),
    ("degree: 3", "degree: 5000", 6, "overlay.degree"),
])
def test_out_of_range_numbers(tmp_path, capsys, old, new, line, field):
    refused(tmp_path, capsys, BASE.replace(old, new), line, f"{field}: ")


def test_bounds_are_in_the_schema():
    from orchestrator.experiment.spec import experiment_json_schema

    group = experiment_json_schema()["properties"]["nodes"]["anyOf"][0]["properties"]
    assert group["count"]["maximum"] == values.MAX_NODES
    assert group["uplink"]["anyOf"][0]["anyOf"][0]["maximum"] == values.MAX_RATE_BPS


def test_an_overlay_too_large_to_run(tmp_path, capsys):
    text = BASE.replace("count: 10", "count: 100000").replace("{type: random, degree: 3}", "{type: full}")
    refused(tmp_path, capsys, text, 6, "overlay: ", "edges")


# -- NaN and infinities


@pytest.mark.parametrize("old,new,line,field", [
    ("ms: 20", "ms: .inf", 8, "links.latency.ms"),
    ("  topics: [t]", "  topics: [t]\n  uplink: .inf", 6, "nodes.uplink"),
    ("  interval: 0.5", "  interval: .nan", 11, "workload.interval"),
    ("latency: {model: constant, ms: 20}", "latency: {model: constant, ms: 20}\n  loss: -.Inf", 9, "links.loss"),
    ("  topics: [t]", "  topics: [t]\n  router_params: {heartbeat_interval: .NaN}", 6,
     "nodes.router_params.heartbeat_interval"),
])
def test_numbers_must_be_finite(tmp_path, capsys, old, new, line, field):
    refused(tmp_path, capsys, BASE.replace(old, new), line, f"{field}: ", "finite")


# -- references to things that do not exist


@pytest.mark.parametrize("extra,line,field,words", [
    ("churn:\n  timeline:\n    - {at: 1, action: kill, select: n99}\n", 15, "churn.timeline[0].select", ("no node named 'n99'",)),
    ("churn:\n  timeline:\n    - {at: 1, action: kill, select: {count: 1, group: edge}}\n", 15,
     "churn.timeline[0].select.group", ("'edge'",)),
    ("churn:\n  timeline:\n    - at: 1\n      action: disconnect\n      select: n1\n      peers: [n2, zz]\n", 18,
     "churn.timeline[0].peers[1]", ("no node named 'zz'",)),
])
def test_unknown_nodes_and_groups(tmp_path, capsys, extra, line, field, words):
    refused(tmp_path, capsys, BASE + extra, line, f"{field}: ", *words)


def test_unknown_region(tmp_path, capsys):
    text = """\
    groups:
      - {name: a, count: 4, router: gossipsub, region: eu}
      - {name: b, count: 4, router: gossipsub, region: mars}
    overlay: {type: random, degree: 2}
    links:
      latency: {model: regions, matrix: {eu: {eu: 5}}}
    """
    refused(tmp_path, capsys, textwrap.dedent(text), 3, "groups[1].region: ", "'mars'")


def test_unknown_explicit_edge_endpoint(tmp_path, capsys):
    text = BASE.replace("{type: random, degree: 3}", "\n  type: explicit\n  edges:\n    - [n0, n1]\n    - [n1, n77]")
    refused(tmp_path, capsys, text, 10, "overlay.edges[1][1]: ", "n77")


# -- aliases


def billion_laughs(levels: int = 9) -> str:
    lines = ["name: t", "lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_at_once(tmp_path, capsys):
    err = refused(tmp_path, capsys, billion_laughs(), None, "alias", seconds=2.0)
    assert re.search(r"exp\.yaml:\d+: lol\d", err), err


def test_billion_laughs_as_a_process(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs(12))
    start = time.monotonic()
    out = script(path)
    assert time.monotonic() - start < 20  # the interpreter's start-up, not the bomb
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: {path}:"), out.stderr
    assert "alias" in out.stderr


def test_recursive_alias(tmp_path, capsys):
    refused(tmp_path, capsys, BASE + "extra: &loop [1, *loop]\n", 13, "recursive alias")


def test_unknown_alias(tmp_path, capsys):
    refused(tmp_path, capsys, BASE + "seed: *nowhere\n", 13, "unknown alias")


def test_merge_keys_with_overrides_are_accepted():
    text = """\
    groups:
      - &gossip
        name: a
        count: 4
        router: gossipsub
        router_params: {D: 3, D_low: 2, D_high: 6}
        topics: [t]
      - <<: *gossip
        name: b
        count: 6
    overlay: {type: full}
    """
    exp = parse_experiment(textwrap.dedent(text), "m.yaml")
    assert [(g.name, g.count, g.router, g.router_params["D"]) for g in exp.groups] == [
        ("a", 4, "gossipsub", 3), ("b", 6, "gossipsub", 3),
    ]


def test_a_real_duplicate_key_is_still_refused(tmp_path, capsys):
    refused(tmp_path, capsys, BASE.replace("  count: 10\n", "  count: 10\n  count: 12\n"), 4, "nodes.count: ",
            "duplicate key")


# -- nesting


@pytest.mark.parametrize("text", ["name: t\nx: " + "[" * 5000 + "]" * 5000 + "\n",
                                  "name: t\nx: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
                                  "x:\n" + "".join("  " * i + "- \n" for i in range(1, 200))])
def test_deep_nesting_is_one_line(tmp_path, capsys, text):
    refused(tmp_path, capsys, text, None, "nested more than")


def test_deep_nesting_as_a_process(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("x: " + "[" * 100_000 + "]" * 100_000 + "\n")
    out = script(path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert re.match(rf"error: {re.escape(str(path))}:1: x\[0\]", out.stderr), out.stderr


# -- size


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path, capsys):
    text = BASE + "description: '" + "x" * MAX_FILE_BYTES + "'\n"
    err = refused(tmp_path, capsys, text, None, "larger than 8 MiB", seconds=3.0)
    assert err.startswith(f"error: {tmp_path / 'exp.yaml'}: "), err


def test_a_large_valid_file_loads(tmp_path):
    edges = "".join(f"    - [n{i}, n{(i + 1) % 5000}]\n" for i in range(5000))
    path = tmp_path / "ring.yaml"
    path.write_text(f"nodes: {{count: 5000, router: floodsub}}\noverlay:\n  type: explicit\n  edges:\n{edges}")
    assert len(load_experiment(path).overlay.edges) == 5000


# -- encodings


def test_a_non_utf8_byte_is_reported_with_line_and_column(tmp_path, capsys):
    content = BASE.encode() + b"description: caf\xe9 au lait\n"
    refused(tmp_path, capsys, content, 13, "not UTF-8", "0xe9")
    assert f"exp.yaml:13:17: not UTF-8" in refused(tmp_path, capsys, content, 13)


def test_utf16_is_refused_as_a_process(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_bytes(BASE.encode("utf-16"))
    out = script(path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert re.match(rf"error: {re.escape(str(path))}:1:1: not UTF-8", out.stderr), out.stderr


def test_a_bom_and_unicode_text_are_fine(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + BASE.encode() + "description: naïve café ✓\n".encode())
    assert load_experiment(path).description == "naïve café ✓"


def test_control_characters_are_not_yaml(tmp_path, capsys):
    refused(tmp_path, capsys, BASE + "description: a\x07b\n", 13, "not valid YAML")


# -- impossible churn timelines


@pytest.mark.parametrize("timeline,line,field,words", [
    ("- {at: 1, action: start, select: n4}", 15, "churn.timeline[0].select", ("cannot start n4", "already running")),
    ("- {at: 1, action: kill, select: n4}\n- {at: 2, action: kill, select: n4}", 16, "churn.timeline[1].select",
     ("t=2s", "not running")),
    ("- {at: 1, action: unpause, select: n4}", 15, "churn.timeline[0].select", ("not paused",)),
    ("- {at: 1, action: reconnect, select: n4}", 15, "churn.timeline[0].select", ("not disconnected",)),
    ("- {every: 1, from: 5, until: 2, action: kill, select: {count: 1}}", 15, "churn.timeline[0].until",
     ("after 'from'",)),
    ("- {every: 1ms, until: 1h, action: pause, select: n4, for: 0.5ms}", 15, "churn.timeline[0].every",
     ("repeats more than",)),
    ("- {at: 1, every: 2, action: kill, select: n4}", 15, "churn.timeline[0].every", ("either 'at'",)),
    ("- {at: 1, action: kill, select: {count: 11}}", 15, "churn.timeline[0].select.count", ("only 10",)),
])
def test_impossible_churn_timelines(tmp_path, capsys, timeline, line, field, words):
    text = BASE + "churn:\n  timeline:\n" + textwrap.indent(timeline, "    ") + "\n"
    refused(tmp_path, capsys, text, line, f"{field}: ", *words)


def test_steady_churn_that_would_never_end(tmp_path, capsys):
    text = BASE.replace("count: 10", "count: 1000") + textwrap.dedent("""\
    churn:
      steady:
        fraction: 0.9
        session: {distribution: exponential, mean: 1ms}
    duration: 168h
    """)
    refused(tmp_path, capsys, text, 14, "churn.steady: ", "more than", seconds=10.0)


# -- the wire and linger


def test_anonymous_messages_need_content_ids(tmp_path, capsys):
    refused(tmp_path, capsys, BASE + "wire:\n  authenticity: anonymous\n", 14, "wire.authenticity: ", "first-8-bytes")
    refused(tmp_path, capsys, BASE + "wire: {security: tls}\n", 13, "wire.security: ", "noise")


def test_wire_and_linger_auto_resolve_onto_the_experiment():
    r = parse_experiment(BASE, "w.yaml").resolve()
    assert (r.security, r.authenticity, r.message_id, r.linger_auto) == ("noise", "strict", "from-seqno", False)
    text = BASE + "wire: {security: plaintext, authenticity: anonymous, message_id: first-8-bytes}\nlinger: auto\n"
    r = parse_experiment(text, "w.yaml").resolve()
    assert (r.security, r.authenticity, r.message_id) == ("plaintext", "anonymous", "first-8-bytes")
    assert r.linger_auto and r.linger == values.LINGER_AUTO_MAX
    assert r.end_time() == pytest.approx(2.0 + values.LINGER_AUTO_MAX)
    exp = parse_experiment(text, "w.yaml")
    again = parse_experiment(resolved_to_yaml(exp.resolve(), exp), "experiment.resolved.yaml").resolve()
    assert again.digest() == exp.resolve().digest() and again.message_id == "first-8-bytes" and again.linger_auto


def test_independent_problems_are_listed_one_per_line(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(BASE.replace("count: 10", "count: -3").replace("ms: 20", "ms: 20, jitter: 1"))
    out = script(path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0] == f"error: {path}:3: nodes.count: expected a node count >= 1, got -3", lines
    assert lines[1].startswith(f"{path}:8: links.latency.jitter: unknown key"), lines
    assert len(lines) == 2


def test_validate_shows_the_wire_and_linger(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "linger: auto\nwire: {security: plaintext}\n")
    assert run_cli("validate", str(path), "--json") == 0
    s = json.loads(capsys.readouterr().out)
    assert s["wire"] == {"security": "plaintext", "authenticity": "strict", "message_id": "from-seqno"}
    assert s["linger_auto"] is True and s["linger"] == values.LINGER_AUTO_MAX
    assert run_cli("validate", str(path)) == 0
    out = capsys.readouterr().out
    assert "plaintext" in out and "linger auto" in out
