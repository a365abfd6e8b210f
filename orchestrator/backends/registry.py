"""The backend registry: backends by the names users give (`--backend
process|docker|swarm`), the choice made when the user gives none, and the one
place a new backend is added.

Targets are "module:Class" strings imported lazily, so a backend whose module
or daemon is missing never breaks the others. `register_backend` adds one
from code; `TESTBED_BACKENDS` (`name=module:Class`, comma-separated) adds
them from the environment, which is how a test puts a fake backend under
the installed `testbed` command.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import TYPE_CHECKING

from orchestrator.errors import BackendUnavailable, InputError

if TYPE_CHECKING:  # the CLI imports this module at start-up, the backends only when one runs
    from orchestrator.backends.api import Backend, BackendContext

# Order is cleanup order for `down --all`: swarm before docker, since a
# swarm's task containers and overlay carry the same labels and only the
# swarm can remove them (by removing their services).
BUILTIN_BACKENDS: dict[str, str] = {
    "process": "orchestrator.backends.process.backend:ProcessBackend",
    "swarm": "orchestrator.backends.swarm.backend:SwarmBackend",
    "docker": "orchestrator.backends.docker.backend:DockerBackend",
}
ENV_BACKENDS = "TESTBED_BACKENDS"

BACKENDS: dict[str, str] = dict(BUILTIN_BACKENDS)


def register_backend(name: str, target: str) -> None:
    """Make `--backend NAME` run the Backend subclass at `target`
    ("package.module:Class")."""
    if not name.isidentifier() or ":" not in target:
        raise InputError(f"backend {name!r}={target!r}: expected NAME=package.module:Class")
    BACKENDS[name] = target


def _register_from_env() -> None:
    for item in filter(None, (s.strip() for s in os.environ.get(ENV_BACKENDS, "").split(","))):
        name, _, target = item.partition("=")
        register_backend(name.strip(), target.strip())


def backend_class(name: str) -> type[Backend]:
    from orchestrator.backends.api import Backend

    target = BACKENDS.get(name)
    if target is None:
        raise InputError(f"unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))})")
    module, cls = target.split(":")
    try:
        found = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"the {name} backend is not available here: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, Backend)):
        raise InputError(f"backend {name!r}: {target} is not a Backend")
    return found


def make_backend(name: str, ctx: BackendContext) -> Backend:
    return backend_class(name)(ctx)


def backend_exists(name: str) -> bool:
    target = BACKENDS.get(name)
    if target is None:
        return False
    try:
        return importlib.util.find_spec(target.split(":")[0]) is not None
    except ImportError:
        return False


def default_backend() -> tuple[str, str]:
    """(backend, why): docker when its module exists and a daemon answers,
    else process."""
    if not backend_exists("docker"):
        return "process", "the docker backend is not installed; using the process backend"
    try:
        from orchestrator.dockerapi.client import docker_available  # noqa: PLC0415 - docker SDK only when needed

        ok, why = docker_available()
    except Exception as exc:  # noqa: BLE001 - any failure means: no docker
        ok, why = False, str(exc)
    if ok:
        return "docker", "a Docker daemon is reachable; using the docker backend"
    return "process", f"no Docker daemon ({why}); using the process backend"


_register_from_env()
