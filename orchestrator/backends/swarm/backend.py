"""The swarm backend: one replicated-1 service per router on the Docker Swarm
that the engine in use manages, for testbeds bigger than one host.

Decisions (docs/swarm.md says the same for users):
- Network: one attachable overlay `gtb-<testbed>` labelled like the docker
  backend's objects; a node is reached by its name (its network alias, with
  dnsrr endpoints: the name resolves to the task, no VIP), so a restarted task
  keeps its name though its IP changes. Peers on port 4001.
- Control endpoint: port 4002 published in host mode on the swarm node that
  runs the task; the CLI reaches it at that node's advertised address and the
  port the swarm picked (`control_client` asks the manager each time a task
  changes).
- Shaping: the task shapes its own links (orchestrator/backends/swarm/task.py), so a
  node's first start waits for `apply_kernel_shaping` when the kernel will
  shape anything: the service is created with the tc program in it.
- Churn: kill/stop/pause act on the task's container through its node's
  engine (orchestrator/backends/swarm/engines.py); start after stop or kill updates the
  service (new config secret, the next incarnation's seed) pinned to the swarm
  node that ran it, so the node keeps its volume, its trace and its identity.
  Partitions are the router's own isolate/rejoin over the control endpoint.
- Traces: each task writes to its own named volume; `collect_traces` copies
  them out with the engine's archive API from the newest container (or a
  stopped helper container on the volume when the container is gone), so a
  dead task loses nothing it flushed.
- Cleanup from labels alone (orchestrator/backends/swarm/teardown.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from node.config import LinkShape, NodeConfig
from node.runtime.client import ControlClient, ControlError
from orchestrator.backends.swarm import task as task_spec
from orchestrator.shaping import tc
from orchestrator.backends.api import Backend, BackendContext, Capabilities, NodeAddress
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.dockerapi import names
from orchestrator.dockerapi.client import current_state_dir, kill_container
from orchestrator.dockerapi.names import LABEL_NODE, LABEL_TESTBED, MOUNT, NODE_UID
from orchestrator.dockerapi.teardown import Scope
from orchestrator.errors import BackendUnavailable, InputError, TestbedError
from orchestrator.fanout import fan_out
from orchestrator.records.state import StateStore
from orchestrator.backends.swarm.collect import collect_one
from orchestrator.backends.swarm.engines import Swarm, Task, overlay_subnet
from orchestrator.backends.swarm.teardown import find, remove

__all__ = ["SwarmBackend"]

IMAGE_ENV = "TESTBED_SWARM_IMAGE"
STOP_TIMEOUT_S = 10
TASK_TIMEOUT_S = 120.0  # a task from created to running (image present, loaded box)
START_RETRIES = 2  # a task whose container never started (Task.never_started) is started anew


class SwarmBackend(Backend):
    name = "swarm"
    capabilities = Capabilities(kernel_shaping=True, netem=True, partitions=True, pause=True)

    def __init__(self, ctx: BackendContext) -> None:
        """Options: "image" (default $TESTBED_SWARM_IMAGE, else the locally
        built router image), "run_id" (default: the run directory's name)."""
        super().__init__(ctx)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}", self.testbed):
            raise InputError(f"testbed name {self.testbed!r}: use letters, digits, '_', '.', '-' (max 41)")
        self.run_id = ctx.options.get("run_id") or self.run_dir.name
        self.state_scope = current_state_dir()
        self.image: str | None = ctx.options.get("image")
        self.swarm = Swarm()
        self._network: Any = None
        self._caps: ShapingCapabilities | None = None
        self._resources: dict[str, tuple[int | None, int | None]] = {}
        self._constraints: dict[str, tuple[str, ...]] = {}
        self._deferred: dict[str, NodeConfig] = {}  # first starts waiting for their tc program
        self._launched: list[NodeConfig] = []  # deferred starts made, not yet seen running
        self._tasks: dict[str, Task] = {}
        self._superseded: dict[str, set[str]] = {}  # a node's tasks from before its latest start
        self._problems: list[str] = []  # what collect_traces could not bring home

    # ------------------------------------------------------------ set-up

    def labels(self, node: str | None = None) -> dict[str, str]:
        return names.labels(self.testbed, self.run_id, self.state_scope, node)

    @property
    def network_name(self) -> str:
        return names.network_name(self.testbed)

    def set_resources(self, node: str, memory: str | None = None, cpus: float | None = None) -> None:
        self._resources[node] = (_bytes(memory) if memory else None, int(cpus * 1e9) if cpus else None)

    def set_placement(self, node: str, constraints: Sequence[str]) -> None:
        self._constraints[node] = tuple(constraints)

    def prepare(self, nodes: Sequence[str]) -> dict[str, NodeAddress]:
        client = self.swarm.client
        leftovers = find(client, [], Scope(self.testbed, None))
        if leftovers:
            raise TestbedError(f"testbed {self.testbed!r} already exists in the swarm "
                               f"({', '.join(r.name for r, _ in leftovers[:5])}); run `testbed down {self.testbed}`")
        if self.image is None:
            self.image = _configured_image()
        try:
            self._network = client.networks.create(self.network_name, driver="overlay", attachable=True,
                                                   labels=self.labels(), check_duplicate=True, scope="swarm")
        except Exception as exc:  # docker.errors.APIError
            raise TestbedError(f"cannot create overlay network {self.network_name}: {exc}") from exc
        for sub in ("configs", "traces", "node-logs"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        self.reporter.note(f"overlay network {self.network_name} ({self.subnet()}); image {self.image}")
        return {node: self.address(node) for node in nodes}

    def address(self, node: str) -> NodeAddress:
        """Peers dial the node's name; the control address is looked up per
        task (control_client), the one recorded here is the overlay's."""
        return NodeAddress(host=node, port=task_spec.LISTEN_PORT, control_host=node,
                           control_port=task_spec.CONTROL_PORT)

    def _network_obj(self) -> Any:
        if self._network is None:
            import docker.errors  # noqa: PLC0415

            try:
                self._network = self.swarm.client.networks.get(self.network_name)
            except docker.errors.NotFound:
                raise TestbedError(f"testbed {self.testbed!r} has no overlay network (not up?)") from None
        return self._network

    def subnet(self, wait_s: float = 15.0) -> str:
        subnet = overlay_subnet(self._network_obj(), wait_s)
        if subnet is None:
            raise TestbedError(f"overlay network {self.network_name} has no subnet after {wait_s:g} s")
        return subnet

    # ------------------------------------------------------------ shaping

    def shaping_capabilities(self) -> ShapingCapabilities:
        """What the kernel of the CLI's host can shape, taken for every swarm
        node's (each task records what it really applied: manifest_facts)."""
        if self._caps is None:
            probe = tc.probe_kernel()
            where = ("probed on this host" if len(self.swarm.node_ids()) == 1 else
                     "probed on the CLI's host and assumed for every swarm node; each task records what it applied")
            if probe.htb is False:
                self._caps = ShapingCapabilities(False, False, "userspace", f"htb missing ({probe.detail}); {where}")
            elif probe.netem:
                self._caps = ShapingCapabilities(True, True, "netem",
                                                 f"netem+htb applied by each task before its router starts; {where}")
            else:
                self._caps = ShapingCapabilities(
                    False, True, "userspace+htb",
                    f"sch_netem missing ({probe.detail}); delay/jitter/loss in the node's user-space shaper, "
                    f"rates with htb/tbf applied by each task before its router starts; {where}")
        return self._caps

    def _kernel_shapes(self) -> bool:
        caps = self.shaping_capabilities()
        return caps.kernel_delay or caps.kernel_rate

    def apply_kernel_shaping(
        self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None
    ) -> list[str]:
        """Keep what was asked (run_dir/configs/<node>.kernel-shaping.json,
        for later restarts) and start the node's task with it, if its start
        was waiting for it. A running task is never re-shaped."""
        self._shaping_file(node).write_text(json.dumps({
            "per_peer": {p: dataclasses.asdict(s) for p, s in sorted(per_peer.items())},
            "uplink_bps": uplink_bps, "path": self.shaping_capabilities().path,
        }, indent=1) + "\n")
        plan = self._plan(node)
        config = self._deferred.pop(node, None)
        if config is not None:
            self._run(config)
            self._launched.append(config)
        if self._launched and not self._deferred:  # the last one: started means running, as elsewhere
            launched, self._launched = self._launched, []
            self._await_running(launched)
        return [" ".join(c) for c in plan.commands] if plan else []

    def _shaping_file(self, node: str) -> Any:
        return self.run_dir / "configs" / f"{node}.kernel-shaping.json"

    def _plan(self, node: str) -> task_spec.ShapingPlan | None:
        path = self._shaping_file(node)
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        per_peer = {p: LinkShape(**s) for p, s in saved.get("per_peer", {}).items() if p != "*"}
        default = saved.get("per_peer", {}).get("*")
        caps = self.shaping_capabilities()
        return task_spec.shaping_plan(per_peer, saved.get("uplink_bps"), LinkShape(**default) if default else None,
                                      netem=caps.kernel_delay, path=caps.path, subnet=self.subnet())

    # ------------------------------------------------------------ tasks

    def start(self, config: NodeConfig) -> None:
        self.start_many([config])

    def start_many(self, configs: Iterable[NodeConfig]) -> None:
        """Create or update each node's service. A first start waits for
        `apply_kernel_shaping` when the kernel shapes anything (the task
        applies its tc program before the router starts)."""
        now = []
        for config in configs:
            if self._kernel_shapes() and not self._shaping_file(config.name).exists():
                self._deferred[config.name] = config
            else:
                now.append(config)
        fan_out(self._run, now, names.PARALLEL)
        self._await_running(now)

    def _run(self, config: NodeConfig) -> None:
        """Create the node's service, or update it for a start after stop or
        kill (the lifecycle table only starts a stopped node; the swarm's
        task state may lag the container's, so it is not asked)."""
        node = config.name
        self._tasks.pop(node, None)
        self._control_clients.pop(node, None)
        seen = dataclasses.replace(config, listen_host="0.0.0.0", control_host="0.0.0.0",
                                   trace_path=f"{MOUNT}/trace.pb", lag_path=f"{MOUNT}/lag.json", scores_path="", tree_path="")
        name = names.node_object_name(self.testbed, node)
        secret = self.swarm.client.secrets.create(
            name=f"{name}-{secrets.token_hex(4)}", data=seen.to_json().encode(), labels=self.labels(node))
        service = self._service_or_none(name)
        earlier = self.swarm.tasks(name) if service is not None else []
        self._superseded[node] = {t.id for t in earlier}
        previous = earlier[0] if earlier else None
        pinned = (f"node.id=={previous.node_id}",) if previous is not None and previous.node_id else ()
        memory, cpus = self._resources.get(node, (None, None))
        spec = task_spec.TaskSpec(
            service=name, node=node, image=self._image(), network_id=self._network_obj().id,
            volume=name, secret_id=secret.id, secret_name=secret.name, labels=self.labels(node),
            constraints=self._constraints.get(node, ()) + pinned, memory_bytes=memory or _bytes(names.DEFAULT_MEMORY),
            nano_cpus=cpus, shaping=self._plan(node),
        )
        template = task_spec.task_template(spec)
        api = self.swarm.client.api
        if service is None:
            api.create_service(template, name=name, labels=self.labels(node), endpoint_spec=task_spec.endpoint_spec())
            return
        template["ForceUpdate"] = int((service.attrs["Spec"]["TaskTemplate"].get("ForceUpdate") or 0)) + 1
        api.update_service(service.id, service.attrs["Version"]["Index"], task_template=template, name=name,
                           labels=self.labels(node), endpoint_spec=task_spec.endpoint_spec())

    def _image(self) -> str:
        """The image of this testbed's services (a later CLI call: churn),
        else the configured one."""
        if self.image is None:
            services = self.swarm.client.services.list(filters={"label": f"{LABEL_TESTBED}={self.testbed}"})
            images = [s.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"] for s in services]
            self.image = images[0] if images else _configured_image()
        return self.image

    def _service_or_none(self, name: str) -> Any:
        import docker.errors  # noqa: PLC0415

        try:
            return self.swarm.client.services.get(name)
        except docker.errors.NotFound:
            return None

    def _await_running(self, configs: Sequence[NodeConfig], timeout: float = TASK_TIMEOUT_S) -> None:
        """Wait until each node's newest task runs. One that never started is
        started anew; one that failed or was rejected otherwise (no such image
        on that node, a constraint no node meets) is an error naming why."""
        waiting, retries = {c.name: c for c in configs}, dict.fromkeys((c.name for c in configs), START_RETRIES)
        deadline = time.monotonic() + timeout
        while waiting:
            for node in sorted(waiting):
                task = self._latest(node)
                if task is not None and task.running and task.published_port:
                    self._tasks[node] = task
                    del waiting[node]
                elif task is not None and task.never_started and retries[node]:
                    retries[node] -= 1
                    self.reporter.note(f"node {node}: {task.error}; starting its task again")
                    self._run(waiting[node])
                elif task is not None and task.finished:
                    hint = " (the image must be on every swarm node: `testbed image distribute` or " \
                           "`testbed image push`, docs/swarm.md)" if "image" in task.error.lower() else ""
                    raise TestbedError(f"node {node}: swarm task {task.state}: {task.error}{hint}")
            if waiting and time.monotonic() > deadline:
                raise TestbedError(f"swarm tasks not running after {timeout:.0f} s: {', '.join(sorted(waiting))} "
                                   "(see `docker service ps`)")
            if waiting:
                time.sleep(0.3)

    def _task(self, node: str) -> Task:
        task = self._tasks.get(node)
        if task is None or not task.running:
            task = self._latest(node)
            if task is None:
                raise TestbedError(f"node {node} of testbed {self.testbed!r} has no swarm task")
            self._tasks[node] = task
        return task

    def _latest(self, node: str) -> Task | None:
        """The node's newest task that its latest start made (None before
        the swarm lists it)."""
        old = self._superseded.get(node, set())
        return next((t for t in self.swarm.tasks(names.node_object_name(self.testbed, node)) if t.id not in old), None)

    def control_client(self, node: str) -> ControlClient:
        """The control endpoint at the swarm node that runs the task, on the
        port the swarm published for it."""
        client = self._control_clients.get(node)
        if client is None:
            task = self._latest(node)
            token = (self.store.load(self.testbed) or {}).get("token", "")
            # A task that is not running (yet) publishes no port: port 0
            # refuses at once, as a dead process's address does elsewhere.
            host = self.swarm.address(task.node_id) if task and task.node_id else "127.0.0.1"
            client = ControlClient(host, (task.published_port if task else None) or 0, token)
            if task is not None and task.running and task.published_port:
                self._control_clients[node] = client
                self._tasks[node] = task
        return client

    def _container(self, node: str, why: str) -> Any:
        return self.swarm.container(self._task(node), f"{why} {node}")

    def stop(self, node: str) -> None:
        self._container(node, "stop").stop(timeout=STOP_TIMEOUT_S)
        self._tasks.pop(node, None)

    def kill(self, node: str) -> None:
        kill_container(self._container(node, "kill"))
        self._tasks.pop(node, None)

    def pause(self, node: str) -> None:
        self._container(node, "pause").pause()

    def resume(self, node: str) -> None:
        self._container(node, "unpause").unpause()

    def is_running(self, node: str) -> bool:
        """Its newest task is on its way to running or runs (and its
        container, where the engine can be asked, is not stopped)."""
        task = self._latest(node)
        if task is None:
            return node in self._superseded  # started; the swarm does not list the task yet
        if not task.live:
            return False
        if not task.running:
            return True
        try:
            return self.swarm.container(task, f"status of {node}").status in ("running", "paused", "restarting")
        except BackendUnavailable:
            return True  # the manager says running; its engine cannot be asked

    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self._isolate(node, "isolate", peers)

    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self._isolate(node, "rejoin", peers)

    def _isolate(self, node: str, cmd: str, peers: Sequence[str] | None) -> None:
        try:
            self.control_client(node).call(cmd, peers=list(peers) if peers else None)
        except ControlError as exc:
            raise TestbedError(f"{node}: {cmd} failed: {exc}") from None

    # ------------------------------------------------------------ collection

    def _nodes(self) -> list[str]:
        services = self.swarm.client.services.list(filters={"label": f"{LABEL_TESTBED}={self.testbed}"})
        return sorted({(s.attrs["Spec"].get("Labels") or {}).get(LABEL_NODE, "") for s in services} - {""})

    def collect_traces(self) -> None:
        """Copy each node's volume (trace, lag file, log, shaping record)
        into the run directory; record its task's final state. A node that
        could not be read (lost with its swarm node) is a collection warning."""
        image = self._image()
        self._problems = [p for p in fan_out(lambda node: collect_one(
            self.swarm, names.node_object_name(self.testbed, node), node, self.run_dir, image, self.labels(node)),
            self._nodes(), names.PARALLEL) if p]

    def collection_warnings(self) -> list[str]:
        return list(self._problems)

    def manifest_facts(self) -> dict[str, Any]:
        """Per node, the shaping its task applied (from node-logs/<node>.shaping.json)."""
        per_node: dict[str, Any] = {}
        for path in sorted((self.run_dir / "node-logs").glob("*.shaping.json")):
            try:
                per_node[path.name.removesuffix(".shaping.json")] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
        return {"shaping_per_node": per_node} if per_node else {}

    def isolation(self) -> dict[str, object]:
        return {
            "user": f"{NODE_UID}:{NODE_UID} (after the entry's tc step, which runs as root with "
                    f"{', '.join(task_spec.TASK_CAPS)} only)",
            "mounts": [f"volume gtb-<testbed>-<node> at {MOUNT} (read-write)", "the config as a swarm secret"],
            "cap_drop": ["ALL"], "router_caps": [], "no_new_privileges": True,
            "read_only_rootfs": True, "privileged": False,
        }

    def destroy(self) -> None:
        """Let go of the engines; `cleanup`, called next, removes the services and the rest."""
        self.swarm.close()

    @classmethod
    def cleanup(cls, testbed: str | None, store: StateStore) -> list[str]:
        """Remove what this state directory made for `testbed` (None: every
        testbed) in the swarm; nothing when the engine is no swarm manager."""
        return remove(Scope(testbed, current_state_dir())).raise_if_incomplete()


def _bytes(memory: str) -> int:
    """A memory size as Docker reads it ("256m") in bytes."""
    from docker.utils import parse_bytes  # noqa: PLC0415

    return parse_bytes(memory)


def _configured_image() -> str:
    image = os.environ.get(IMAGE_ENV)
    if image:
        return image
    from orchestrator.images.router import ensure_image  # noqa: PLC0415

    return ensure_image()
