"""Ending a Docker testbed: stopping its containers, then removing everything
it made, so that both converge at any scale.

Stopping many containers (`stop_all`): one grace period for all of them,
and never two of their network endpoints released at the same time.

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

Removing (`teardown`, `cleanup`), so that the removal converges at any scale.

Why the care: removing 250 containers from one bridge network at
once is a known way to make Docker's network layer keep endpoints for
containers that no longer exist; the network then refuses removal with "has
active endpoints" and its subnet leaks. The cure is to avoid the race:

1. every container that may hold an endpoint (one not listed as exited,
   dead or created) is first disconnected from the testbed's networks, one
   at a time: Docker 20.10 loses endpoint-count decrements when deletions on
   one network run concurrently (the stop above says how), which is what
   leaves a network with "active endpoints" and nothing
   attached. Then all are removed, a few at a time (PARALLEL); the ones
   listed without an endpoint are removed without force, so one started
   since the listing (a killed CLI's last call) is refused, and is then
   disconnected and removed on its own;
2. a network is removed only after every endpoint the testbed's labels and
   container names account for has been force-disconnected, and removal is
   retried with exponential backoff while Docker still reports endpoints;
3. the host's side, after the containers, whose drain crossed it: the
   iptables rules of the testbed's delay line (orchestrator/shaping/delayline.py) and
   of its own bridge (orchestrator/backends/docker/own_bridge.py), the delay line's process,
   then the bridge, found by the rules' comments, the process's command line
   and the bridge's ifalias, not by labels. Containers on an own bridge hold
   no Docker endpoint, so they go PARALLEL_NO_ENDPOINT at a time;
4. what is left after that is reported as a Leftover naming the resource and
   the exact command that removes it (for a network whose endpoints only a
   daemon restart clears, that restart), never silently dropped; the caller
   keeps its state record so that a later `testbed down` retries;
5. a daemon that cannot be asked (stuck, or gone while a record says the
   testbed was made on Docker) removes nothing of Docker's and is one such
   Leftover: what Docker holds could not be listed (`cleanup`); the host's
   side goes all the same.

A Scope (orchestrator/dockerapi/teardown.py) says which labelled objects
one teardown may touch: one testbed or all, made under one state directory
or under any (`testbed gc`). Nothing without our labels is ever removed.
"""

from __future__ import annotations

import os
import queue
import select
import shlex
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.shaping import delayline

from orchestrator.host import iptables

from orchestrator.backends.docker import own_bridge
from orchestrator.dockerapi.client import DaemonNotAnswering, cgroup_procs, docker_client, stuck
from orchestrator.dockerapi.names import LABEL_STATE, LABEL_TESTBED, PARALLEL, node_prefix
from orchestrator.dockerapi.teardown import (
    DAEMON_RESTART,
    Leftover,
    Resource,
    Scope,
    TeardownReport,
    labels_of,
    unchecked,
)
from orchestrator.errors import BackendUnavailable, TeardownIncomplete
from orchestrator.fanout import fan_out
from orchestrator.host.procs import proc_alive, proc_parent, send_signal
from orchestrator.progress import Reporter

POLL_S = 0.05  # between listings of the containers: one Docker call each
PROC_POLL_S = 0.02  # between looks at the routers in /proc: no Docker call
WORKERS = 16  # concurrent signal / inspect calls: each returns at once
PROBE_S = 10.0  # how long an inspect may take before the daemon counts as stuck
PARALLEL_NO_ENDPOINT = 16  # concurrent removals when no Docker network of ours is left to race (else PARALLEL)
NETWORK_BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # waits between network removal attempts (~16 s)
SETTLE_S = 0.5  # wait before the re-listing that catches objects a killed CLI's last calls created
NO_ENDPOINT = ("exited", "dead", "created")  # container states that hold no network endpoint
MAX_ROUNDS = 3


