"""The one fan-out rule (orchestrator/fanout.py): at most N calls at once,
results in the items' order, a failure cancels what has not started, and
errors_by_item keeps going past one item's failure."""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.fanout import errors_by_item, fan_out


def test_at_most_n_at_once_and_results_in_the_items_order():
    lock, active, peak = threading.Lock(), [0], [0]

    def work(i: int) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1
        return i * i

    assert fan_out(work, list(range(40)), 4) == [i * i for i in range(40)]
    assert 1 < peak[0] <= 4


def test_a_failure_cancels_what_has_not_started():
    started: list[int] = []

    def work(i: int) -> int:
        started.append(i)
        if i == 0:
            raise KeyboardInterrupt
        time.sleep(0.05)
        return i

    with pytest.raises(KeyboardInterrupt):
        fan_out(work, list(range(100)), 2)
    assert len(started) < 10


def test_one_item_runs_in_the_callers_thread():
    assert fan_out(lambda _: threading.current_thread(), ["a"], 8) == [threading.current_thread()]
    assert fan_out(lambda _: 1, [], 8) == []


def test_errors_by_item_names_each_failure_and_runs_every_item():
    done: list[str] = []

    def work(node: str) -> None:
        done.append(node)
        if node in ("b", "d"):
            raise RuntimeError(f"{node} refused")

    errors = errors_by_item(work, ["a", "b", "c", "d"], 2)
    assert {n: str(e) for n, e in errors.items()} == {"b": "b refused", "d": "d refused"}
    assert sorted(done) == ["a", "b", "c", "d"]
