"""The whole-testbed verbs the CLI calls: run an experiment end to end
(`testbed run`), take one testbed down (`testbed down NAME`) and take
everything down (`testbed down --all`). Teardown always ends in the
backends' `cleanup`, which works from labels and the state store alone, so it
cleans up after a CLI that was killed half-way."""

from __future__ import annotations

import secrets
from pathlib import Path

from orchestrator.backends.registry import BACKENDS, backend_class, backend_exists
from orchestrator.run.controller import Controller
from orchestrator.errors import BackendUnavailable, TeardownIncomplete, TestbedError
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.progress import Reporter
from orchestrator.records.state import StateStore


def _cleanup_with(name: str, testbed: str | None, store: StateStore) -> list[str]:
    if not backend_exists(name):
        return []
    try:
        return backend_class(name).cleanup(testbed, store)
    except BackendUnavailable:
        return []


def down_testbed(testbed: str, store: StateStore | None = None, reporter: Reporter | None = None) -> list[str]:
    """`testbed down NAME`: graceful when the record is sound, cleanup
    whatever happened; idempotent. A testbed whose graceful `down` finished
    its run directory but left objects behind (status "finished") is only
    cleaned up: a second drain of routers that are gone would rewrite its
    manifest with their silence."""
    store = store or StateStore()
    record = store.load(testbed)
    lines: list[str] = []
    if record is not None and record.get("status") == "finished":
        lines.append(f"{testbed}: its run directory was finished by an earlier `down`; removing what is left")
    elif record is not None and not record.get("corrupt"):
        try:
            ctl = Controller.attach(testbed, store, reporter)
            return ctl.down()  # it ran the one cleanup: all is gone, or TeardownIncomplete named what is not
        except TeardownIncomplete:
            raise  # already tried everything; the record stays
        except TestbedError as exc:
            lines.append(f"{testbed}: graceful stop failed ({exc}); cleaning up")
    backend_names = [record.get("backend")] if record and record.get("backend") in BACKENDS else list(BACKENDS)
    for name in backend_names:
        lines += _cleanup_with(name, testbed, store)
    store.remove(testbed)
    return lines


def down_all(store: StateStore | None = None, reporter: Reporter | None = None) -> list[str]:
    """Every testbed of this state directory, then whatever its labels say
    a killed CLI left; one testbed that cannot be removed does not stop the
    others, and all that is left is reported together at the end."""
    store = store or StateStore()
    lines: list[str] = []
    left: list[str] = []
    for name in store.names():
        try:
            lines += down_testbed(name, store, reporter)
        except TeardownIncomplete as exc:
            lines += exc.removed
            left += exc.left
    for name in list(BACKENDS):
        try:
            lines += _cleanup_with(name, None, store)
        except TeardownIncomplete as exc:
            lines += exc.removed
            left += [line for line in exc.left if line not in left]
    if left:
        raise TeardownIncomplete(left, lines)
    return lines


def run_name(experiment: str) -> str:
    """A testbed name for one `testbed run`: the experiment's, made safe, plus
    a random suffix so a run never collides with a testbed that is up."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in experiment).strip("-._") or "run"
    return f"{safe[:50]}-{secrets.token_hex(3)}"


def run_experiment(
    resolved: ResolvedExperiment, resolved_yaml: str | None, backend_name: str, run_dir: Path | None = None,
    store: StateStore | None = None, reporter: Reporter | None = None, ready_timeout: float | None = None,
) -> Controller:
    """`testbed run`: up, workload and churn, linger, collection and down.
    Whatever fails or is interrupted, the testbed is torn down."""
    ctl = Controller.create(resolved, resolved_yaml, backend_name, run_name(resolved.name), run_dir, store, reporter)
    try:
        ctl.up(ready_timeout, with_workload=True)
        ctl.run_workload(resolved)
    except BaseException:
        try:
            ctl.down()
        except TeardownIncomplete:
            raise  # everything was tried; the record stays for a later `down`
        except Exception:  # noqa: BLE001 - the first error is the one to report
            down_testbed(ctl.testbed, ctl.store)
        raise
    ctl.down()
    return ctl
