"""The analysis on a Spark standalone cluster gives the same summary as local.

Starts a master and one worker from PySpark's own distribution
(`bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`)
on 127.0.0.1 and free ports, runs the installed `testbed analyze
--spark-master spark://127.0.0.1:PORT` on a simulated run, and compares
summary.json with a local analysis of a copy of the same run. The master and
worker (and the worker's executors, in its process group) are always stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.spark_fixtures import requires_java

pytestmark = [pytest.mark.spark, pytest.mark.slow, requires_java, pytest.mark.timeout(1200)]

TESTBED = Path(sys.executable).parent / "testbed"
QUICK = Path(__file__).resolve().parent.parent / "topologies" / "quick.yaml"
READY_TIMEOUT_S = 240
# Fields that legitimately differ between two analyses of the same run.
TIMINGS = {"analysis_wall_s"}


@dataclass(frozen=True)
class Cluster:
    master_url: str
    web_url: str
    logs: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _cluster_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("SPARK_MASTER", None)
    return env


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([str(_spark_class()), *argv], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=_cluster_env(), start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _alive_workers(web_url: str) -> int:
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as response:
            return int(json.load(response).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("spark-cluster")
    port, web, worker_web = _free_port(), _free_port(), _free_port()
    master_url, web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}"
    processes = []
    try:
        processes.append(_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                 "--port", str(port), "--webui-port", str(web)], logs / "master.log"))
        processes.append(_start(["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                                 "--cores", "2", "--memory", "2g", "--webui-port", str(worker_web),
                                 "--work-dir", str(logs / "work")], logs / "worker.log"))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while _alive_workers(web_url) < 1:
            for process, name in zip(processes, ("master", "worker")):
                if process.poll() is not None:
                    pytest.fail(f"the Spark {name} exited ({process.returncode}):\n"
                                f"{(logs / f'{name}.log').read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no worker registered with {master_url} within {READY_TIMEOUT_S} s:\n"
                            f"{(logs / 'worker.log').read_text()[-3000:]}")
            time.sleep(1)
        yield Cluster(master_url, web_url, logs)
    finally:
        for process in reversed(processes):
            _stop(process)


def _testbed(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(TESTBED), *args], capture_output=True, text=True, timeout=timeout,
                          env=_cluster_env(), check=False)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_cluster_analysis_matches_local(cluster, tmp_path):
    run = tmp_path / "run"
    made = _testbed("sim", str(QUICK), "--out", str(run), "--no-report")
    assert made.returncode == 0, made.stderr
    local, remote = tmp_path / "local", tmp_path / "cluster"
    shutil.copytree(run, local)
    shutil.copytree(run, remote)

    on_local = _testbed("analyze", str(local), "--json", "--spark-master", "local[2]")
    assert on_local.returncode == 0, on_local.stderr
    on_cluster = _testbed("analyze", str(remote), "--json", "--spark-master", cluster.master_url)
    assert on_cluster.returncode == 0, on_cluster.stderr

    # The job really ran on the cluster: the master lists it as completed.
    with urllib.request.urlopen(f"{cluster.web_url}/json/", timeout=5) as response:
        state = json.load(response)
    assert [app["name"] for app in state.get("completedapps", [])] == ["gossip-testbed analysis"]

    expected = {k: v for k, v in _summary(local).items() if k not in TIMINGS}
    got = {k: v for k, v in _summary(remote).items() if k not in TIMINGS}
    assert got == expected
    assert TIMINGS <= _summary(remote).keys()  # the exclusion names fields that exist
