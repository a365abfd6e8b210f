"""Removing a swarm testbed from its labels alone, so `testbed down`, `down
--all` and `testbed gc` finish the job after a CLI was killed.

Order matters: services first (the swarm then removes their task
containers), then the overlay network (refused while a task is attached),
the secrets (refused while a service uses them), and last the volumes with
the traces, on every engine that can be reached (a volume lives on the node
that ran the task; one that cannot be reached is reported with the command
that removes it there). Removal is retried with backoff while the swarm is
still taking tasks down. Scope, Resource and Leftover are shared with the
docker backend (orchestrator/dockerapi/teardown.py), so one scope rule decides
what either backend may touch.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any

from orchestrator.dockerapi.client import DaemonNotAnswering
from orchestrator.dockerapi.names import LABEL_STATE, LABEL_TESTBED
from orchestrator.dockerapi.teardown import Leftover, Resource, Scope, TeardownReport, labels_of, unchecked
from orchestrator.errors import BackendUnavailable
from orchestrator.backends.swarm.engines import Swarm

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 8.0)  # ~24 s for the swarm to take tasks down


def _resource(kind: str, obj: Any) -> Resource:
    attrs = getattr(obj, "attrs", {}) or {}
    labels = labels_of(obj) or (attrs.get("Spec") or {}).get("Labels") or {}
    name = getattr(obj, "name", None) or (attrs.get("Spec") or {}).get("Name") or obj.id
    return Resource(kind, name, obj.id, labels.get(LABEL_TESTBED, ""), labels.get(LABEL_STATE, ""))


def _admitted(scope: Scope, kind: str, objs: list[Any]) -> list[tuple[Resource, Any]]:
    out = []
    for obj in objs:
        res = _resource(kind, obj)
        labels = {LABEL_TESTBED: res.testbed, LABEL_STATE: res.state} if res.testbed else {}
        if scope.admits(labels):
            out.append((res, obj))
    return out


def find(swarm_client: Any, engines: list[Any], scope: Scope) -> list[tuple[Resource, Any]]:
    """Every service, swarm network, secret (from the manager) and volume
    (from each engine) the scope admits, in removal order."""
    flt = scope.label_filter()
    found = _admitted(scope, "service", swarm_client.services.list(filters=flt))
    found += _admitted(scope, "network", [n for n in swarm_client.networks.list(filters=flt)
                                          if (n.attrs.get("Scope") == "swarm")])
    found += _admitted(scope, "secret", swarm_client.secrets.list(filters=flt))
    for engine in engines:
        found += _admitted(scope, "volume", engine.volumes.list(filters=flt))
    return found


def teardown(swarm_client: Any, engines: list[Any], scope: Scope, unreachable: list[str],
             sleep: Callable[[float], None] = time.sleep) -> TeardownReport:
    """Remove what `find` lists, retrying what the swarm still holds;
    `unreachable` names swarm nodes whose volumes could not be looked at."""
    import docker.errors  # noqa: PLC0415

    removed: list[str] = []
    pending = find(swarm_client, engines, scope)
    errors: dict[str, str] = {}
    for wait in (0.0, *BACKOFF_S):
        if not pending:
            break
        if wait:
            sleep(wait)
        still = []
        for res, obj in pending:
            try:
                obj.remove(**({"force": True} if res.kind == "volume" else {}))
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                errors[res.id] = str(exc.explanation or exc)
                still.append((res, obj))
                continue
            removed.append(f"removed {res.kind} {res.name} ({res.testbed})")
        pending = still
    left = [Leftover(res, errors.get(res.id, "unknown error"), _command(res)) for res, _ in pending]
    removed += [f"volumes on swarm node {host} not checked: its Docker engine is not reachable "
                f"(docker volume ls --filter label={LABEL_TESTBED} there)" for host in unreachable]
    return TeardownReport(tuple(removed), tuple(left))


def _command(res: Resource) -> str:
    verb = {"service": "docker service rm", "network": "docker network rm", "secret": "docker secret rm",
            "volume": "docker volume rm -f"}[res.kind]
    return f"{verb} {shlex.quote(res.name)}"


def _reach(swarm: Swarm) -> tuple[list[Any], list[str]]:
    """The engines of the swarm's nodes that can be reached, and the
    hostnames of those that cannot."""
    engines, unreachable = [], []
    for node_id in swarm.node_ids():
        try:
            engines.append(swarm.engine(node_id, "cleanup"))
        except BackendUnavailable:
            unreachable.append(swarm.hostname(node_id))
    return engines, unreachable


def listed(scope: Scope) -> list[Resource]:
    """What `remove` would remove (`testbed gc`'s listing); nothing when the
    engine is no swarm manager."""
    try:
        swarm = Swarm()
    except BackendUnavailable:
        return []
    try:
        return [res for res, _ in find(swarm.client, _reach(swarm)[0], scope)]
    finally:
        swarm.close()


def remove(scope: Scope) -> TeardownReport:
    """Remove everything the scope admits in the swarm the engine in use
    manages; an empty report when it is no swarm manager."""
    try:
        swarm = Swarm()
    except DaemonNotAnswering as exc:  # there, but stuck: what it holds cannot be listed
        return TeardownReport((), (unchecked(scope, exc),))
    except BackendUnavailable:
        return TeardownReport((), ())
    try:
        engines, unreachable = _reach(swarm)
        return teardown(swarm.client, engines, scope, unreachable)
    finally:
        swarm.close()