@dataclass
class Found:
    containers: list[Any] = field(default_factory=list)
    networks: list[Any] = field(default_factory=list)
    volumes: list[Any] = field(default_factory=list)
    rules: list[iptables.IptablesRule] = field(default_factory=list)  # the delay line's and the bridge's
    delay_lines: list[delayline.Running] = field(default_factory=list)
    bridges: list[tuple[str, str]] = field(default_factory=list)  # own bridges: (name, tag)

    def __bool__(self) -> bool:
        return bool(self.containers or self.networks or self.volumes or self.rules or self.delay_lines
                    or self.bridges)

    def resources(self) -> list[Resource]:
        return ([_resource("container", c) for c in self.containers]
                + [_resource("network", n) for n in self.networks]
                + [_resource("volume", v) for v in self.volumes]
                + [_rule_resource(r) for r in self.rules]
                + [_line_resource(r) for r in self.delay_lines]
                + [_bridge_resource(*b) for b in self.bridges])


def _rule_resource(rule: iptables.IptablesRule) -> Resource:
    return Resource("iptables rule", f"{rule.table} {rule.spec[0]} ({rule.owner} {rule.tag})",
                    f"{rule.table}:{shlex.join(rule.spec)}", rule.testbed, "")


def _bridge_resource(name: str, tag: str) -> Resource:
    return Resource("bridge", name, f"bridge-{name}", tag.rpartition(":")[0], "")


def _line_resource(running: delayline.Running) -> Resource:
    return Resource("delay line", f"pid {running.pid} (NFQUEUE {running.queue})", f"pid-{running.pid}",
                    running.testbed, running.state)


def _resource(kind: str, obj: Any) -> Resource:
    labels = labels_of(obj)
    attrs = getattr(obj, "attrs", {}) or {}
    names = attrs.get("Names") or []  # a sparse container listing has Names, not Name
    name = getattr(obj, "name", None) or (names[0] if names else "") or getattr(obj, "id", "")
    return Resource(kind, name.lstrip("/"), getattr(obj, "id", ""), labels.get(LABEL_TESTBED, ""),
                    labels.get(LABEL_STATE, ""))


def find(client: Any | None, scope: Scope) -> Found:
    """Every container, network and volume the scope admits, and the delay
    lines (process and iptables rules) and own bridges (bridge and iptables
    rules) of the testbeds it admits; client None: the host's side only."""
    found = Found(rules=iptables.admitted(None, scope.testbed, scope.state),
                  delay_lines=delayline.admitted(scope.testbed, scope.state),
                  bridges=own_bridge.admitted(scope.testbed, scope.state))
    if client is not None:
        flt = scope.label_filter()
        # sparse: one listing call, not an inspect per container (seconds at 250)
        found.containers = [c for c in client.containers.list(all=True, filters=flt, sparse=True)
                            if scope.admits(labels_of(c))]
        found.networks = [n for n in client.networks.list(filters=flt) if scope.admits(labels_of(n))]
        found.volumes = [v for v in client.volumes.list(filters=flt) if scope.admits(labels_of(v))]
    return found


def cleanup(scope: Scope, recorded: bool) -> list[str]:
    """The docker backend's cleanup: `teardown` of the scope; `recorded`:
    a state record says the scope's testbed was made on Docker. Without an
    answering daemon the host's side goes all the same (a delay line's
    process, the rules, the bridge), and Docker's objects are a Leftover when
    something may hold them: a recorded testbed, or a daemon that is there
    but stuck. No daemon and no record: nothing Docker could hold. A daemon
    that answers, then leaves a call of the teardown unanswered, is stuck too."""
    try:
        client = docker_client()
    except BackendUnavailable as exc:
        removed: list[str] = []
        left: dict[str, Leftover] = {}
        _remove_host_side(find(None, scope), removed, left)
        if recorded or isinstance(exc, DaemonNotAnswering):
            _note(None, unchecked(scope, exc), removed, left)
        return TeardownReport(tuple(removed), tuple(left.values())).raise_if_incomplete()
    try:
        return teardown(client, scope).raise_if_incomplete()
    except Exception as exc:  # noqa: BLE001 - a call that never came back is the daemon's state, not a bug
        if (gone := stuck(exc)) is None:
            raise
        raise TeardownIncomplete([unchecked(scope, gone).line()], []) from exc
    finally:
        client.close()


