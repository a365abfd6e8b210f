"""`testbed sim --pypy`: the simulation run on PyPy, in a container of
gossip-testbed/pypy (orchestrator/pypy/image.py), with the same result.

The host resolves the experiment (with its own pydantic pins) and hands the
resolved experiment to orchestrator/pypy/worker.py in the container, which
runs `run_simulation` there and writes the run directory as the host would:
the checkout is mounted read-only at its own path, the run directory
read-write at its own, so every path a run writes is the one the host sees,
and the worker runs as the host's user, so what it writes is the user's.
No network: the simulator needs none. PYPY_GC_* settings in the host's
environment reach PyPy's collector. The worker's progress lines are
replayed on the host's reporter; an interrupted run kills the container,
and one whose CLI was killed outright is `testbed gc`'s to remove (testbed
label "sim-pypy").

The traces are byte-identical with CPython's (tests/test_sim_pypy.py holds
that); the manifest's `interpreter` says which ran.
"""

from __future__ import annotations

import os
import pickle
import platform
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cache_dir, docker_client
from orchestrator.dockerapi.names import LABEL, LABEL_TESTBED
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.pypy.image import SITE, pypy_image_tag
from orchestrator.progress import Reporter
from orchestrator.sim.run import SimResult
from orchestrator.sim.trace_level import TraceLevel
from orchestrator.pypy.worker import Replay, Request

ROOT = Path(__file__).resolve().parents[2]
# The containers' testbed label: none is left behind by a finished or
# interrupted run, and `testbed gc` finds one whose CLI was killed.
SIM_TESTBED = "sim-pypy"


def run_simulation_on_pypy(
    resolved: ResolvedExperiment,
    resolved_yaml: str,
    run_dir: Path,
    reporter: Reporter | None = None,
    trace_level: TraceLevel = TraceLevel(),
) -> SimResult:
    """`run_simulation`, on PyPy; BackendUnavailable when there is no Docker
    daemon or the image is not built."""
    reporter = reporter or Reporter()
    client = docker_client()
    try:
        tag = pypy_image_tag(client)
        if tag is None:
            raise BackendUnavailable(
                "testbed sim --pypy needs the image gossip-testbed/pypy, which is not built (or is out of "
                "date): build it with `testbed image build --pypy` (needs the network once: Debian's pypy3 "
                "and the wheels in scripts/pypy/requirements.lock)")
        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="gtb-sim-pypy-", dir=cache_dir()) as tmp:
            request = Path(tmp) / "request.pickle"
            request.write_bytes(pickle.dumps(Request(resolved, resolved_yaml, str(run_dir), trace_level),
                                             protocol=pickle.HIGHEST_PROTOCOL))
            container = client.containers.run(
                tag, ["pypy3", "-m", "orchestrator.pypy.worker", "/request.pickle"], detach=True,
                network_mode="none", working_dir=str(ROOT), user=f"{os.getuid()}:{os.getgid()}",
                hostname=platform.node(), labels={LABEL: "1", LABEL_TESTBED: SIM_TESTBED},
                environment={"PYTHONPATH": f"{ROOT}:{SITE}", "HOME": "/tmp", **_gc_settings()},
                volumes={str(ROOT): {"bind": str(ROOT), "mode": "ro"},
                         str(run_dir): {"bind": str(run_dir), "mode": "rw"},
                         str(request): {"bind": "/request.pickle", "mode": "ro"}},
            )
            try:
                return _follow(container, run_dir, reporter)
            finally:
                _remove(container)
    finally:
        client.close()


def _gc_settings() -> dict[str, str]:
    """PyPy's collector settings from the host's environment: PYPY_GC_MAJOR_COLLECT=1.3
    (against 1.82) trades a sixth of the speed for a fifth of the peak memory
    at 100,000 nodes (docs/simulator.md, "PyPy")."""
    return {k: v for k, v in os.environ.items() if k.startswith("PYPY_GC_")}


def _follow(container: Any, run_dir: Path, reporter: Reporter) -> SimResult:
    replay = Replay(reporter)
    pending = b""
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=False):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    replay.line(line.decode(errors="replace"))
    finally:
        replay.close()
    status = container.wait()
    if status.get("StatusCode") != 0 or replay.result is None:
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace").strip()
        raise TestbedError(f"the simulation on PyPy failed (exit {status.get('StatusCode')}); what it wrote "
                           f"is in {run_dir}:\n{stderr[-3000:]}")
    return SimResult(run_dir, replay.result["summary"], replay.result["peak_rss_mb"])


def _remove(container: Any) -> None:
    """Stop (an interrupted run) and remove the container."""
    import docker.errors  # noqa: PLC0415

    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
