"""Keep warming a new Spark Connect server in the background after
`testbed spark start` returns.

Why: the one warm-up analysis `spark start` waits for (analysis/warmup.py)
pays the server's first, dearest analysis, but a server keeps getting
cheaper for about a dozen more (its JIT compiles the query paths as they get
hot: a 3k-event analysis costs the server several times more CPU on its
second run than on its tenth). Those runs are not worth making the user wait
for, so a detached process runs the warm-up analysis again until its time
stops falling (PATIENCE runs without a new best) or MAX_RUNS, and records its
progress in the state directory for `testbed spark status`. Then it does the
same, up to LARGE_MAX_RUNS times, with a synthetic run just large enough to
take the plans of large runs (whole-stage code generation, more shuffle
partitions: metrics._size_session), whose generated code a small run never
runs: without it a server's first three 10M-event analyses took 23.5, 15.3
and 13.4 s (12 s from the fourth on), after it 13.6, 12.6 and 11.7 s. It starts no run while a real analysis through the server, or an
experiment on this host, is going on (`analysing`): the two would share the
server and the cores, and the user's is the one waited for (and an
experiment's figures would pay for the CPU). An analysis or experiment that
begins during a warm-up run shares the cores with it until that run ends: a
few seconds at most.

    python -m analysis.warming STATE_DIR URL     # what `spark start` detaches
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator

from analysis.connect import pid_alive
from node.atomic import write_atomic

STATE_FILE = "spark-connect-warming.json"
BUSY_FILE = "spark-connect-busy.lock"  # shared-locked by every analysis through the server
MAX_RUNS = 12
PATIENCE = 3  # runs in a row that do not beat the best by IMPROVEMENT
IMPROVEMENT = 0.95
# The warm-up run's size here: about 3k events, a small real run's order of
# magnitude (per-row paths get as hot as a real analysis makes them; a
# single-message run warmed a 3k-event analysis only part of the way).
MESSAGES = 230
# The large phase: a synthetic run of somewhat more than CODEGEN_MIN_EVENTS
# (the generator gives a little under what it is asked for)
LARGE_EVENTS = 1_100_000
LARGE_MAX_RUNS = 4


@dataclass(frozen=True)
class Phase:
    """Warm-up analyses of one run so far, the last and best of their wall times."""

    runs: int = 0
    last_s: float | None = None
    best_s: float | None = None

    def after(self, took: float) -> Phase:
        best = took if self.best_s is None else min(took, self.best_s)
        return Phase(self.runs + 1, took, best)


@dataclass(frozen=True)
class Warming:
    """The background warm-up's progress (the small run's, then the large
    run's), and whether it has finished."""

    pid: int
    small: Phase = Phase()
    large: Phase = Phase()
    done: bool = False
    error: str | None = None


def _path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def _write(state_dir: Path, warming: Warming) -> None:
    write_atomic(_path(state_dir), json.dumps(asdict(warming)) + "\n")


@contextmanager
def analysing(state_dir: Path) -> Iterator[None]:
    """Held around an analysis through this state directory's server, and
    around an experiment while that server is up: the background warm-up
    waits for every such holder to end before it starts its next run (any
    number hold it at once)."""
    with open(state_dir / BUSY_FILE, "a") as busy:
        fcntl.flock(busy, fcntl.LOCK_SH)
        yield


def _wait_for_analyses(state_dir: Path) -> None:
    with open(state_dir / BUSY_FILE, "a") as busy:
        fcntl.flock(busy, fcntl.LOCK_EX)


def read(state_dir: Path) -> Warming | None:
    """The background warm-up of this state directory's server, if one was
    started; one whose process died before it finished reads as done, with
    that as its error."""
    try:
        fields = json.loads(_path(state_dir).read_text())
        phases = {name: Phase(**fields.pop(name, {})) for name in ("small", "large")}
        warming = Warming(**fields, **phases)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if not warming.done and not pid_alive(warming.pid):
        return replace(warming, done=True, error="the warm-up process ended before it finished")
    return warming


def detach(state_dir: Path, url: str) -> Warming:
    """Start the background warm-up in its own session (it outlives the CLI)."""
    with open(state_dir / "spark-connect-warming.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "analysis.warming", str(state_dir), url],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    warming = Warming(proc.pid)
    _write(state_dir, warming)
    return warming


def stop(state_dir: Path, wait_s: float = 5.0) -> None:
    """End a background warm-up still running (its process group, waiting up
    to `wait_s` for it to go), and forget it."""
    warming = read(state_dir)
    if warming is not None and not warming.done:
        try:
            os.killpg(warming.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + wait_s
        while pid_alive(warming.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    _path(state_dir).unlink(missing_ok=True)
    (state_dir / BUSY_FILE).unlink(missing_ok=True)


def keep_warming(state_dir: Path, url: str) -> Warming:
    """Run the warm-up analysis until it stops getting faster, then the large
    one (see the module doc)."""
    from analysis.synthetic import generate
    from analysis.warmup import warm_up_run

    warming = Warming(os.getpid())
    with tempfile.TemporaryDirectory(prefix="testbed-spark-warming-") as tmp:
        small = warm_up_run(Path(tmp) / "small", MESSAGES)
        warming = _warm(state_dir, url, small, warming, "small", MAX_RUNS)
        if not warming.done:
            large = Path(tmp) / "large"
            generate(large, LARGE_EVENTS)
            warming = _warm(state_dir, url, large, warming, "large", LARGE_MAX_RUNS)
    warming = replace(warming, done=True)
    _write(state_dir, warming)
    return warming


def _warm(state_dir: Path, url: str, run: Path, warming: Warming, phase: str, max_runs: int) -> Warming:
    """Analyse `run` until it stops getting faster or `max_runs`, recording
    each run in `warming`'s `phase`; done, with the error, if the server went away."""
    from analysis import run_analysis

    stale = 0
    while getattr(warming, phase).runs < max_runs and stale < PATIENCE:
        _wait_for_analyses(state_dir)
        began = time.monotonic()
        try:
            run_analysis(run, spark_remote=url)
        except Exception as exc:  # noqa: BLE001 - the server went away: nothing left to warm
            return replace(warming, done=True, error=f"{type(exc).__name__}: {exc}")
        took = round(time.monotonic() - began, 3)
        best = getattr(warming, phase).best_s
        stale = 0 if best is None or took < IMPROVEMENT * best else stale + 1
        warming = replace(warming, **{phase: getattr(warming, phase).after(took)})
        _write(state_dir, warming)
    return warming


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(0)  # unwinds: the temporary run directory is removed


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        keep_warming(Path(sys.argv[1]), sys.argv[2])
    except SystemExit:
        pass  # stopped: `spark stop` ends the server next
    # Either way, skip the Connect client's exit hook: with the server gone
    # (stopped, or the reason the warm-up ended) it retries for minutes.
    sys.stdout.flush()
    os._exit(0)