def teardown(client: Any, scope: Scope, reporter: Reporter | None = None,
             sleep: Callable[[float], None] = time.sleep) -> TeardownReport:
    """Remove everything the scope admits; see the module docstring for the
    order. Repeats while a re-listing finds objects (created by calls still in
    flight when a CLI was killed), at most MAX_ROUNDS times."""
    removed: list[str] = []
    left: dict[str, Leftover] = {}
    for round_no in range(MAX_ROUNDS):
        found = find(client, scope)
        pending = [r for r in found.resources() if r.id not in left]
        if not pending:
            break
        if round_no:
            (reporter or Reporter()).note(f"found {len(pending)} more object(s); removing them too")
        ours = {c.id for c in found.containers}
        our_networks = {n.name for n in found.networks}
        live = {c.id for c in found.containers if _state(c) not in NO_ENDPOINT}
        for container in found.containers:  # one endpoint at a time (step 1 of the module docstring)
            if container.id in live:
                _disconnect(container, our_networks)
        late = []
        for container, outcome in zip(found.containers, fan_out(
                lambda c: _remove_container(c, force=c.id in live), found.containers,
                PARALLEL if found.networks else PARALLEL_NO_ENDPOINT), strict=True):
            if outcome is None:
                late.append(container)
            else:
                _note(*outcome, removed, left)
        for container in late:  # started since the listing: it holds an endpoint now
            _disconnect(container, our_networks)
            _note(*(_remove_container(container, force=True) or (None, None)), removed, left)
        for network in found.networks:
            _note(*_remove_network(client, network, ours, sleep), removed, left)
        for volume in found.volumes:
            _note(*_remove_volume(volume), removed, left)
        _remove_host_side(found, removed, left)  # after the containers: their drain crossed it
        if not found.containers or live or late or any(_state(c) == "created" for c in found.containers):
            sleep(SETTLE_S)  # a CLI may have been killed half-way through `up`: its last calls may still land
    return TeardownReport(tuple(removed), tuple(left.values()))


def _state(container: Any) -> str:
    """The state a container was listed in ("" when the listing had none)."""
    return container.attrs.get("State") or ""


def _note(line: str | None, leftover: Leftover | None, removed: list[str], left: dict[str, Leftover]) -> None:
    if line:
        removed.append(line)
    if leftover is not None:
        left[leftover.resource.id] = leftover


def _api_error() -> type[Exception]:
    import docker.errors  # noqa: PLC0415

    return docker.errors.APIError


def _not_found() -> type[Exception]:
    import docker.errors  # noqa: PLC0415

    return docker.errors.NotFound


def _explain(exc: Exception) -> str:
    return str(getattr(exc, "explanation", None) or exc).strip()


def _remove_container(container: Any, force: bool) -> tuple[str | None, Leftover | None] | None:
    """Remove one container (with its anonymous volumes). Without `force`,
    None when Docker refuses because it runs now (the caller disconnects it
    first, then forces)."""
    res = _resource("container", container)
    if LABEL_TESTBED not in labels_of(container):  # belt and braces: never unlabelled
        return None, None
    try:
        container.remove(force=force, v=True)
    except _not_found():
        return None, None
    except _api_error() as exc:
        text = _explain(exc)
        if "already in progress" in text:
            return None, None
        if not force and "cannot remove a" in text.lower():
            return None
        return None, Leftover(res, text, f"docker rm -f {shlex.quote(res.name)}")
    return f"removed container {res.name} ({res.testbed})", None


def _disconnect(container: Any, our_networks: set[str]) -> None:
    attached = (container.attrs.get("NetworkSettings") or {}).get("Networks") or {}
    for net in sorted(set(attached) & our_networks):
        try:
            container.client.api.disconnect_container_from_network(container.id, net, force=True)
        except _api_error():
            pass  # not connected any more, or the container is going: removal below decides


