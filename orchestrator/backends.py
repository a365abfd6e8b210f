"""Backends by the names users give (`--backend process|docker`), imported
lazily so a backend whose module or daemon is missing never breaks the others,
and the choice made when the user gives none."""

from __future__ import annotations

import importlib
import importlib.util

from orchestrator.backend import Backend
from orchestrator.errors import BackendUnavailable, InputError

BACKENDS: dict[str, str] = {
    "process": "orchestrator.process_backend:ProcessBackend",
    "docker": "orchestrator.docker_backend:DockerBackend",
}


def backend_class(name: str) -> type[Backend]:
    target = BACKENDS.get(name)
    if target is None:
        raise InputError(f"unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))})")
    module, cls = target.split(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"the {name} backend is not available here: {exc}") from exc


def backend_exists(name: str) -> bool:
    target = BACKENDS.get(name)
    return target is not None and importlib.util.find_spec(target.split(":")[0]) is not None


def default_backend() -> tuple[str, str]:
    """(backend, why): docker when its module exists and a daemon answers,
    else process."""
    if not backend_exists("docker"):
        return "process", "the docker backend is not installed; using the process backend"
    try:
        from orchestrator.docker_util import docker_available  # noqa: PLC0415

        ok, why = docker_available()
    except Exception as exc:  # noqa: BLE001 - any failure means: no docker
        ok, why = False, str(exc)
    if ok:
        return "docker", "a Docker daemon is reachable; using the docker backend"
    return "process", f"no Docker daemon ({why}); using the process backend"
