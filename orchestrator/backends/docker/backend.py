"""The Docker backend: one router per container on a private bridge network
per testbed.

Decisions (docs/docker.md says the same for users):
- Addressing: the testbed gets its own internal network (no route to the
  outside): a Linux bridge of its own where the host gives root, else a
  Docker network (orchestrator/backends/docker/wiring.py says why both); every node
  gets a static IP, assigned in `prepare` so initial_peers can be written
  before any container starts. Peers on port 9000 (the gossipsub-interop
  contract's port), the control endpoint on port 4002 of the same IP; the
  host reaches both over the bridge (its gateway address). Every container's
  hostname and network alias is nodeN (N its index in the experiment), as
  the contract's `connect` resolves peers by that name (a network alias, or
  /etc/hosts on an own bridge).
- Foreign routers (orchestrator/routers/kinds.py) run their own image with its own
  entry point, `--params /node/params.json` (+ `--config /node/config.json`
  for our adapters); their stdout is the contract's NDJSON, kept in the
  container's log and copied to nodes/<node>/stdout.ndjson at collect.
- Shaping and partitions: from the host, in each container's network
  namespace (orchestrator/backends/docker/netns.py). Containers run with every
  capability dropped, no-new-privileges, a read-only root filesystem, never
  privileged, no Docker socket.
- Files: each container mounts only its own node directory read-write
  (run_dir/nodes/<node> at /node) and runs as an unprivileged uid that owns
  it (orchestrator.backends.docker.nodedir); traces land on the host directly, and
  destroy/cleanup never touch run_dir. The image's code and libraries are
  mounted read-only from one host copy (orchestrator.images.tree).
- Labels on everything (gossip-testbed.testbed/run/node); `cleanup` works
  from labels alone, so it finds what a killed CLI left behind, and never
  removes anything without them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from node.config import LinkShape, NodeConfig
from orchestrator.backends.docker import collect
from orchestrator.backends.docker import nodedir
from orchestrator.backends.docker import teardown as docker_teardown
from orchestrator.backends.docker import wiring as docker_wiring
from orchestrator.backends.api import Backend, BackendContext, Capabilities, NodeAddress
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.backends.docker.netns import Containers, Netns
from orchestrator.backends.docker.wiring import Placement, shares_namespace
from orchestrator.shaping.proxy import config_proxy_shapes, proxy_needed, shape_foreign
from orchestrator.backends.docker.teardown import find, stop_all
from orchestrator.dockerapi import names
from orchestrator.dockerapi.client import (
    current_state_dir,
    docker_available,
    docker_client,
    kill_container,
    start_or_explain,
)
from orchestrator.dockerapi.names import LABEL_IP, LABEL_NODE, LABEL_TESTBED
from orchestrator.dockerapi.teardown import Scope, summary
from orchestrator.errors import BackendUnavailable, InputError, TestbedError
from orchestrator.fanout import fan_out
from orchestrator.routers.kinds import kind_of
from orchestrator.routers.foreign_nodes import PARAMS
from orchestrator.images.base import image_or_none
from orchestrator.images.tree import shared_binds
from orchestrator.host.iptables import tag_of
from orchestrator.records.state import StateStore

__all__ = ["DockerBackend", "NodeResources", "docker_available"]

LISTEN_PORT = 9000  # the gossipsub-interop contract's port, for every container
CONTROL_PORT = 4002
STOP_TIMEOUT_S = 10
NODE_LOG_SIZE = "1m"  # our routers log to /node/node.log; the container log is a fallback
FOREIGN_LOG_SIZE = "512m"  # a foreign node's container log is its stdout: every received copy


@dataclass(frozen=True)
class NodeResources:
    """A container's limits: memory as Docker reads it ("256m", "1g"), cpus as
    a fraction of cores (0.5)."""

    memory: str | None = None
    cpus: float | None = None


class DockerBackend(Backend):
    name = "docker"
    capabilities = Capabilities(kernel_shaping=True, netem=True, partitions=True, pause=True, images=True,
                                foreign_proxy=True, shared_hosts=True)

    def __init__(self, ctx: BackendContext) -> None:
        """Options (ctx.options): "image" (default: build or reuse the router
        image), "entrypoint" (what runs in the container; "$0" is the config
        path, "$1" the log path), "resources" (node -> NodeResources),
        "default_resources", "run_id" (default: the run directory's name),
        "network" (docker_wiring.OWN_BRIDGE or DOCKER_NETWORK; default: an own
        bridge where the host can give one)."""
        super().__init__(ctx)
        testbed, opts = ctx.testbed, ctx.options
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", testbed):
            raise InputError(f"testbed name {testbed!r}: use letters, digits, '_', '.', '-' (max 63)")
        self.run_id = opts.get("run_id") or self.run_dir.name
        self.state_scope = current_state_dir()
        self.image = opts.get("image")
        entrypoint = opts.get("entrypoint")
        self.entrypoint = list(entrypoint) if entrypoint else [
            "/bin/sh", "-c", 'exec python3 -m node --config "$0" >>"$1" 2>&1']
        self.network_kind = docker_wiring.chosen(opts.get("network"))  # what `prepare` makes
        resources = opts.get("resources") or {}
        default_resources = opts.get("default_resources") or NodeResources(memory=names.DEFAULT_MEMORY)
        self.resources: dict[str, NodeResources] = dict(resources)
        self.default_resources = default_resources
        self._client = docker_client()
        self.wiring: docker_wiring.Wiring | None = None
        self.ips: dict[str, str] = {}
        self.slots: dict[str, tuple[str, int]] = {}  # node -> (its host, its slot there), from `prepare`
        self.netns = Netns(testbed, self.run_dir, self.state_scope, self.store, self.reporter, self.ips, Containers(
            attach=self._attach, get=self._container, get_or_none=self._container_or_none, wiring=self._wiring,
            gateway=lambda: self.gateway, control=self._control))
        self.user = nodedir.node_user()
        self._shared: dict[str, dict[str, str]] | None = None  # binds of the image's unpacked code, libraries
        self._collected = False  # collect_traces ran: destroy need not inspect every container again
        self.foreign_images: dict[str, str] = {}
        # start_many starts nodes in parallel: a foreign image missing here is built by the first
        # start only (five concurrent cargo builds of one adapter broke each other's fingerprints)
        self._foreign_images_lock = threading.Lock()
        self.proxies: dict[str, dict[str, Any]] = {}  # foreign node -> its shaping proxy's manifest record

    # ------------------------------------------------------------ addresses

    def set_resources(self, node: str, memory: str | None = None, cpus: float | None = None) -> None:
        self.resources[node] = NodeResources(memory, cpus)

    @property
    def network_name(self) -> str:
        return names.network_name(self.testbed)

    @property
    def subnet(self) -> str | None:
        return str(self.wiring.subnet) if self.wiring else None

    @property
    def gateway(self) -> str | None:
        """The host's address on the testbed network."""
        return self.wiring.gateway if self.wiring else None

    def labels(self, node: str | None = None) -> dict[str, str]:
        return names.labels(self.testbed, self.run_id, self.state_scope, node)

    def prepare(self, nodes: Sequence[str]) -> dict[str, NodeAddress]:
        leftovers = find(self._client, Scope(self.testbed, None)).resources()
        if leftovers:
            scopes = {r.state for r in leftovers}
            where = "" if scopes <= {self.state_scope, ""} else (
                f" (made with TESTBED_STATE_DIR={sorted(scopes - {''})[0]})")
            raise TestbedError(
                f"testbed {self.testbed!r} already exists in Docker ({summary(leftovers)}){where}; "
                f"run `testbed down {self.testbed}` there first"
            )
        if self.image is None:
            from orchestrator.images.router import ensure_image  # noqa: PLC0415

            self.image = ensure_image(reporter=self.reporter)
        self._image_binds(self.image)
        self.wiring = docker_wiring.create(self.network_kind, self._client, self.network_name, len(nodes),
                                           self.testbed, tag_of(self.testbed, self.state_scope), self.labels())
        self.reporter.note(self.wiring.describe())
        self.netns.prepare_host_network(len(nodes))
        self.slots = self.host_slots(nodes)
        nodedir.write_hosts(self.run_dir, {f"node{index}": self._allocate(node) for index, node in enumerate(nodes)})
        for sub in ("configs", "traces", "node-logs"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        return {node: self.address(node) for node in nodes}

    def address(self, node: str) -> NodeAddress:
        ip = self.ips.get(node) or self._allocate(node)
        _, slot = self.slots.get(node, (node, 0))
        return NodeAddress(host=ip, port=LISTEN_PORT + slot, control_host=ip, control_port=CONTROL_PORT + slot)

    def _allocate(self, node: str) -> str:
        if node in self.ips:
            return self.ips[node]
        if node in self.hosts:  # a packed identity: its host's address
            self.ips[node] = self._allocate(self.hosts[node])
            return self.ips[node]
        if self.wiring is None:
            raise TestbedError("DockerBackend.prepare must run before nodes get addresses")
        used = set(self.ips.values()) | {self.wiring.gateway}
        free = next((str(host) for host in self.wiring.subnet.hosts() if str(host) not in used), None)
        if free is None:
            raise TestbedError(f"subnet {self.wiring.subnet} of testbed {self.testbed!r} is full")
        self.ips[node] = free
        return free

    # ------------------------------------------------------------ containers

    def start(self, config: NodeConfig) -> None:
        node = config.name
        nodedir.prepare(self.run_dir, config, self.user)
        self._attach()
        if node not in self.ips and config.listen_host not in ("", "0.0.0.0"):
            self.ips[node] = config.listen_host
        container = self._container_or_none(node)
        wiring = self._wiring()
        if container is None:
            container = self._create(config)
            guest = shares_namespace(container)  # a packed identity: in its host's namespace, wired and shaped with it
        else:
            if container.status in ("running", "paused", "restarting"):
                raise TestbedError(f"node {node} is already running")
            guest = shares_namespace(container)
            if not guest and not self._attached(node, container):  # stopped while cut off: back on the network
                wiring.join(node, container, self.ips[node])
        start_or_explain(node, container)
        if not guest:
            wiring.started(node, container, self.ips[node])
            self.netns.restarted(node)
        if kind_of(config.router).foreign and proxy_needed(self.shaping_capabilities()):
            self.proxies[node] = shape_foreign(
                self._client, container, node, config_proxy_shapes(config, self.ips), image=self.image,
                labels=self.labels(), config_dir=self.store.dir(self.testbed) / "proxy",
                exempt=[g for g in (self.gateway,) if g], listen_port=config.listen_port,
            ).manifest_record()

    def start_many(self, configs: Iterable[NodeConfig]) -> None:
        """`start` for many nodes, a few Docker calls at a time; identities
        packed on a host after the hosts, whose namespaces they join."""
        configs = list(configs)
        for batch in ([c for c in configs if c.name not in self.hosts], [c for c in configs if c.name in self.hosts]):
            fan_out(self.start, batch, names.PARALLEL)

    def _launch(self, config: NodeConfig) -> tuple[str, list[str] | None, list[str], str]:
        """(image, entrypoint (None: the image's own), command, log size) of a node."""
        cfg, log = nodedir.inside(nodedir.CONFIG), nodedir.inside(nodedir.LOG)
        kind = kind_of(config.router)
        if not kind.foreign:
            return self.image, self.entrypoint, [cfg, log], NODE_LOG_SIZE  # type: ignore[return-value]
        with self._foreign_images_lock:
            if config.router not in self.foreign_images:
                if kind.image is not None and image_or_none(self._client, kind.image) is None:
                    raise BackendUnavailable(f"image {kind.image} is not on this machine (nothing is pulled): build "
                                             "it first, docs/foreign-routers.md")
                self.foreign_images[config.router] = kind.image or kind.build_image(self._client, self.reporter)
        command = ["--params", nodedir.inside(PARAMS)] + (["--config", cfg] if kind.control else [])
        return self.foreign_images[config.router], None, command, FOREIGN_LOG_SIZE

    def _create(self, config: NodeConfig) -> Any:
        node = config.name
        if self.wiring is None or self.image is None or node not in self.ips:
            raise TestbedError("DockerBackend.prepare must run before start")
        api = self._client.api
        res = self.resources.get(node, self.default_resources)
        image, entrypoint, command, log_size = self._launch(config)
        alias = f"node{config.index}"
        host = self.hosts.get(node)
        place = (Placement(f"container:{names.node_object_name(self.testbed, host)}") if host is not None
                 else self.wiring.placement(self.ips[node], alias))
        hosts = nodedir.hosts_bind(self.run_dir) if self.wiring.mounts_hosts else {}
        host_config = api.create_host_config(
            binds={str(nodedir.node_dir(self.run_dir, node)): {"bind": nodedir.MOUNT, "mode": "rw"},
                   **self._image_binds(image), **hosts},
            mem_limit=res.memory or self.default_resources.memory,
            nano_cpus=int((res.cpus or self.default_resources.cpus or 0) * 1e9) or None,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            init=True,  # docker-init forwards SIGTERM to the router
            read_only=True,
            tmpfs={"/tmp": "size=16m"},
            pids_limit=512,
            log_config={"type": "json-file", "config": {"max-size": log_size}},
            network_mode=place.network_mode,
            sysctls=place.sysctls or None,
        )
        networking = api.create_networking_config({
            place.network_mode: api.create_endpoint_config(**place.endpoint)}) if place.endpoint else None
        created = api.create_container(
            image,
            name=names.node_object_name(self.testbed, node),
            entrypoint=entrypoint,
            command=command,
            labels={**self.labels(node), LABEL_IP: self.ips[node]},
            host_config=host_config,
            networking_config=networking,
            network_disabled=place.network_disabled,
            user=self.user.docker_user,
            hostname=None if host is not None else alias,  # a joined namespace has its host's name
            environment={"TESTBED_NODE": node},
        )
        return self._client.containers.get(created["Id"])

    def _image_binds(self, image: str) -> dict[str, dict[str, str]]:
        """The router image's code and libraries, shared by its containers (orchestrator.images.tree)."""
        if image != self.image:
            return {}
        if self._shared is None:
            self._shared = shared_binds(self._client, image, self.reporter)
        return self._shared

    def _container_or_none(self, node: str) -> Any:
        import docker.errors  # noqa: PLC0415

        try:
            container = self._client.containers.get(names.node_object_name(self.testbed, node))
        except docker.errors.NotFound:
            return None
        if container.labels.get(LABEL_TESTBED) != self.testbed:
            raise TestbedError(f"container {container.name} exists but is not testbed {self.testbed!r}'s")
        return container

    def _container(self, node: str) -> Any:
        container = self._container_or_none(node)
        if container is None:
            raise TestbedError(f"node {node} of testbed {self.testbed!r} has no container")
        return container

    def stop(self, node: str) -> None:
        self._container(node).stop(timeout=STOP_TIMEOUT_S)

    def stop_many(self, nodes: Sequence[str]) -> dict[str, str]:
        """SIGTERM to all of them at once, one grace for all, endpoints
        released one at a time (orchestrator/backends/docker/teardown.py)."""
        flt = {"label": f"{LABEL_TESTBED}={self.testbed}"}
        wanted = set(nodes)
        ids = {(c.get("Labels") or {}).get(LABEL_NODE): c["Id"] for c in self._client.api.containers(filters=flt)}
        network = self._wiring().network
        return stop_all(self._client, flt, {n: cid for n, cid in ids.items() if n in wanted}, STOP_TIMEOUT_S,
                        network)

    def kill(self, node: str) -> None:
        kill_container(self._container(node))

    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self.netns.disconnect(node, peers)

    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self.netns.reconnect(node, peers)

    def shaping_capabilities(self) -> ShapingCapabilities:
        return self.netns.shaping_capabilities()

    def apply_kernel_shaping(self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None) -> list[str]:
        return self.netns.apply_kernel_shaping(node, per_peer, uplink_bps)

    def shaping_warnings(self) -> list[str]:
        return self.netns.shaping_warnings()

    def pause(self, node: str) -> None:
        self._container(node).pause()

    def resume(self, node: str) -> None:
        self._container(node).unpause()

    def is_running(self, node: str) -> bool:
        container = self._container_or_none(node)
        return container is not None and container.status in ("running", "paused", "restarting")

    def status(self, node: str) -> str:
        container = self._container_or_none(node)
        return "absent" if container is None else container.status

    def _attached(self, node: str, container: Any) -> bool:
        return self._wiring().attached(node, container)

    def _control(self, node: str, cmd: str, **args: Any) -> dict[str, Any]:
        from node.runtime.client import ControlClient, ControlError  # noqa: PLC0415

        cfg = NodeConfig.load(nodedir.node_dir(self.run_dir, node) / nodedir.CONFIG)
        try:
            return ControlClient(cfg.control_host, cfg.control_port, cfg.token).call(cmd, **args)
        except ControlError as exc:
            raise TestbedError(f"{node}: {cmd} through the control endpoint failed: {exc}") from None

    def _wiring(self) -> docker_wiring.Wiring:
        self._attach()
        if self.wiring is None:
            raise TestbedError(f"testbed {self.testbed!r} has no network (not up?)")
        return self.wiring

    def _attach(self) -> None:
        """Recover the network, subnet, addresses and image from the host when
        this object did not create them (a later CLI process: churn, down)."""
        if self.wiring is not None:
            return
        self.wiring = docker_wiring.find(self._client, self.network_name, self.testbed,
                                         tag_of(self.testbed, self.state_scope))
        if self.wiring is None:
            return
        # one listing, not an inspect per container (1.9 s of a `down` at 250)
        for listed in self._client.api.containers(all=True, filters=Scope(self.testbed, None).label_filter()):
            labels = listed.get("Labels") or {}
            node = labels.get(LABEL_NODE)
            endpoint = ((listed.get("NetworkSettings") or {}).get("Networks") or {}).get(self.network_name)
            ip = labels.get(LABEL_IP) or ((endpoint or {}).get("IPAMConfig") or {}).get("IPv4Address")
            if node and ip:
                self.ips.setdefault(node, ip)
            elif node:  # disconnected: its config knows its address
                cfg = nodedir.node_dir(self.run_dir, node) / nodedir.CONFIG
                if cfg.exists():
                    self.ips.setdefault(node, NodeConfig.load(cfg).listen_host)
            if self.image is None:
                self.image = listed.get("Image")

    def manifest_facts(self) -> dict[str, Any]:
        """Each foreign node's shaping proxy (docker_proxy.ProxyInfo), the host's network facts
        (Netns), and the host directories the router image's code and libraries are mounted from."""
        facts: dict[str, Any] = {"shaping_proxies": self.proxies} if self.proxies else {}
        facts |= self.netns.host_network_facts()
        if self.wiring:
            facts["network"] = {"kind": self.wiring.kind, "bridge": self.wiring.bridge,
                                "subnet": str(self.wiring.subnet)}
        if self._shared:
            facts["shared_image_tree"] = {bind["bind"]: path for path, bind in self._shared.items()}
        return facts

    def isolation(self) -> dict[str, object]:
        """What a container may touch, for the manifest."""
        return nodedir.isolation(self.user, self._shared or {}, self.wiring is not None and self.wiring.mounts_hosts)

    # ------------------------------------------------------------ collection

    def collect_traces(self) -> None:
        """Traces are already on the host (bind mount); the rest is gathered
        by orchestrator.backends.docker.collect."""
        collect.record_containers(self._client.api, self.testbed, self.run_dir)
        self._collected = True

    def memory_usage(self) -> dict[str, int]:
        return collect.memory_usage(self._client, self.testbed)

    cpu_source = collect.CPU_SOURCE

    def cpu_seconds(self) -> dict[str, float]:
        return collect.cpu_seconds(self._client.api, self.testbed)

    def destroy(self) -> None:
        """End the host's part (the delay line, keeping its figures), bring
        home what collect_traces did not, and let go of the daemon; `cleanup`,
        called next, removes the containers, the network and the host's side."""
        self.netns.end_host_network()  # never raises: a failure is a warning, and cleanup retries
        try:
            if not self._collected:
                self.collect_traces()
        except Exception:  # noqa: BLE001 - destroy must go on
            pass
        finally:  # self.wiring stays: the final manifest names the network the run had
            self._client.close()

    @classmethod
    def cleanup(cls, testbed: str | None, store: StateStore) -> list[str]:
        """Converging removal (orchestrator.backends.docker.teardown) of what this
        state directory made for `testbed` (None: every testbed);
        TeardownIncomplete names whatever is left, Docker's objects too when
        the daemon cannot be asked and the record says they exist."""
        recorded = testbed is not None and (store.load(testbed) or {}).get("backend") == cls.name
        return docker_teardown.cleanup(Scope(testbed, current_state_dir()), recorded)
