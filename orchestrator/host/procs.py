"""Processes by pid, from /proc: alive (not a zombie), their command line and
start time, parent, and ending them with a grace period. A process is identified by
pid and kernel start time where the caller has both, never by pid alone (a
pid is recycled). Shared by the process backend (its routers), the delay
line (orchestrator/shaping/delayline.py) and the docker backend's stop."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (stat field 22)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def proc_parent(pid: int) -> int | None:
    """The parent's pid (stat field 4); None when the process is gone."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def proc_alive(pid: int, start_time: int | None = None) -> bool:
    """Alive (running, sleeping or stopped; not a zombie) and, when given,
    still the process that started at `start_time`."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def send_signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def reap(pid: int) -> None:
    """Collect the exit status if the process is our child (no zombie left)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def terminate(procs: Sequence[tuple[int, int | None]], grace_s: float) -> list[int]:
    """SIGCONT + SIGTERM every (pid, start_time) still alive, wait up to
    grace_s for them to exit, then SIGKILL the rest; returns the pids signalled."""
    alive = [(pid, st) for pid, st in procs if proc_alive(pid, st)]
    for pid, _ in alive:
        send_signal(pid, signal.SIGCONT)
        send_signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    pending = list(alive)
    while pending and time.monotonic() < deadline:
        for pid, _ in pending:
            reap(pid)
        pending = [(pid, st) for pid, st in pending if proc_alive(pid, st)]
        if pending:
            time.sleep(0.05)
    for pid, st in pending:
        if proc_alive(pid, st):
            send_signal(pid, signal.SIGKILL)
    for pid, st in pending:
        wait_gone(pid, st, 5.0)
    return [pid for pid, _ in alive]


def wait_gone(pid: int, start_time: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if not proc_alive(pid, start_time):
            return True
        time.sleep(0.02)
    return False
