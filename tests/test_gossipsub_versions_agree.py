"""topologies/gossipsub-versions.yaml in a reduced form runs in the simulator
and on docker, and the two agree on delivery (issue 34's "the two agree on
delivery").

The reduced form is the file itself with fewer of everything: 12 nodes, 10
messages of 100 KiB from two publishers, a fifth of the other nodes churned
with 5 s sessions, 15 s, and only its v1.2 variant (the one with every
mechanism: scoring, backoff, flood publishing, IDONTWANT). Both runs go through
the installed console script and must pass the file's expectation on the
recipients that stayed up while a message spread (its floor on the plain
delivery ratio is left out: at 100 expected deliveries one kill in flight
would break it), every such recipient must have each message in both,
and each run's figures must be its traces' own (tests/trace_census.py).
About 3 minutes with the docker start and two analyses: the docker half is
why it is over a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import trace_census
from tests.docker_fixtures import needs_docker
from tests.spark_fixtures import requires_java

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "topologies" / "gossipsub-versions.yaml"
TESTBED = Path(sys.executable).with_name("testbed")

pytestmark = [requires_java, needs_docker, pytest.mark.spark, pytest.mark.slow]


def reduced(path: Path) -> Path:
    """gossipsub-versions.yaml with fewer nodes, messages and seconds, v1.2 only."""
    doc = yaml.safe_load(FILE.read_text())
    doc["name"] = "gossipsub-versions-small"
    doc["nodes"]["count"] = 12
    doc["overlay"]["degree"] = 4
    doc["workload"].update(messages=10, publishers={"nodes": ["n0", "n1"]})
    doc["churn"]["steady"].update(fraction=0.2, session={"distribution": "exponential", "mean": "5s"},
                                  downtime={"distribution": "exponential", "mean": "2s"})
    doc.update(duration="15s", linger="5s", variants={"v1_2": doc["variants"]["v1_2"]},
               expectations=[e for e in doc["expectations"] if e.startswith("stayed_up_")])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def summary_of(cmd: list[str], out: Path, env: dict[str, str]) -> dict:
    done = subprocess.run([str(TESTBED), *cmd, "--out", str(out), "--json"], capture_output=True, text=True,
                          timeout=900, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = out / "v1_2"
    summary = json.loads((run / "summary.json").read_text())
    trace_census.assert_agrees(run, trace_census.count(run), summary)
    return summary


def test_simulator_and_docker_agree_on_delivery(tmp_path):
    path = reduced(tmp_path / "small.yaml")
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPARK_REMOTE", None)
    sim = summary_of(["sim", str(path)], tmp_path / "sim", env)
    docker = summary_of(["run", str(path), "--backend", "docker"], tmp_path / "docker", env)
    for s in (sim, docker):
        assert s["messages"] == 10
        assert s["expectations"] and all(e["passed"] for e in s["expectations"]), s["expectations"]
        assert s["idontwant"]["ids_received"] > 0
    assert sim["stayed_up_delivery_ratio"] == docker["stayed_up_delivery_ratio"] == 1.0
    assert sim["stayed_up"]["expected"] > 0 and docker["stayed_up"]["expected"] > 0
