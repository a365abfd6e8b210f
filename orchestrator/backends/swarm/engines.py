"""The engines of a swarm: the manager the CLI talks to (DOCKER_HOST or the
docker context, through docker.from_env as Docker users expect) and, for
churn and trace collection, the engine of the swarm node that runs a task.

Why: swarm has no verb to kill, pause or stop one task's container (the
service API only replaces tasks), so those verbs go to the container on its
own node's engine. That engine is the manager's when the task runs there (a
single-node swarm: always); another node's engine is reachable only where the
user says how (TESTBED_SWARM_ENGINES="hostname=tcp://host:2376,..." , any URL
docker-py accepts, ssh:// included). Otherwise the verb is refused with
BackendUnavailable (exit 3), naming the node and how to make it reachable.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.dockerapi.client import docker_client
from orchestrator.errors import BackendUnavailable, TestbedError

ENGINES_ENV = "TESTBED_SWARM_ENGINES"


@dataclass(frozen=True)
class Task:
    """The newest task of a node's service, as the manager reports it."""

    id: str
    state: str  # new ... running, complete, shutdown, failed, rejected
    desired: str
    node_id: str
    container_id: str | None
    published_port: int | None
    error: str

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def live(self) -> bool:
        """On its way to running, or running (what a started node's process is)."""
        return self.desired == "running" and not self.finished

    @property
    def finished(self) -> bool:
        return self.state in ("complete", "shutdown", "failed", "rejected", "orphaned", "remove")

    @property
    def never_started(self) -> bool:
        """Failed before its container ran: the daemon could not start it
        (CI saw "unable to remount dir as readonly ... device or resource
        busy" on the task's secrets mount), not what the router did."""
        return self.state in ("failed", "rejected") and self.error.startswith("starting container failed")


def overlay_subnet(network: Any, wait_s: float) -> str | None:
    """A new overlay network's subnet, asked until the manager's allocator
    has given it one (a moment after the create returns); None after wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        network.reload()
        pools = (network.attrs.get("IPAM") or {}).get("Config") or []
        if pools:
            return pools[0]["Subnet"]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def engine_urls() -> dict[str, str]:
    """TESTBED_SWARM_ENGINES as {swarm node hostname: engine URL}."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in os.environ.get(ENGINES_ENV, "").split(","))):
        host, sep, url = item.partition("=")
        if not sep or not host or not url:
            raise BackendUnavailable(f"{ENGINES_ENV}: {item!r} is not hostname=URL")
        out[host.strip()] = url.strip()
    return out


def connect(url: str) -> Any:
    """A docker-py client for one engine URL (ssh:// through the ssh binary)."""
    import docker  # noqa: PLC0415

    try:
        client = docker.DockerClient(base_url=url, use_ssh_client=url.startswith("ssh://"), timeout=120)
        client.ping()
    except Exception as exc:  # DockerException, ConnectionError
        raise BackendUnavailable(f"the Docker engine at {url} does not answer: {exc}") from exc
    return client


class Swarm:
    """The manager client and the engines of the swarm's nodes."""

    def __init__(self) -> None:
        self.client = docker_client()
        swarm = (self.client.info().get("Swarm") or {})
        if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
            where = os.environ.get("DOCKER_HOST") or "the local Docker engine"
            self.client.close()
            raise BackendUnavailable(
                f"the swarm backend needs a swarm manager, and {where} is not one "
                f"(swarm state {swarm.get('LocalNodeState') or 'unknown'}); run `docker swarm init` "
                "(docs/swarm.md) or point DOCKER_HOST at a manager")
        self.local_node = swarm.get("NodeID", "")
        self._engines: dict[str, Any] = {self.local_node: self.client}
        self._nodes: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        for client in {id(c): c for c in self._engines.values()}.values():
            client.close()

    def node(self, node_id: str) -> dict[str, Any]:
        if node_id not in self._nodes:
            self._nodes[node_id] = self.client.api.inspect_node(node_id)
        return self._nodes[node_id]

    def node_state(self, node_id: str) -> str:
        """The manager's view of a swarm node now (ready, down, unknown,
        disconnected), asked afresh: a node lost mid-run turns down."""
        self._nodes[node_id] = self.client.api.inspect_node(node_id)
        return (self._nodes[node_id].get("Status") or {}).get("State", "unknown")

    def node_ids(self) -> list[str]:
        return [n["ID"] for n in self.client.api.nodes()]

    def hostname(self, node_id: str) -> str:
        return (self.node(node_id).get("Description") or {}).get("Hostname") or node_id

    def address(self, node_id: str) -> str:
        """Where the swarm node is reached (its advertised address)."""
        addr = (self.node(node_id).get("Status") or {}).get("Addr") or ""
        if addr in ("", "0.0.0.0") and node_id == self.local_node:
            return "127.0.0.1"
        if addr in ("", "0.0.0.0"):
            raise TestbedError(f"swarm node {self.hostname(node_id)} advertises no address")
        return addr

    def engine(self, node_id: str, why: str) -> Any:
        """The engine of a swarm node, or BackendUnavailable saying why it
        cannot be reached (`why`: what it was needed for)."""
        if node_id in self._engines:
            return self._engines[node_id]
        host = self.hostname(node_id)
        url = engine_urls().get(host)
        if url is None:
            raise BackendUnavailable(
                f"{why}: the task runs on swarm node {host} ({self.address(node_id)}), whose Docker engine "
                f"is not reachable from here; set {ENGINES_ENV}={host}=tcp://HOST:2376 (or ssh://user@host) "
                "or run the CLI on that node")
        self._engines[node_id] = connect(url)
        return self._engines[node_id]

    def tasks(self, service: str) -> list[Task]:
        """A service's tasks, newest first."""
        import docker.errors  # noqa: PLC0415

        try:
            raw = self.client.api.tasks(filters={"service": service})
        except docker.errors.NotFound:  # no such service (not created yet, or removed)
            return []
        raw.sort(key=lambda t: (t.get("CreatedAt", ""), (t.get("Version") or {}).get("Index", 0)), reverse=True)
        return [_task(t) for t in raw if (t.get("ServiceID") and t.get("Status"))]

    def latest(self, service: str) -> Task | None:
        tasks = self.tasks(service)
        return tasks[0] if tasks else None

    def container(self, task: Task, why: str) -> Any:
        """The task's container on its node's engine."""
        import docker.errors  # noqa: PLC0415

        if not task.container_id:
            raise TestbedError(f"{why}: task {task.id[:12]} has no container ({task.state}: {task.error})")
        try:
            return self.engine(task.node_id, why).containers.get(task.container_id)
        except docker.errors.NotFound:
            raise TestbedError(f"{why}: the container of task {task.id[:12]} is gone") from None


def _task(raw: dict[str, Any]) -> Task:
    status = raw.get("Status") or {}
    ports = ((status.get("PortStatus") or {}).get("Ports")) or []
    return Task(
        id=raw["ID"], state=status.get("State", ""), desired=raw.get("DesiredState", ""),
        node_id=raw.get("NodeID", ""), container_id=(status.get("ContainerStatus") or {}).get("ContainerID"),
        published_port=next((p.get("PublishedPort") for p in ports if p.get("PublishedPort")), None),
        error=status.get("Err", "") or status.get("Message", ""),
    )
