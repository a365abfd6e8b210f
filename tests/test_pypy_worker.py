"""The line protocol between `testbed sim --pypy` and its worker
(orchestrator/pypy/worker.py): what the worker's reporter writes, replayed on
the host, is the same calls on the host's reporter, and the result comes
through; a line that is not the protocol's is shown, not lost."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator

from orchestrator.progress import Reporter
from orchestrator.pypy.worker import LineReporter, Replay


class Recording(Reporter):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    @contextlib.contextmanager
    def phase(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        self.calls.append(("phase", description, total))
        yield lambda n=1: self.calls.append(("advance", n))
        self.calls.append(("end", description))

    def note(self, message: str) -> None:
        self.calls.append(("note", message))


def test_replay_makes_the_workers_calls_on_the_hosts_reporter():
    out = io.StringIO()
    worker = LineReporter(out)
    worker.note("starting")
    with worker.phase("simulating x: 3 nodes", 100) as advance:
        advance(40)
        advance(60)
    worker.result(summary={"delivery_ratio": 1.0}, peak_rss_mb=12.5)

    host = Recording()
    replay = Replay(host)
    for line in out.getvalue().splitlines():
        replay.line(line)
    replay.line("Warning: cannot find your CPU L2 cache size in /proc/cpuinfo")
    replay.close()

    assert host.calls == [
        ("note", "starting"),
        ("phase", "simulating x: 3 nodes", 100), ("advance", 40), ("advance", 60), ("end", "simulating x: 3 nodes"),
        ("note", "Warning: cannot find your CPU L2 cache size in /proc/cpuinfo"),
    ]
    assert replay.result == {"summary": {"delivery_ratio": 1.0}, "peak_rss_mb": 12.5}


def test_a_phase_cut_off_by_a_dying_worker_is_closed_on_the_host():
    host = Recording()
    replay = Replay(host)
    replay.line('{"phase": "simulating", "total": 100}')
    replay.line('{"advance": 5}')
    replay.close()
    assert host.calls == [("phase", "simulating", 100), ("advance", 5), ("end", "simulating")]
    assert replay.result is None


def test_a_nested_phase_ends_alone_and_the_outer_one_goes_on():
    host = Recording()
    replay = Replay(host)
    for line in ('{"phase": "outer", "total": null}', '{"phase": "inner", "total": 2}', '{"advance": 2}',
                 '{"end": "inner"}', '{"advance": 1}', '{"end": "outer"}'):
        replay.line(line)
    replay.close()
    assert host.calls == [("phase", "outer", None), ("phase", "inner", 2), ("advance", 2), ("end", "inner"),
                          ("advance", 1), ("end", "outer")]
