"""Exit codes as a CI job sees them: the installed `testbed` console script run
as a separate process. An in-process runner once hid that `testbed run` exited
0 on a failed expectation, so every promise about the exit status is checked
here through a real process: 0 pass, 1 an expectation or assertion failed,
2 bad input, 3 expectations exist but the analysis cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark_fixtures import requires_java

REPO = Path(__file__).resolve().parent.parent
TESTBED = Path(sys.executable).parent / "testbed"
QUICK = (REPO / "topologies" / "quick.yaml").read_text()


def cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    assert TESTBED.exists(), f"the console script is not installed at {TESTBED} (run ./bootstrap.sh)"
    return subprocess.run(
        [str(TESTBED), *argv], capture_output=True, text=True, timeout=timeout,
        env=env if env is not None else os.environ.copy(), stdin=subprocess.DEVNULL,
    )


def with_expectations(tmp_path: Path, *exprs: str, source: str = QUICK) -> Path:
    head = source[: source.index("expectations:")]
    tail = source[source.index("linger:"):]
    body = "expectations:\n" + "".join(f"  - {e}\n" for e in exprs)
    path = tmp_path / "exp.yaml"
    path.write_text(head + body + tail)
    return path


def no_java_env(tmp_path: Path) -> dict[str, str]:
    """An environment where no `java` can be found: an empty PATH (the console
    script's shebang names its interpreter) and no JAVA_HOME."""
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "SPARK_REMOTE")}
    env["PATH"] = str(empty)
    return env


@pytest.fixture(scope="module")
def failed_sim(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    tmp = tmp_path_factory.mktemp("failed-sim")
    path = with_expectations(tmp, "delivery_ratio >= 0.99", "latency_p50_ms < 0.001")
    run_dir = tmp / "run"
    return cli("sim", str(path), "--out", str(run_dir)), run_dir


@requires_java
@pytest.mark.spark
def test_sim_exits_1_when_an_expectation_fails(failed_sim):
    proc, run_dir = failed_sim
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout and "latency_p50_ms < 0.001" in proc.stdout
    assert (run_dir / "summary.json").exists()


@requires_java
@pytest.mark.spark
def test_analyze_exit_status_follows_its_assertions(failed_sim):
    _, run_dir = failed_sim
    bad = cli("analyze", str(run_dir), "--assert", "delivery_ratio >= 1.5")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "delivery_ratio >= 1.5" in bad.stderr


@requires_java
@pytest.mark.spark
def test_analyze_exits_0_when_everything_holds(tmp_path):
    path = with_expectations(tmp_path, "delivery_ratio >= 0.9")
    run_dir = tmp_path / "run"
    sim = cli("sim", str(path), "--out", str(run_dir), "--json")
    assert sim.returncode == 0, sim.stdout + sim.stderr
    ok = cli("analyze", str(run_dir), "--assert", "delivery_ratio >= 0.5")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@requires_java
@pytest.mark.spark
@pytest.mark.slow
def test_run_exits_1_when_an_expectation_fails(tmp_path):
    source = (REPO / "topologies" / "ci-smoke.yaml").read_text()
    path = with_expectations(tmp_path, "delivery_ratio >= 0.9", "latency_p50_ms < 0.001", source=source)
    proc = cli("run", str(path), "--backend", "process", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "latency_p50_ms < 0.001" in proc.stdout


def test_sim_exits_3_when_expectations_cannot_be_checked(tmp_path):
    path = with_expectations(tmp_path, "delivery_ratio >= 0.99")
    proc = cli("sim", str(path), "--out", str(tmp_path / "run"), env=no_java_env(tmp_path))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Java" in proc.stderr and "Traceback" not in proc.stderr


def test_analyze_exits_3_without_java(tmp_path):
    path = with_expectations(tmp_path, "delivery_ratio >= 0.99")
    run_dir = tmp_path / "run"
    assert cli("sim", str(path), "--out", str(run_dir), "--no-report").returncode == 0
    proc = cli("analyze", str(run_dir), env=no_java_env(tmp_path))
    assert proc.returncode == 3, proc.stdout + proc.stderr


@pytest.mark.parametrize("argv", [
    ("validate", "no-such-file.yaml"),
    ("sim", "no-such-file.yaml"),
    ("run", "no-such-file.yaml", "--backend", "process"),
    ("analyze", "no-such-run-dir"),
    ("sim", "--no-such-option"),
])
def test_bad_input_exits_2(argv):
    proc = cli(*argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_invalid_experiment_exits_2_with_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(QUICK.replace("count: 16", "count: -3"))
    proc = cli("validate", str(path))
    assert proc.returncode == 2
    assert f"{path}:" in proc.stderr and "nodes.count" in proc.stderr


def test_node_returns_the_status_it_decides(tmp_path):
    proc = cli("node", "--config", str(tmp_path / "missing.json"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot load node config" in proc.stderr


def test_version_and_help_exit_0():
    assert cli("--version").returncode == 0
    assert cli("sim", "--help").returncode == 0
