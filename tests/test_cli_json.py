"""The CLI contract: every command with --json prints exactly one JSON
document on stdout (json.loads of the whole of stdout fails on a second one),
whatever else happens, through the installed console script. `run --json`
is covered end to end in tests/test_backend_contract.py, `up`, `status
NAME`, `publish` and `churn` in tests/test_cli_lifecycle.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark_fixtures import requires_java
from tests.test_exit_codes import no_java_env, with_expectations

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(Path(sys.executable).with_name("testbed"))
QUICK = ROOT / "topologies" / "quick.yaml"


def one_document(*argv: str, env: dict[str, str] | None = None, code: int = 0) -> object:
    out = subprocess.run([TESTBED, *argv], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == code, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}


def test_validate_and_schema(env):
    assert isinstance(one_document("validate", str(QUICK), "--json", env=env), dict)
    assert "properties" in one_document("schema", env=env)


def test_sim_without_analysis(env, tmp_path):
    doc = one_document("sim", str(QUICK), "--out", str(tmp_path / "run"), "--no-report", "--json", env=env)
    assert [r["run_dir"] for r in doc["runs"]] == [str(tmp_path / "run")]


def test_sim_whose_expectations_cannot_be_checked_still_prints_one_document(tmp_path):
    path = with_expectations(tmp_path, "delivery_ratio >= 0.99")
    doc = one_document("sim", str(path), "--out", str(tmp_path / "run"), "--json", env=no_java_env(tmp_path), code=3)
    assert doc["analysis_skipped"] and "Java" in doc["analysis_skipped"]
    assert doc["runs"][0]["summary"]["messages"] > 0


def test_status_and_down_with_nothing_up(env):
    assert one_document("status", "--json", env=env) == []
    assert one_document("down", "--all", "--json", env=env) == {"removed": []}


@requires_java
@pytest.mark.spark
def test_sim_with_analysis_puts_reports_and_expectations_in_the_same_document(tmp_path):
    path = with_expectations(tmp_path, "delivery_ratio >= 0.5")
    doc = one_document("sim", str(path), "--out", str(tmp_path / "run"), "--json")
    assert doc["reports"] == [str(tmp_path / "run" / "report.html")]
    (results,) = doc["expectations"].values()
    assert [r["passed"] for r in results] == [True] and doc["analysis_skipped"] is None
