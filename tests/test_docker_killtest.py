"""The randomized kill test (tests/kill_harness.py) in CI: 12 tries, each a
SIGKILL of `testbed up`, `run` or `down` at a seeded random moment, then
`testbed down --all`; nothing that state directory made may be left. The
moments are printed (pytest -s, or in the failure message) for replay; the
seed can be changed with TESTBED_KILL_SEED."""

from __future__ import annotations

import os

import pytest

from tests.docker_fixtures import needs_docker, node_image  # noqa: F401 - fixtures
from tests.kill_harness import kill_tries

pytestmark = [pytest.mark.docker, needs_docker]

TRIES = 12


def test_sigkill_at_random_moments_then_down_all_leaves_nothing(tmp_path, node_image, capsys):
    seed = int(os.environ.get("TESTBED_KILL_SEED", "17"))
    lines: list[str] = []

    def report(line: str) -> None:
        lines.append(line)
        with capsys.disabled():
            print(line)

    results = kill_tries(TRIES, seed, tmp_path, report=report)
    assert len(results) == TRIES
    assert {r.command for r in results} == {"up", "run", "down"}  # the seed covers every command
    # enough kills land mid-command for the test to mean something (how many
    # depends on how fast this host runs the commands: a killed CLI is the point)
    assert sum(r.killed for r in results) >= TRIES // 4
    dirty = [r.line() for r in results if not r.clean]
    assert dirty == [], "\n".join(lines)
