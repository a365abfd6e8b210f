"""`testbed spark start|stop|status` and analyses through Spark Connect,
through the installed console script: a server that is up serves `testbed
analyze` with the same figures; one that is not gives exit 3 quickly."""

from __future__ import annotations

import json
import os
import time
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import trace_census
from tests.spark_fixtures import requires_java

TESTBED = Path(sys.executable).parent / "testbed"
CI_RUN = Path(__file__).parent / "fixtures" / "analysis_before" / "ci"
TOPOLOGIES = Path(__file__).resolve().parents[1] / "topologies"


def cli(*argv: str, state: Path, timeout: float = 600, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_MASTER")}
    env["TESTBED_STATE_DIR"] = str(state)
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([str(TESTBED), *argv], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def session_conf(url: str, key: str) -> str:
    """A conf value of the server-side session `url` names, read by a client of
    its own (a new process: the Connect client's exit hook is skipped)."""
    code = ("import os, sys; from pyspark.sql import SparkSession; "
            f"print(SparkSession.builder.remote({url!r}).getOrCreate().conf.get({key!r})); "
            "sys.stdout.flush(); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def copy_run(tmp_path: Path) -> Path:
    run = tmp_path / "ci"
    shutil.copytree(CI_RUN, run, ignore=shutil.ignore_patterns("*.before.json"))
    return run


def test_status_without_a_server_exits_3(tmp_path):
    out = cli("spark", "status", "--json", state=tmp_path)
    assert out.returncode == 3
    assert json.loads(out.stdout) == {"up": False, "server": None, "warm_up": None}
    assert cli("spark", "stop", state=tmp_path).returncode == 0


def test_unreachable_remote_exits_3_at_once(tmp_path):
    out = cli("analyze", str(copy_run(tmp_path)), "--spark-remote", "sc://127.0.0.1:1", state=tmp_path, timeout=60)
    assert out.returncode == 3
    assert "no Spark Connect server answers at sc://127.0.0.1:1" in out.stderr


@requires_java
@pytest.mark.spark
@pytest.mark.slow
def test_a_running_server_serves_analyze(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    try:
        started = cli("spark", "start", "--json", state=state)
        assert started.returncode == 0, started.stderr
        server = json.loads(started.stdout)
        assert server["url"].startswith("sc://127.0.0.1:")
        assert server["warm_up_s"] > 0  # a new server analysed the warm-up run before start returned
        status = cli("spark", "status", "--json", state=state)
        assert status.returncode == 0 and json.loads(status.stdout)["up"] is True
        warming = json.loads(status.stdout)["warm_up"]  # start left the background warm-up running
        assert warming["pid"] > 0 and warming["small"]["runs"] >= 0
        again = cli("spark", "start", "--json", state=state)  # already up: the same server
        assert json.loads(again.stdout)["pid"] == server["pid"]
        assert json.loads(again.stdout)["warm_up_s"] == 0  # a server already up is not warmed again
        for argv in (("spark", "start"), ("spark", "status")):  # the URL whole, to copy, in a narrow terminal
            lines = cli(*argv, state=state, columns=40).stdout.splitlines()
            assert f"url: {server['url']}" in lines and f"export SPARK_REMOTE='{server['url']}'" in lines
        deadline = time.monotonic() + 300
        while not (done := json.loads(cli("spark", "status", "--json", state=state).stdout)["warm_up"])["done"]:
            assert time.monotonic() < deadline, done
            time.sleep(1)
        assert done["error"] is None and done["small"]["runs"] >= 1
        assert done["large"]["runs"] >= 1 and done["large"]["best_s"] > 0  # the 1M-event run's plans warmed too

        run = copy_run(tmp_path)
        out = cli("analyze", str(run), "--json", state=state)  # no flag: the running server
        assert out.returncode == 0, out.stderr
        summary = json.loads(out.stdout)
        before = json.loads((CI_RUN / "summary.before.json").read_text())
        for key in ("messages", "expected_deliveries", "deliveries", "delivery_ratio", "latency_ms", "duplicates",
                    "mesh_degree", "control"):
            assert summary[key] == before[key], key
        # 100 nodes, 101 chunks in memory, through the server: every figure as the raw traces count it
        sim = tmp_path / "simsub-100"
        made = cli("sim", str(TOPOLOGIES / "simsub-100.yaml"), "--out", str(sim), "--no-report", state=state)
        assert made.returncode == 0, made.stderr
        warm = cli("analyze", str(sim), "--json", state=state)
        assert warm.returncode == 0, warm.stderr
        trace_census.assert_agrees(sim, trace_census.count(sim), json.loads(warm.stdout))
        assert ";session_id=" in server["url"]  # every analysis shares one server-side session:
        assert session_conf(server["url"], "spark.sql.codegen.factoryMode") == "NO_CODEGEN"  # the one analyze set
    finally:
        stopped = cli("spark", "stop", "--json", state=state)
    assert stopped.returncode == 0
    assert json.loads(stopped.stdout)["stopped"]["pid"] == server["pid"]
    assert cli("spark", "status", state=state).returncode == 3
    assert not (state / "spark-connect-warming.json").exists()
    assert not (state / "spark-connect-busy.lock").exists()  # analyze held it; stop leaves nothing behind
    with pytest.raises(ProcessLookupError):  # stop ended the background warm-up too
        os.kill(warming["pid"], 0)
