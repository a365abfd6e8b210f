"""The simulator's side of `testbed sim --pypy` (orchestrator/pypy/run.py):
`pypy3 -m orchestrator.pypy.worker REQUEST` runs `run_simulation` on what the
host resolved and tells the host how it goes, one JSON document per line on
stdout. The lines are the progress protocol's calls (orchestrator/progress.py)
and, last, the result; `Replay` turns them back into calls on the host's
reporter. Both ends are here so the protocol is in one place.

The request is a pickle of `Request`: the experiment resolved on the host
(with the host's pydantic pins, which PyPy cannot load; the simulator needs
only the resolved dataclasses), so what PyPy simulates is exactly what
CPython would have.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import resource
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.progress import Reporter
from orchestrator.sim.trace_level import TraceLevel


@dataclass(frozen=True)
class Request:
    resolved: ResolvedExperiment
    resolved_yaml: str
    run_dir: str
    trace_level: TraceLevel


class LineReporter(Reporter):
    """Progress as JSON lines on `out`."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def _line(self, **doc: Any) -> None:
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()

    @contextlib.contextmanager
    def phase(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        self._line(phase=description, total=total)
        yield lambda n=1: self._line(advance=n)
        self._line(end=description)

    def note(self, message: str) -> None:
        self._line(note=message)

    def result(self, **doc: Any) -> None:
        self._line(result=doc)


class Replay:
    """The host's end: each line from the worker, as calls on `reporter`;
    the result line is kept as `result`."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.result: dict[str, Any] | None = None
        self._phases: list[tuple[contextlib.AbstractContextManager, Callable[[int], None]]] = []  # innermost last

    def line(self, text: str) -> None:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = {"note": text}  # the interpreter's own output (a warning): shown as it is
        if "phase" in doc:
            phase = self.reporter.phase(doc["phase"], doc["total"])
            self._phases.append((phase, phase.__enter__()))
        elif "advance" in doc:
            if self._phases:
                self._phases[-1][1](doc["advance"])
        elif "end" in doc:
            if self._phases:
                self._phases.pop()[0].__exit__(None, None, None)
        elif "note" in doc:
            self.reporter.note(doc["note"])
        elif "result" in doc:
            self.result = doc["result"]

    def close(self) -> None:
        """Ends the phases a worker that died left open, innermost first."""
        while self._phases:
            self._phases.pop()[0].__exit__(None, None, None)


def main(argv: list[str]) -> int:
    from orchestrator.sim.run import run_simulation  # noqa: PLC0415 - the worker's whole import cost, once

    request: Request = pickle.loads(Path(argv[1]).read_bytes())
    reporter = LineReporter(sys.stdout)
    result = run_simulation(request.resolved, request.resolved_yaml, Path(request.run_dir), reporter,
                            request.trace_level)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    reporter.result(summary=result.summary, peak_rss_mb=round(peak_mb, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
