"""Small helpers shared by the Docker image build and the docker and swarm
backends: one place that connects to the daemon and turns "no daemon" into
one clear BackendUnavailable, the cgroup figures, and the cache directory.
The label names are orchestrator/dockerapi/names.py's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.errors import BackendUnavailable


def cache_dir() -> Path:
    """$TESTBED_CACHE_DIR, else $XDG_CACHE_HOME/gossip-testbed, else
    ~/.cache/gossip-testbed."""
    env = os.environ.get("TESTBED_CACHE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "gossip-testbed"
    path.mkdir(parents=True, exist_ok=True)
    return path


def current_state_dir() -> str:
    try:
        from orchestrator.records.state import state_dir  # noqa: PLC0415

        return str(state_dir().resolve())
    except Exception:  # noqa: BLE001 - no state module: one global scope
        return ""


def where() -> str:
    """The daemon the SDK talks to: DOCKER_HOST, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


PING_TIMEOUT_S = 10  # a daemon that has not answered a ping by then is stuck, not slow
_STUCK = ("it is stuck (Docker 20.10 can deadlock when many containers exit at once, moby/moby#46661; "
          "docs/docker.md)")


class DaemonNotAnswering(BackendUnavailable):
    """A Docker daemon took the connection but did not answer: there, and
    stuck (Docker 20.10 deadlocks when many containers exit at once,
    moby/moby#46661), which is not the same as no daemon at all."""


def docker_client(timeout: int = 120) -> Any:
    """A connected docker SDK client whose calls may take `timeout` seconds;
    BackendUnavailable naming what was tried when the SDK is missing or no
    daemon answers (DaemonNotAnswering when one took the connection but did
    not answer its first request in PING_TIMEOUT_S)."""
    try:
        import docker  # noqa: PLC0415 - optional at import time of the CLI
    except ImportError as exc:  # pragma: no cover - the SDK is a dependency
        raise BackendUnavailable(
            f"the docker backend needs the Docker SDK for Python (pip install docker): {exc}"
        ) from exc
    try:
        client = docker.from_env(timeout=min(timeout, PING_TIMEOUT_S))  # asks the API version: a first request
        client.ping()
    except Exception as exc:  # DockerException, requests' ConnectionError, PermissionError
        if _timed_out(exc):
            raise DaemonNotAnswering(
                f"the Docker daemon at {where()} took the connection but did not answer in {PING_TIMEOUT_S} s: "
                f"{_STUCK}"
            ) from exc
        raise BackendUnavailable(
            f"no Docker daemon reachable at {where()} (tried docker.from_env() and ping: "
            f"{_short(exc)}); start Docker, set DOCKER_HOST, or use --backend process"
        ) from exc
    client.api.timeout = timeout
    return client


def stuck(exc: BaseException) -> DaemonNotAnswering | None:
    """DaemonNotAnswering when `exc` is a Docker call that timed out after
    the daemon answered the connection's first request (what its libnetwork
    deadlock looks like: a listing answers, anything about the stuck
    containers or networks never does); None for any other error."""
    if not _timed_out(exc):
        return None
    return DaemonNotAnswering(f"the Docker daemon at {where()} answered, then did not answer a call ({_short(exc)}): "
                              f"{_STUCK}")


def _timed_out(exc: BaseException | None) -> bool:
    """Whether `exc` or what caused it is a timeout (the SDK wraps requests' own)."""
    import requests.exceptions  # noqa: PLC0415

    while exc is not None:
        if isinstance(exc, (requests.exceptions.Timeout, TimeoutError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def docker_available() -> tuple[bool, str]:
    """(True, "Docker <version> at <where>") or (False, why): for the CLI's
    choice of a default backend."""
    try:
        client = docker_client(timeout=10)
    except BackendUnavailable as exc:
        return False, str(exc)
    try:
        version = client.version().get("Version", "?")
    except Exception as exc:  # pragma: no cover - answered ping, then failed
        return False, f"Docker daemon at {where()} answered ping but not version: {_short(exc)}"
    finally:
        client.close()
    return True, f"Docker {version} at {where()}"


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "..."


def cgroup_memory(container_id: str) -> int | None:
    """Bytes of memory a container uses, from its cgroup (v1 or v2); None
    where the cgroup is not visible."""
    for path in (
        f"/sys/fs/cgroup/memory/docker/{container_id}/memory.usage_in_bytes",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.current",
        f"/sys/fs/cgroup/docker/{container_id}/memory.current",
    ):
        try:
            return int(Path(path).read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def cgroup_cpu_seconds(container_id: str) -> float | None:
    """CPU seconds a running container has used, from its cgroup (v1
    cpuacct.usage in ns, v2 cpu.stat usage_usec); None where it is not
    visible (the cgroup goes with the container's process)."""
    try:
        return int(Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        pass
    for path in (f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat",
                 f"/sys/fs/cgroup/docker/{container_id}/cpu.stat"):
        try:
            for line in Path(path).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            continue
    return None


def cgroup_procs(container_id: str) -> list[int] | None:
    """The pids in a running container's cgroup (v1 or v2, cgroupfs or
    systemd driver); None where it is not visible (a remote daemon, a
    container that is gone)."""
    for path in (
        f"/sys/fs/cgroup/pids/docker/{container_id}/cgroup.procs",
        f"/sys/fs/cgroup/memory/docker/{container_id}/cgroup.procs",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cgroup.procs",
        f"/sys/fs/cgroup/docker/{container_id}/cgroup.procs",
    ):
        try:
            return [int(word) for word in Path(path).read_text().split()]
        except (OSError, ValueError):
            continue
    return None


def start_or_explain(node: str, container: Any) -> None:
    """container.start(); a daemon too loaded to answer within the client's
    timeout is the host's limit (exit 3), not an internal error."""
    import requests.exceptions  # noqa: PLC0415 - the Docker SDK's transport

    try:
        container.start()
    except requests.exceptions.ReadTimeout as exc:
        raise BackendUnavailable(
            f"node {node}: the Docker daemon did not start its container in time ({exc}); "
            "the host is too loaded for this many containers: run fewer nodes or on a quieter host"
        ) from None


def kill_container(container: Any) -> None:
    """SIGKILL, then wait until it has stopped; one that already stopped
    (killed or exited meanwhile) is not an error."""
    import docker.errors  # noqa: PLC0415

    try:
        container.kill(signal="SIGKILL")
    except docker.errors.APIError as exc:
        if "is not running" not in str(exc):
            raise
    container.wait(condition="not-running", timeout=30)
