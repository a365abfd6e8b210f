"""Bringing one swarm node's files home at down, without SSH or a shared
disk: the engine's archive API (`docker cp`) on the node's volume.

The volume outlives every task of the node (a restarted task mounts the same
one on the same swarm node), so a task that was killed loses nothing it had
flushed. The newest task's container is read when it still exists (stopped
or not); otherwise a helper container is created (never started) on the
volume and read, then removed.

Where the files land (the shape every reader expects):

    /node/trace.pb      -> traces/<node>.pb
    /node/lag.json      -> node-logs/<node>.lag.json
    /node/node.log      -> node-logs/<node>.log
    /node/shaping.json  -> node-logs/<node>.shaping.json (what the task's tc step did)
    the entry's output  -> node-logs/<node>.entry.log (the container log: the tc step's errors)
    task history        -> node-logs/<node>.swarm.json
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.names import MOUNT
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.backends.swarm.engines import Swarm, Task, engine_urls

PLACES = {"trace.pb": "traces/{node}.pb", "lag.json": "node-logs/{node}.lag.json",
          "node.log": "node-logs/{node}.log", "shaping.json": "node-logs/{node}.shaping.json"}


def collect_one(swarm: Swarm, service: str, node: str, run_dir: Path, image: str,
                labels: Mapping[str, str]) -> str | None:
    """Collect one node (its volume is named as its service); a problem line,
    or None. A node whose engine does not answer and whose swarm node the
    manager reports down is lost: it says so, and what was collected of the
    others is kept."""
    tasks = swarm.tasks(service)
    try:
        return collect_node(swarm, tasks, service, node, run_dir, image, labels)
    except BackendUnavailable as exc:
        return lost_or_unreachable(swarm, tasks, node, service, exc)
    except TestbedError as exc:
        return f"{node}: traces not collected: {exc}"


def lost_or_unreachable(swarm: Swarm, tasks: Sequence[Task], node: str, volume: str,
                        exc: BackendUnavailable) -> str:
    """The line for a node whose engine could not be reached. Lost: the
    manager reports its swarm node down, or its engine is named in
    TESTBED_SWARM_ENGINES and does not answer (the manager notices a lost
    node only after some heartbeats). Otherwise it is only not reachable from
    here (no engine named for it)."""
    placed = [t for t in tasks if t.node_id]
    if not placed:
        return f"{node}: traces not collected: {exc}"
    node_id = placed[0].node_id
    host, state = swarm.hostname(node_id), swarm.node_state(node_id)
    named = host in engine_urls()
    if state not in ("down", "disconnected") and not named:
        return f"{node}: traces not collected: {exc}"
    why = f"the manager reports it {state}" + (", its engine does not answer" if named else "")
    return (f"{node}: lost with swarm node {host} ({why}): its trace stays in volume {volume} on that "
            f"node, not collected; its task history is in node-logs/{node}.swarm.json")


def collect_node(swarm: Swarm, tasks: Sequence[Task], volume: str, node: str, run_dir: Path, image: str,
                 labels: Mapping[str, str]) -> str | None:
    """Copy the node's files into run_dir; returns a problem line, or None."""
    history = [{"task": t.id, "state": t.state, "error": t.error, "swarm_node": swarm.hostname(t.node_id)}
               for t in tasks]
    (run_dir / "node-logs" / f"{node}.swarm.json").write_text(json.dumps(history, indent=1) + "\n")
    placed = [t for t in tasks if t.node_id]
    if not placed:
        return f"{node}: no task was ever placed ({tasks[0].error if tasks else 'no task'})"
    task = placed[0]
    engine = swarm.engine(task.node_id, f"collect the traces of {node}")
    _entry_log(engine, task, run_dir / "node-logs" / f"{node}.entry.log")
    data = _from_container(engine, task) or _from_volume(engine, volume, image, labels)
    if data is None:
        return f"{node}: neither its container nor its volume {volume} could be read"
    _extract(data, node, run_dir)
    return None


def _from_container(engine: Any, task: Task) -> bytes | None:
    import docker.errors  # noqa: PLC0415

    if not task.container_id:
        return None
    try:
        stream, _ = engine.api.get_archive(task.container_id, MOUNT)
        return b"".join(stream)
    except docker.errors.NotFound:
        return None


def _entry_log(engine: Any, task: Task, path: Path) -> None:
    """What the task's entry printed before the router's log took over."""
    import docker.errors  # noqa: PLC0415

    if not task.container_id:
        return
    try:
        text = engine.api.logs(task.container_id, stdout=True, stderr=True, tail=200)
    except docker.errors.NotFound:
        return
    if text:
        path.write_bytes(text)


def _from_volume(engine: Any, volume: str, image: str, labels: Mapping[str, str]) -> bytes | None:
    import docker.errors  # noqa: PLC0415
    from docker.types import Mount  # noqa: PLC0415

    if not image:
        raise TestbedError(f"volume {volume}: no image to read it with")
    try:
        engine.volumes.get(volume)
    except docker.errors.NotFound:
        return None
    helper = engine.containers.create(image, entrypoint=["true"], labels=dict(labels), network_mode="none",
                                      mounts=[Mount(MOUNT, volume, type="volume", read_only=True)])
    try:
        stream, _ = helper.client.api.get_archive(helper.id, MOUNT)
        return b"".join(stream)
    finally:
        helper.remove(force=True)


def _extract(data: bytes, node: str, run_dir: Path) -> None:
    """The files PLACES names, from the tar of /node (members node/<file>)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if name not in PLACES or not member.isfile():
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            target = run_dir / PLACES[name].format(node=node)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
