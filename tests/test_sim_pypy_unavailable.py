"""`testbed sim --pypy` with no Docker daemon to run PyPy in: one error that
says so, the exit status of an unavailable backend (3), no traceback, and
no run directory begun (nothing is simulated half-way). Runs everywhere: the
daemon is one that cannot exist."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / ".venv" / "bin" / "testbed"


def test_no_daemon_is_one_clear_error_and_nothing_started(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    result = subprocess.run([str(TESTBED), "sim", str(ROOT / "topologies" / "quick.yaml"), "--pypy", "--no-report",
                             "--out", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 3, result.stderr
    assert "no Docker daemon reachable" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists()
