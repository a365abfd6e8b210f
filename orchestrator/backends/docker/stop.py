"""Stopping many containers: one grace period for all of them, and never two
of their network endpoints released at the same time.

Why one grace: `docker stop` waits for its container to exit before it
returns, so 250 of them, 16 at a time, queue behind each other's drain.
Here every router gets SIGTERM at once and all of them drain together.

Why endpoints one at a time: Docker 20.10's libnetwork keeps a per-network
endpoint count in its store, and concurrent endpoint deletions on one
network lose decrements (each deletion re-reads the network, and a retry
after a store conflict copies a count over another deletion's unsaved
one). A container that exits releases its endpoint, so 250 routers exiting
together can leave the count above zero: the network then refuses removal
("has active endpoints") with nothing attached, until a daemon restart
recounts. Reproduced here with a 250-container run that failed at
readiness. So, where the host lets us (root, the container's init is
docker-init):

1. SIGSTOP the container's init, then SIGTERM its router: the router
   drains and exits over an intact network, and stays a zombie the stopped
   init cannot reap, so the container keeps running with its endpoint;
2. as each router exits (or after the grace, SIGKILL), its container is
   disconnected from the testbed network, one disconnect at a time, while
   the other routers still drain;
3. right after its disconnect, SIGCONT that container's init: it reaps its
   router and exits with the router's exit status, and the container goes
   with no endpoint left on the testbed network to release, so its exit
   can overlap the next disconnect.

A router that exited early leaves the network while its peers still drain:
they already saw its connections close, so nothing they send was going to
reach it.

On a testbed's own bridge (orchestrator/backends/docker/own_bridge.py; `network` None) the
containers hold no Docker endpoint, so there is nothing to release one at a
time. With root, every container's init is found in its cgroup and sent
SIGTERM from the host (docker-init forwards it to the router), all in a
moment: through Docker, 250 kill calls took 6 s of a `down` on a loaded
host, and the grace ran out while the daemon was still noticing exits that
had happened. The grace is spent watching the inits in /proc; what is left
after it is sent SIGKILL, its whole cgroup; then Docker's own notice of each
exit is awaited as its `die` event, on one stream opened before the first
signal (a listing of 250 containers polled every 50 ms kept the daemon busy
serializing them while it still had exits to process).
Elsewhere (not root, a cgroup the host cannot see), the plain way: SIGTERM
through Docker to all at once, one grace, SIGKILL what is left.

A daemon that stops answering: Docker 20.10's libnetwork can deadlock when
many containers exit at once (moby/moby#46661, fixed in later releases): the
exits are never registered, so those containers stay "running" with no
process, and every call about one of them (inspect, kill, remove) waits
forever. Seen here once in a 250-container `down` on the own bridge. When
containers whose every process we saw exit are still listed as running a
grace after, one of them is inspected with a short timeout; no answer means
the daemon is stuck, and the stop ends there with TeardownIncomplete saying
so (restart the daemon, then `testbed down --all`) rather than queueing
calls that would never return.
"""

from __future__ import annotations

import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cgroup_procs
from orchestrator.errors import TeardownIncomplete
from orchestrator.fanout import fan_out
from orchestrator.host.procs import proc_alive, proc_parent, send_signal

POLL_S = 0.05  # between listings of the containers: one Docker call each
PROC_POLL_S = 0.02  # between looks at the routers in /proc: no Docker call
WORKERS = 16  # concurrent signal / inspect calls: each returns at once
PROBE_S = 10.0  # how long an inspect may take before the daemon counts as stuck


def _running(client: Any, flt: dict[str, str], ids: set[str]) -> set[str]:
    """Which of `ids` still run (paused counts: the freezer holds it): one
    listing of the testbed's containers (`flt`), not a call per container."""
    listed = client.api.containers(filters=flt) if ids else []
    return {c["Id"] for c in listed if c["Id"] in ids and c.get("State") in ("running", "paused", "restarting")}


def _signal(client: Any, cid: str, sig: str) -> str | None:
    import docker.errors  # noqa: PLC0415
    import requests.exceptions  # noqa: PLC0415

    try:
        client.api.kill(cid, signal=sig)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        return None if "is not running" in text else text
    except requests.exceptions.RequestException as exc:  # a daemon that does not answer: named, not a traceback
        return f"Docker did not answer the {sig}: {exc}"
    return None


