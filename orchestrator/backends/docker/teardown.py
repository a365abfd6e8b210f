"""Removing a Docker testbed so that the removal converges at any scale.

Why a module of its own: removing 250 containers from one bridge network at
once is a known way to make Docker's network layer keep endpoints for
containers that no longer exist; the network then refuses removal with "has
active endpoints" and its subnet leaks. The cure is to avoid the race:

1. every container that may hold an endpoint (one not listed as exited,
   dead or created) is first disconnected from the testbed's networks, one
   at a time: Docker 20.10 loses endpoint-count decrements when deletions on
   one network run concurrently (orchestrator/backends/docker/stop.py says how),
   which is what leaves a network with "active endpoints" and nothing
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

A Scope (orchestrator/dockerapi/teardown.py) says which labelled objects one teardown may touch: one testbed or
all, made under one state directory or under any (`testbed gc`). Nothing
without our labels is ever removed.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.shaping import delayline

from orchestrator.host import iptables

from orchestrator.backends.docker import own_bridge
from orchestrator.dockerapi.client import DaemonNotAnswering, docker_client, stuck
from orchestrator.dockerapi.names import LABEL_STATE, LABEL_TESTBED, PARALLEL, node_prefix
from orchestrator.dockerapi.teardown import DAEMON_RESTART, Leftover, Resource, Scope, TeardownReport, labels_of, unchecked
from orchestrator.errors import BackendUnavailable, TeardownIncomplete
from orchestrator.fanout import fan_out
from orchestrator.progress import Reporter

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

