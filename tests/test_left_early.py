"""A node that leaves before `down` on its own (a gossipsub-interop node
whose script ended, a crashed router) is named in manifest.json's
"left_early" and among its warnings (which the report shows as banners),
with when it left: through the
console script on the process backend (a router SIGKILLed behind the
testbed's back), and the docker state file's FinishedAt read as Unix ns."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from orchestrator.run.left_early import facts, warning
from orchestrator.backends.process.backend import proc_cmdline
from tests.test_cli_lifecycle import env, experiment, router_pids, tb  # noqa: F401 - env is a fixture


@pytest.mark.slow
def test_a_router_that_dies_is_reported_as_left_early(env, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    tb(env, "up", str(experiment(tmp_path, 3)), "--backend", "process", "--name", "early", "--out", str(run))
    pids = {next(Path(a).stem for a in proc_cmdline(pid) if a.endswith(".json")): pid
            for pid in router_pids(tmp_path / "state")}
    assert sorted(pids) == ["n0", "n1", "n2"]
    killed_at = time.time_ns()
    os.kill(pids["n1"], signal.SIGKILL)
    tb(env, "down", "early")
    manifest = json.loads((run / "manifest.json").read_text())
    assert list(manifest["left_early"]) == ["n1"]
    assert manifest["left_early"]["n1"]["gone_by_ns"] > killed_at  # the process backend knows no exit time
    assert any(w.startswith("1 node(s) left before the end of the run, on their own") and "n1 before down" in w
               for w in manifest["warnings"])


def test_docker_exit_time_and_status(tmp_path):
    logs = tmp_path / "node-logs"
    logs.mkdir()
    (logs / "img-0.docker.json").write_text(json.dumps(
        {"Status": "exited", "ExitCode": 0, "FinishedAt": "2026-11-28T12:00:05.25Z"}))
    (logs / "img-1.docker.json").write_text(json.dumps({"Status": "exited", "FinishedAt": "0001-01-01T00:00:00Z"}))
    t0 = 1_795_867_200 * 10**9  # 2026-11-28T12:00:00Z
    got = facts(tmp_path, ["img-0", "img-1", "n2"], t0 + 9 * 10**9, t0)
    assert got == {"img-0": {"left_at_ns": t0 + 5_250_000_000, "exit_code": 0, "t_s": 5.25},
                   "img-1": {"gone_by_ns": t0 + 9 * 10**9, "t_s": 9.0},
                   "n2": {"gone_by_ns": t0 + 9 * 10**9, "t_s": 9.0}}
    assert warning(got).endswith("img-0 at t=5.25 s (exit status 0), img-1 by t=9 s, n2 by t=9 s")