def only_child(pid: int) -> int | None:
    """The one child of `pid` (a container init's router), else None."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if len(children) == 1 else None


def _hold(client: Any, cid: str) -> tuple[int, int] | None:
    """(init pid, router pid) with the init stopped and the router sent
    SIGTERM; None when this container cannot be held (then nothing was sent)."""
    import docker.errors  # noqa: PLC0415

    try:
        state = client.api.inspect_container(cid).get("State") or {}
    except docker.errors.NotFound:
        return None
    init = int(state.get("Pid") or 0)
    if not init or state.get("Paused"):
        return None
    router = only_child(init)
    if router is None:
        return None
    try:
        os.kill(init, signal.SIGSTOP)
        os.kill(router, signal.SIGTERM)
    except ProcessLookupError:  # it went meanwhile: let its init go too
        send_signal(init, signal.SIGCONT)
        return None
    return init, router


def stop_all(client: Any, flt: dict[str, str], containers: dict[str, str], grace_s: float, network: str | None,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
             ) -> dict[str, str]:
    """Stop `containers` (node -> container id, all listed by the label
    filter `flt`); `network` is the Docker network their endpoints are on
    (None: they have none).
    Returns node -> why for each container that could not be stopped."""
    by_id = {cid: node for node, cid in containers.items()}
    paused = [c["Id"] for c in client.api.containers(filters={**flt, "status": "paused"}) if c["Id"] in by_id]
    for cid in paused:  # a frozen process cannot take its SIGTERM
        client.api.unpause(cid)
    ids = sorted(by_id)
    can_hold = network is not None and os.geteuid() == 0
    held = dict(zip(ids, fan_out(lambda cid: _hold(client, cid), ids, WORKERS) if can_hold else [None] * len(ids),
                    strict=True))
    held = {cid: pids for cid, pids in held.items() if pids is not None}
    from_host = network is None and os.geteuid() == 0
    with _Deaths(client, flt, from_host) as deaths:
        direct = _inits(ids) if from_host else {}
        for init in direct.values():
            send_signal(init, signal.SIGTERM)
        through_docker = [c for c in ids if c not in held and c not in direct]
        errors = {cid: why for cid, why in zip(through_docker, fan_out(
            lambda cid: _signal(client, cid, "SIGTERM"), through_docker, WORKERS)) if why}
        deadline = clock() + grace_s
        errors.update(_release(client, held, network, grace_s, clock, sleep))
        _reap(direct, grace_s, clock, sleep)
        deaths.wait(set(direct), clock() + grace_s, clock)
    left = _running(client, flt, set(ids))
    deadline = max(deadline, clock() + grace_s) if held or direct else deadline
    while left and clock() < deadline:
        sleep(POLL_S)
        left = _running(client, flt, left)
    exited = sorted(cid for cid in left if cid in direct and not proc_alive(direct[cid]))
    if exited and not _answers(client, exited[0], PROBE_S):
        names = ", ".join(by_id[cid] for cid in exited[:10]) + (", ..." if len(exited) > 10 else "")
        raise TeardownIncomplete([
            f"{len(exited)} container(s) ({names}): every process of theirs exited, but Docker still lists them as "
            f"running and did not answer an inspect of one in {PROBE_S:g} s: its daemon is stuck (Docker 20.10's "
            "libnetwork deadlocks when many containers exit at once, moby/moby#46661; docs/docker.md). "
            "Restart the Docker daemon (systemctl restart docker), then `testbed down --all`"], [])
    if left:
        errors.update({cid: why for cid, why in zip(sorted(left), fan_out(
            lambda cid: _signal(client, cid, "SIGKILL"), sorted(left), WORKERS), strict=True) if why})
        deadline = clock() + grace_s
        while left and clock() < deadline:
            sleep(POLL_S)
            left = _running(client, flt, left)
    out = {by_id[cid]: why for cid, why in errors.items()}
    out.update({by_id[cid]: f"still running {2 * grace_s:g} s after SIGTERM and SIGKILL" for cid in left})
    return out


def _answers(client: Any, cid: str, timeout_s: float) -> bool:
    """Whether Docker answers an inspect of `cid` (any answer, an error
    included) within `timeout_s`. The call runs in a daemon thread, so one
    that never returns is left behind without holding up the CLI's exit."""
    done = threading.Event()

    def ask() -> None:
        try:
            client.api.inspect_container(cid)
        except Exception:  # noqa: BLE001 - an error is an answer
            pass
        done.set()

    threading.Thread(target=ask, name="docker-probe", daemon=True).start()
    return done.wait(timeout_s)