def _accounted_for(endpoint_id: str, endpoint: dict[str, Any], ours: set[str], prefix: str) -> bool:
    """An endpoint is the testbed's when its container was one of ours (by id)
    or carries the testbed's container-name prefix (a stale endpoint of a
    container that is gone has nothing else)."""
    name = (endpoint.get("Name") or "").lstrip("/")
    return endpoint_id in ours or name.startswith(prefix)


def _remove_network(client: Any, network: Any, ours: set[str], sleep: Callable[[float], None]
                    ) -> tuple[str | None, Leftover | None]:
    res = _resource("network", network)
    prefix = node_prefix(res.testbed)
    last = ""
    for attempt, wait in enumerate((0.0, *NETWORK_BACKOFF_S)):
        if wait:
            sleep(wait)
        try:
            network.reload()
        except _not_found():
            return None, None
        endpoints = network.attrs.get("Containers") or {}
        foreign = sorted((e.get("Name") or i) for i, e in endpoints.items()
                         if not _accounted_for(i, e, ours, prefix))
        if foreign:
            shown = " ".join(shlex.quote(f) for f in foreign[:3])
            return None, Leftover(
                res, f"still used by container(s) without the testbed's labels: {', '.join(foreign[:10])}",
                f"docker network disconnect -f {shlex.quote(res.name)} {shown} && docker network rm {shlex.quote(res.name)}",
            )
        for endpoint_id, endpoint in list(endpoints.items()):
            target = endpoint_id if endpoint_id in ours else (endpoint.get("Name") or endpoint_id)
            try:
                client.api.disconnect_container_from_network(target, network.id, force=True)
            except _api_error():
                pass  # the retry below says whether it mattered
        try:
            network.remove()
        except _not_found():
            return None, None
        except _api_error() as exc:
            last = _explain(exc)
            continue
        extra = f" after {attempt + 1} attempts" if attempt else ""
        return f"removed network {res.name} ({res.testbed}){extra}", None
    name = shlex.quote(res.name)
    if "active endpoints" in last:
        return None, Leftover(
            res, f"Docker still reports active endpoints after {len(NETWORK_BACKOFF_S) + 1} attempts "
                 f"with every endpoint force-disconnected ({last}); only a daemon restart clears them",
            f"docker network rm {name} || ({DAEMON_RESTART} && docker network rm {name})",
        )
    return None, Leftover(res, last or "unknown error", f"docker network rm {name}")


def _remove_volume(volume: Any) -> tuple[str | None, Leftover | None]:
    res = _resource("volume", volume)
    try:
        volume.remove(force=True)
    except _not_found():
        return None, None
    except _api_error() as exc:
        return None, Leftover(res, _explain(exc), f"docker volume rm -f {shlex.quote(res.name)}")
    return f"removed volume {res.name} ({res.testbed})", None


def _remove_host_side(found: Found, removed: list[str], left: dict[str, Leftover]) -> None:
    """Rules first, so a delay line releases what it holds and nothing new reaches it; bridges last."""
    for rule in found.rules:
        why = iptables.remove(rule)
        _note(None if why else f"removed {rule.describe()}",
              Leftover(_rule_resource(rule), why, rule.command()) if why else None, removed, left)
    for running in found.delay_lines:
        res = _line_resource(running)
        ended = delayline.end_process(running.pid)
        if ended:
            delayline.forget(running.table.parent)
        _note(f"ended {running.describe()}" if ended else None,
              None if ended else Leftover(res, "it did not exit on SIGTERM nor SIGKILL", f"kill -9 {running.pid}"),
              removed, left)
    for name, tag in found.bridges:  # its rules went with found.rules above
        why = own_bridge.delete_link(name)
        _note(None if why else f"removed bridge {name} ({tag})",
              Leftover(_bridge_resource(name, tag), why, f"ip link del {name}") if why else None, removed, left)


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
            errors.update(_disconnect_held(client, cid, network))
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


def _disconnect_held(client: Any, cid: str, network: str | None) -> dict[str, str]:
    import docker.errors  # noqa: PLC0415

    try:
        client.api.disconnect_container_from_network(cid, network)
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        if "is not connected" not in text and "No such container" not in text:
            return {cid: f"disconnect from {network}: {text}"}
    return {}
