"""`testbed analyze`: exit codes (0 pass, 1 failed assertion, 2 bad input)
and the JUnit XML. The Spark cases run in-process (typer's CliRunner) so they
share the session's Spark; the bad-input cases run the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.assertions import check_assertions, junit_xml, parse_assertion
from orchestrator.errors import InputError
from tests.spark_fixtures import requires_java, worked_example
from tests.spark_fixtures import spark  # noqa: F401

TESTBED = Path(sys.executable).with_name("testbed")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([TESTBED, *args], capture_output=True, text=True, timeout=120)


def invoke(*args: str):
    from cli.main import app

    return CliRunner().invoke(app, list(args))


def test_not_a_run_dir_exits_2(tmp_path):
    out = run_cli("analyze", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert "not a run directory" in out.stderr


def test_run_dir_without_traces_exits_2(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    out = run_cli("analyze", str(tmp_path))
    assert out.returncode == 2
    assert "no .pb/.json/.jsonl files" in out.stderr


@pytest.mark.parametrize("expr", ["delivery_ratio >= high", "delivery_ratio =< 1", "import os", "no_such_metric > 1"])
def test_bad_assertion_exits_2_before_any_analysis(tmp_path, expr):
    root = worked_example(tmp_path).write()
    out = run_cli("analyze", str(root), "--assert", expr)
    assert out.returncode == 2
    assert "bad assertion" in out.stderr
    assert not (root / "summary.json").exists()


def _processes_with(marker: str) -> list[int]:
    """The live processes whose environment holds `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


@requires_java
def test_analyze_ends_its_jvm_and_removes_its_files(tmp_path):
    """When the console script has exited, the JVM it started is gone (left
    to itself it shuts down for about half a second more, holding the
    caller's pipes), and so are Spark's and the JVM's temporary files."""
    root = worked_example(tmp_path).write()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = f"analyze-{uuid.uuid4().hex}"
    env = dict(os.environ, TMPDIR=str(tmp), TESTBED_STATE_DIR=str(tmp_path / "state"), JVM_TEST_MARKER=marker)
    env.pop("SPARK_REMOTE", None)
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.run([TESTBED, "analyze", str(root), "--json"], stdout=out, stderr=err, env=env, timeout=300)
    assert proc.returncode == 0, (tmp_path / "err").read_text()
    assert json.loads((tmp_path / "out").read_text())["deliveries"] == 10
    assert _processes_with(marker) == []
    assert [p.name for p in tmp.iterdir()] == [f"gossip-testbed-log4j2-{os.getuid()}.properties"]


def test_assertion_parser_and_lookup():
    a = parse_assertion("latency_ms.p99 < 1e3")
    assert (a.metric, a.op, a.value) == ("latency_ms.p99", "<", 1000.0)
    summary = {"delivery_ratio": 0.98, "latency_ms": {"p99": 120.0}, "stretch_p50": None}
    r = check_assertions(summary, ["delivery_ratio >= 0.99", "latency_ms.p99 < 200", "stretch_p50 < 2"])
    assert [x.passed for x in r] == [False, True, False]
    assert r[0].actual == 0.98 and "violates" in r[0].message
    with pytest.raises(InputError):
        check_assertions(summary, ["nope > 1"])


def test_junit_xml_has_one_testcase_per_assertion():
    summary = {"delivery_ratio": 0.98, "duplicates": 3}
    r = check_assertions(summary, ["delivery_ratio >= 0.99", "duplicates <= 5"])
    root = ET.fromstring(junit_xml(r, suite="s"))
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["delivery_ratio >= 0.99", "duplicates <= 5"]
    assert cases[0].find("failure") is not None and cases[1].find("failure") is None


@requires_java
@pytest.mark.spark
def test_analyze_exit_codes_and_junit(tmp_path, spark):  # noqa: F811
    root = worked_example(tmp_path).write()
    junit = tmp_path / "junit.xml"
    # the experiment's expectations hold; one --assert fails -> exit 1
    res = invoke("analyze", str(root), "--assert", "delivery_ratio >= 0.99", "--assert", "duplicates <= 3",
                 "--junit", str(junit))
    assert res.exit_code == 1, res.output
    assert "assertion failed" in res.output
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"delivery_ratio >= 0.7", "latency_ms.p99 < 100", "delivery_ratio >= 0.99",
                          "duplicates <= 3"}
    assert suite.get("failures") == "1"
    assert cases["delivery_ratio >= 0.99"].find("failure") is not None
    assert "0.769231" in cases["delivery_ratio >= 0.99"].find("failure").get("message")
    assert (root / "summary.json").exists()

    # everything holds -> exit 0, JSON output
    res = invoke("analyze", str(root), "--json", "--assert", "latency_p50_ms <= 22.5")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])
    assert out["deliveries"] == 10
    assert [a["passed"] for a in out["assertions"]] == [True, True, True]
