"""`linger: auto` on real backends: after the workload and churn the
controller waits until no node's RPC and delivery counters change between two
polls of its status, at most until the linger bound, then stops."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.api import BackendContext
from orchestrator.experiment.lifecycle import NodeLife, Process
from orchestrator.run.nodestate import NodeState
from orchestrator.backends.process.backend import ProcessBackend
from orchestrator.progress import Reporter
from orchestrator.records.state import StateStore
from orchestrator.run.workload import linger_until_quiet
from tests.test_process_backend import small_experiment, state_dir  # noqa: F401 - fixture


class ScriptedClient:
    """A control client whose node reports the next counters on each status."""

    def __init__(self, script: list[int]) -> None:
        self.script = script

    def try_call(self, cmd: str, timeout: float | None = None, **args: Any) -> dict[str, Any]:
        value = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return {"counters": {"rpcs_in": value, "rpcs_out": value, "delivered": 0}}


class ScriptedBackend(ProcessBackend):
    def __init__(self, ctx: BackendContext, scripts: dict[str, list[int]]) -> None:
        super().__init__(ctx)
        self.clients = {n: ScriptedClient(s) for n, s in scripts.items()}

    def control_client(self, node: str) -> ScriptedClient:  # type: ignore[override]
        return self.clients[node]


def scripted(tmp_path: Path, scripts: dict[str, list[int]]) -> tuple[dict[str, NodeState], ScriptedBackend]:
    backend = ScriptedBackend(BackendContext("q", tmp_path, StateStore(tmp_path / "state")), scripts)
    nodes = {n: NodeState(n, "floodsub", 1, [], 0, NodeLife(Process.RUNNING)) for n in scripts}
    return nodes, backend


def test_quiet_after_two_equal_polls(tmp_path):
    nodes, backend = scripted(tmp_path, {"a": [1, 2, 3, 3], "b": [5]})
    took = linger_until_quiet(nodes, backend, time.time_ns() + 10 * 10**9, Reporter(), poll_s=0.01)
    assert took is not None and took < 1.0
    assert backend.clients["a"].script == [3]  # polled until a's counters stopped moving


def test_counters_the_caller_has_are_the_first_poll(tmp_path):
    nodes, backend = scripted(tmp_path, {"a": [7, 8]})
    took = linger_until_quiet(nodes, backend, time.time_ns() + 10 * 10**9, Reporter(), poll_s=0.01,
                              first={"a": (7, 7, 0)})
    assert took is not None and backend.clients["a"].script == [8]  # one poll, equal to what was given


def test_a_busy_network_lingers_to_the_bound(tmp_path):
    nodes, backend = scripted(tmp_path, {"a": list(range(1000))})
    deadline = time.time_ns() + 300_000_000
    assert linger_until_quiet(nodes, backend, deadline, Reporter(), poll_s=0.01) is None
    assert time.time_ns() >= deadline


def test_unreachable_nodes_are_not_polled(tmp_path):
    nodes, backend = scripted(tmp_path, {"a": [1], "b": list(range(1000))})
    nodes["b"].life = NodeLife(Process.PAUSED)
    assert linger_until_quiet(nodes, backend, time.time_ns() + 10**9, Reporter(), poll_s=0.01) is not None


@pytest.mark.slow
def test_run_stops_once_quiet_not_at_the_bound(state_dir, tmp_path):  # noqa: F811 - fixture
    from orchestrator.run.runs import run_experiment

    base = small_experiment(n=4, duration=1.0)
    resolved = dataclasses.replace(base, duration=1.0, linger=30.0, linger_auto=True)
    run_dir = tmp_path / "run"
    run_experiment(resolved, None, "process", run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    last_publish = max(e["t_ns"] for e in events if e["kind"] == "publish")
    quiet = [e for e in events if e["kind"] == "quiet"]
    assert len(quiet) == 1 and quiet[0]["after_s"] < 20
    end = next(e["t_ns"] for e in events if e["kind"] == "run_end")
    assert (end - last_publish) / 1e9 < 25  # the bound was 30 s after the last publish
