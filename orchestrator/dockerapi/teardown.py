"""The vocabulary of removing a testbed from Docker, shared by the docker and
swarm backends' teardowns and `testbed gc`: which labelled objects one
teardown may touch (Scope), what it found (Resource), what it could not
remove and the command that does (Leftover), and its outcome
(TeardownReport). One scope rule, so either backend touches exactly the
same objects, and nothing without our labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.dockerapi.client import DaemonNotAnswering, where
from orchestrator.dockerapi.names import LABEL_STATE, LABEL_TESTBED
from orchestrator.errors import BackendUnavailable, TeardownIncomplete

DAEMON_RESTART = "systemctl restart docker"


@dataclass(frozen=True)
class Scope:
    """Which labelled objects a teardown may touch. `testbed` None: every
    testbed. `state` None: made under any state directory; a string: only
    those made under that one (objects from before the state label existed
    count as the named testbed's, never as "every testbed's")."""

    testbed: str | None
    state: str | None

    def label_filter(self) -> dict[str, str]:
        return {"label": f"{LABEL_TESTBED}={self.testbed}" if self.testbed is not None else LABEL_TESTBED}

    def admits(self, labels: dict[str, str]) -> bool:
        if LABEL_TESTBED not in labels:
            return False
        if self.state is None:
            return True
        allowed = {self.state} if self.testbed is None else {self.state, ""}
        return labels.get(LABEL_STATE, "") in allowed

    def describe(self) -> str:
        who = f"testbed {self.testbed}" if self.testbed is not None else "every testbed"
        where = "any state directory" if self.state is None else f"state directory {self.state or '(none)'}"
        return f"{who}, {where}"


@dataclass(frozen=True)
class Resource:
    """One labelled Docker object, as listed before removal."""

    kind: str  # container | network | volume | iptables rule | delay line | bridge
    name: str
    id: str
    testbed: str
    state: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "id": self.id, "testbed": self.testbed, "state": self.state}


@dataclass(frozen=True)
class Leftover:
    """Something that could not be removed, why, and the command that removes it."""

    resource: Resource
    why: str
    command: str

    def line(self) -> str:
        return f"{self.resource.kind} {self.resource.name} was not removed: {self.why}; remove it with: {self.command}"


@dataclass(frozen=True)
class TeardownReport:
    removed: tuple[str, ...]
    left: tuple[Leftover, ...]

    def raise_if_incomplete(self) -> list[str]:
        """The removed lines, or TeardownIncomplete naming every leftover."""
        if self.left:
            raise TeardownIncomplete([lf.line() for lf in self.left], list(self.removed))
        return list(self.removed)


def labels_of(obj: Any) -> dict[str, str]:
    attrs = getattr(obj, "attrs", {}) or {}
    return attrs.get("Labels") or (attrs.get("Config") or {}).get("Labels") or {}


def unchecked(scope: Scope, exc: BackendUnavailable) -> Leftover:
    """Docker's objects of `scope`, which a daemon that did not answer
    (`exc`) kept from being listed."""
    is_stuck = isinstance(exc, DaemonNotAnswering)
    why = str(exc) if is_stuck else f"no Docker daemon answers at {where()}"
    again = f"testbed down {scope.testbed}" if scope.testbed is not None else "testbed down --all"
    return Leftover(Resource("everything Docker holds", f"for {scope.describe()}", "docker-daemon",
                             scope.testbed or "", scope.state or ""), f"it could not be listed: {why}",
                    f"{DAEMON_RESTART if is_stuck else 'systemctl start docker'}, then {again}")


def summary(resources: Iterable[Resource]) -> str:
    counts: dict[str, int] = {}
    for r in resources:
        counts[r.kind] = counts.get(r.kind, 0) + 1
    return ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in sorted(counts.items())) or "nothing"