def _release(client: Any, held: dict[str, tuple[int, int]], network: str | None, grace_s: float,
             clock: Callable[[], float], sleep: Callable[[float], None]) -> dict[str, str]:
    """Steps 2 and 3 of the module docstring for the held containers (id ->
    (init, router)): as each router exits, disconnect its container, then let
    its init go. Routers still running after `grace_s` get SIGKILL; after a
    second grace the rest are released as they are. Returns id -> why for
    each failed disconnect."""
    errors: dict[str, str] = {}
    waiting = dict(held)
    deadline, killed = clock() + grace_s, False
    while waiting:
        done = sorted(cid for cid, (_, router) in waiting.items() if not proc_alive(router))
        if not done and clock() >= deadline:
            if killed:
                done = sorted(waiting)
            else:
                for _, router in waiting.values():
                    send_signal(router, signal.SIGKILL)
                deadline, killed = clock() + grace_s, True
                continue
        for cid in done:  # one endpoint at a time
            init, _ = waiting.pop(cid)
            errors.update(_disconnect(client, cid, network))
            send_signal(init, signal.SIGCONT)
        if waiting and not done:
            sleep(PROC_POLL_S)
    return errors


def _inits(ids: Sequence[str]) -> dict[str, int]:
    """Container id -> its init's pid, for the running containers whose
    cgroup the host sees: the process of the cgroup whose parent is not in it."""
    inits = {}
    for cid in ids:
        procs = set(cgroup_procs(cid) or ())
        roots = [pid for pid in procs if proc_parent(pid) not in procs]
        if len(roots) == 1:
            inits[cid] = roots[0]
    return inits


def _reap(inits: dict[str, int], grace_s: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    """Wait until the inits (sent SIGTERM) are gone; after `grace_s`, SIGKILL
    every process of the containers still running, and wait one more grace."""
    with _ExitWatch(inits) as watch:
        if watch.wait(clock() + grace_s, clock, sleep):
            return
        for cid in watch.waiting:
            for pid in cgroup_procs(cid) or ():
                send_signal(pid, signal.SIGKILL)
        watch.wait(clock() + grace_s, clock, sleep)


class _ExitWatch:
    """Which of some processes (key -> pid) still run, told by the kernel
    (a pidfd per process, polled together: one wake-up per batch of exits)
    where it can, else by looking at /proc every PROC_POLL_S (at 250
    processes that look cost the CLI 3 s of CPU on a loaded host)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.waiting = dict(pids)
        self._fds: dict[int, str] = {}
        self._poll: select.poll | None = select.poll()

    def __enter__(self) -> _ExitWatch:
        for key, pid in list(self.waiting.items()):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                del self.waiting[key]
                continue
            except (OSError, AttributeError):  # no pidfd here: /proc it is
                self._poll = None
                break
            self._fds[fd] = key
            self._poll.register(fd, select.POLLIN)  # type: ignore[union-attr]
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)

    def wait(self, deadline: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> bool:
        """Until none is left (True) or the deadline (False)."""
        while self.waiting:
            left = deadline - clock()
            if left <= 0:
                return False
            if self._poll is not None:
                for fd, _ in self._poll.poll(left * 1000):
                    self._poll.unregister(fd)  # readable from now on: asked once
                    self.waiting.pop(self._fds[fd], None)
            else:
                self.waiting = {k: pid for k, pid in self.waiting.items() if proc_alive(pid)}
                if self.waiting:
                    sleep(PROC_POLL_S)
        return True


class _Deaths:
    """Docker's `die` events for the testbed's containers (label filter),
    read by a thread from one stream that is open before the inits are even
    looked up, and replayed from a second before it (the daemon answers an
    events request before it subscribes it), so no exit is missed and
    nothing is polled. Not `wanted`, or no stream: `wait` returns at once."""

    def __init__(self, client: Any, flt: dict[str, str], wanted: bool) -> None:
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._stream = None
        try:
            if wanted:
                self._stream = client.api.events(since=int(time.time()) - 1, decode=True,
                                                 filters={**flt, "type": "container", "event": "die"})
        except Exception:  # noqa: BLE001 - no stream: the caller's listing decides
            pass
        if self._stream is None:
            self._queue.put(None)
            return
        threading.Thread(target=self._read, name="die-events", daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self._queue.put(event.get("id"))
        except Exception:  # noqa: BLE001 - the stream closed or broke: the caller's listing decides
            pass
        self._queue.put(None)

    def __enter__(self) -> _Deaths:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()

    def wait(self, ids: set[str], deadline: float, clock: Callable[[], float]) -> None:
        """Until Docker said every one of `ids` died, the stream ended, or the deadline."""
        left = set(ids)
        while left and (timeout := deadline - clock()) > 0:
            try:
                cid = self._queue.get(timeout=timeout)
            except queue.Empty:
                return
            if cid is None:
                return
            left.discard(cid)


def _disconnect(client: Any, cid: str, network: str | None) -> dict[str, str]:
    import docker.errors  # noqa: PLC0415

    try:
        client.api.disconnect_container_from_network(cid, network)
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        if "is not connected" not in text and "No such container" not in text:
            return {cid: f"disconnect from {network}: {text}"}
    return {}
