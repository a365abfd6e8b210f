"""The Docker backend: one router per container on a private bridge network
per testbed.

Decisions (docs/docker.md says the same for users):
- Addressing: the testbed gets its own *internal* bridge network (no route to
  the outside) on a subnet we pick from 10.200.0.0/13 that collides with no
  Docker network and no host route; every node gets a static IP (IPAM
  ipv4_address), assigned in `prepare` so initial_peers can be written before
  any container starts. Peers on port 4001, the control endpoint on port 4002
  of the same IP; the host reaches both over the bridge (its gateway address).
- Shaping: tc runs on the host inside the container's network namespace
  (`nsenter -t <pid> -n tc -batch -`), so the container needs no NET_ADMIN and
  the image needs no tc. Containers run with every capability dropped,
  no-new-privileges, a read-only root filesystem, never privileged, no Docker
  socket. The kernel part is re-applied after every start and reconnect (a
  stopped container gets a new namespace, a reconnected one a new veth).
- Partitions: full = `network.disconnect`/`connect` with the same static IP;
  partial (from a set of peers) = iptables DROP rules in the node's namespace
  (also through nsenter), kept separate from tc so shaping and partitions
  never disturb each other, and re-applied after a restart.
- Files: each container mounts only its own node directory (run_dir/nodes/
  <node> at /node) and runs as an unprivileged uid that owns it
  (orchestrator.docker_nodedir); traces land on the host directly, and
  destroy/cleanup never touch run_dir.
- Labels on everything (gossip-testbed.testbed/run/node); `cleanup` works
  from labels alone, so it finds what a killed CLI left behind, and never
  removes anything without them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.config import LinkShape, NodeConfig
from orchestrator import docker_nodedir as nodedir
from orchestrator import tc
from orchestrator.backend import Backend, NodeAddress, ShapingCapabilities
from orchestrator.docker_teardown import Scope, bounded, find, summary, teardown
from orchestrator.docker_util import (
    LABEL,
    LABEL_NODE,
    LABEL_RUN,
    LABEL_STATE,
    LABEL_TESTBED,
    Progress,
    current_state_dir,
    docker_available,
    docker_client,
    say,
)
from orchestrator.errors import BackendUnavailable, InputError, TestbedError

__all__ = ["DockerBackend", "NodeResources", "docker_available"]

LISTEN_PORT = 4001
CONTROL_PORT = 4002
STOP_TIMEOUT_S = 10
DEFAULT_MEMORY = "256m"
SUBNET_POOL = ipaddress.ip_network("10.200.0.0/13")
PARALLEL = 8  # concurrent Docker API calls in the *_many helpers and cleanup
DEFAULT_PEER = "*"  # per_peer key for every destination not listed


@dataclass(frozen=True)
class NodeResources:
    """A container's limits: memory as Docker reads it ("256m", "1g"), cpus as
    a fraction of cores (0.5)."""

    memory: str | None = None
    cpus: float | None = None


def _safe(name: str) -> str:
    """Docker object names: [a-zA-Z0-9][a-zA-Z0-9_.-]*."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "_", name)


def network_name(testbed: str) -> str:
    return f"gtb-{_safe(testbed)}"


def container_name(testbed: str, node: str) -> str:
    return f"gtb-{_safe(testbed)}-{_safe(node)}"


class DockerBackend(Backend):
    name = "docker"

    def __init__(
        self,
        testbed: str,
        run_dir: Path,
        *,
        image: str | None = None,
        resources: Mapping[str, NodeResources] | None = None,
        default_resources: NodeResources = NodeResources(memory=DEFAULT_MEMORY),
        run_id: str | None = None,
        progress: Progress = None,
        entrypoint: Sequence[str] | None = None,
    ) -> None:
        super().__init__(testbed, Path(run_dir).resolve())
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", testbed):
            raise InputError(f"testbed name {testbed!r}: use letters, digits, '_', '.', '-' (max 63)")
        self.run_id = run_id or self.run_dir.name
        self.state_scope = current_state_dir()
        self.image = image
        self.progress = progress
        # What runs in the container; "$0" is the config path, "$1" the log path.
        self.entrypoint = list(entrypoint) if entrypoint else [
            "/bin/sh", "-c", 'exec python3 -m node --config "$0" >>"$1" 2>&1']
        self.resources: dict[str, NodeResources] = dict(resources or {})
        self.default_resources = default_resources
        self._client = docker_client()
        self._network: Any = None
        self._subnet: ipaddress.IPv4Network | None = None
        self._gateway: str | None = None
        self.ips: dict[str, str] = {}
        self._partitions: dict[str, set[str]] = {}
        self._caps: ShapingCapabilities | None = None
        self.commands_run: list[str] = []
        self.user = nodedir.node_user()

    # ------------------------------------------------------------ addresses

    def set_resources(self, node: str, memory: str | None = None, cpus: float | None = None) -> None:
        self.resources[node] = NodeResources(memory, cpus)

    @property
    def network_name(self) -> str:
        return network_name(self.testbed)

    @property
    def subnet(self) -> str | None:
        return str(self._subnet) if self._subnet else None

    @property
    def gateway(self) -> str | None:
        """The host's address on the testbed network."""
        return self._gateway

    def labels(self, node: str | None = None) -> dict[str, str]:
        labels = {LABEL: "1", LABEL_TESTBED: self.testbed, LABEL_RUN: self.run_id,
                  LABEL_STATE: self.state_scope}
        if node is not None:
            labels[LABEL_NODE] = node
        return labels

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
            from orchestrator.image import ensure_image  # noqa: PLC0415

            self.image = ensure_image(progress=self.progress)
        self._create_network(len(nodes))
        for node in nodes:
            self._allocate(node)
        for sub in ("configs", "traces", "node-logs"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        return {node: self.address(node) for node in nodes}

    def address(self, node: str) -> NodeAddress:
        ip = self.ips.get(node) or self._allocate(node)
        return NodeAddress(host=ip, port=LISTEN_PORT, control_host=ip, control_port=CONTROL_PORT)

    def _allocate(self, node: str) -> str:
        if node in self.ips:
            return self.ips[node]
        if self._subnet is None:
            raise TestbedError("DockerBackend.prepare must run before nodes get addresses")
        used = set(self.ips.values()) | {self._gateway}
        for host in self._subnet.hosts():
            if str(host) not in used:
                self.ips[node] = str(host)
                return str(host)
        raise TestbedError(f"subnet {self._subnet} of testbed {self.testbed!r} is full")

    def _create_network(self, count: int) -> None:
        import docker.errors  # noqa: PLC0415
        from docker.types import IPAMConfig, IPAMPool  # noqa: PLC0415

        prefix = min(24, 32 - max(2, (count + 3 - 1).bit_length()))
        tried: list[str] = []
        for subnet in _candidate_subnets(self._client, prefix, self.testbed):
            gateway = str(next(subnet.hosts()))
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=gateway)])
            try:
                self._network = self._client.networks.create(
                    self.network_name, driver="bridge", internal=True, ipam=ipam,
                    labels=self.labels(), check_duplicate=True,
                )
            except docker.errors.APIError as exc:
                text = str(exc)
                if "overlap" in text.lower():  # another testbed took it meanwhile
                    tried.append(f"{subnet}: {exc.explanation}")
                    continue
                raise TestbedError(f"cannot create network {self.network_name}: {exc.explanation or exc}") from exc
            self._subnet, self._gateway = subnet, gateway
            say(self.progress, f"network {self.network_name} on {subnet}")
            return
        raise TestbedError(
            f"no free /{prefix} left in {SUBNET_POOL} for testbed {self.testbed!r}: " + "; ".join(tried[-5:])
        )

    # ------------------------------------------------------------ containers

    def start(self, config: NodeConfig) -> None:
        node = config.name
        nodedir.prepare(self.run_dir, config, self.user)
        self._attach()
        if node not in self.ips and config.listen_host not in ("", "0.0.0.0"):
            self.ips[node] = config.listen_host
        container = self._container_or_none(node)
        if container is None:
            container = self._create(node)
        else:
            if container.status in ("running", "paused", "restarting"):
                raise TestbedError(f"node {node} is already running")
            if not self._attached(container):  # stopped while disconnected: back on the network
                self._network_obj().connect(container, ipv4_address=self.ips[node])
        container.start()
        # A (re)started node has a fresh network namespace: no partition rules
        # (the controller treats a restarted node as not isolated), and its
        # kernel shaping is applied again.
        self._partitions.pop(node, None)
        self._apply_tc(node)

    def start_many(self, configs: Iterable[NodeConfig]) -> None:
        """`start` for many nodes, a few Docker calls at a time."""
        _parallel(self.start, list(configs))

    def _create(self, node: str) -> Any:
        if self._network is None or self.image is None or node not in self.ips:
            raise TestbedError("DockerBackend.prepare must run before start")
        api = self._client.api
        res = self.resources.get(node, self.default_resources)
        cfg, log = nodedir.inside(nodedir.CONFIG), nodedir.inside(nodedir.LOG)
        host_config = api.create_host_config(
            binds={str(nodedir.node_dir(self.run_dir, node)): {"bind": nodedir.MOUNT, "mode": "rw"}},
            mem_limit=res.memory or self.default_resources.memory,
            nano_cpus=int((res.cpus or self.default_resources.cpus or 0) * 1e9) or None,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            init=True,  # docker-init forwards SIGTERM to the router
            read_only=True,
            tmpfs={"/tmp": "size=16m"},
            pids_limit=512,
            network_mode=self.network_name,
            log_config={"type": "json-file", "config": {"max-size": "1m"}},
        )
        networking = api.create_networking_config({
            self.network_name: api.create_endpoint_config(ipv4_address=self.ips[node]),
        })
        created = api.create_container(
            self.image,
            name=container_name(self.testbed, node),
            entrypoint=self.entrypoint,
            command=[cfg, log],
            labels=self.labels(node),
            host_config=host_config,
            networking_config=networking,
            user=self.user.docker_user,
            hostname=_safe(node)[:63],
            environment={"TESTBED_NODE": node},
        )
        return self._client.containers.get(created["Id"])

    def _container_or_none(self, node: str) -> Any:
        import docker.errors  # noqa: PLC0415

        try:
            container = self._client.containers.get(container_name(self.testbed, node))
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

    def kill(self, node: str) -> None:
        import docker.errors  # noqa: PLC0415

        container = self._container(node)
        try:
            container.kill(signal="SIGKILL")
        except docker.errors.APIError as exc:
            if "is not running" not in str(exc):
                raise
        container.wait(condition="not-running", timeout=30)

    def pause(self, node: str) -> None:
        self._container(node).pause()

    def resume(self, node: str) -> None:
        self._container(node).unpause()

    def is_running(self, node: str) -> bool:
        container = self._container_or_none(node)
        if container is None:
            return False
        return container.status in ("running", "paused", "restarting")

    def status(self, node: str) -> str:
        container = self._container_or_none(node)
        return "absent" if container is None else container.status

    # ------------------------------------------------------------ partitions

    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        """None/empty: leave the Docker network (every connection dies, as a
        cable pulled); peers: drop packets to and from them (iptables in the
        node's namespace, or the node's own `isolate` without root)."""
        self._attach()
        container = self._container(node)
        if not peers:
            if self._attached(container):
                self._network_obj().disconnect(container, force=True)
            return
        cut = set(peers) - self._partitions.get(node, set())
        self._partitions.setdefault(node, set()).update(cut)
        if not cut or container.status not in ("running", "paused"):
            return
        if self._can_nsenter():
            self._nsenter(node, tc.partition_commands([self.ips[p] for p in sorted(cut)], add=True))
        else:
            self._control(node, "isolate", peers=sorted(cut))

    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self._attach()
        container = self._container(node)
        if not peers:
            if not self._attached(container):
                self._network_obj().connect(container, ipv4_address=self.ips[node])
                self._apply_tc(node)  # a new veth: shape it again
            healed = self._partitions.pop(node, set())
        else:
            healed = set(peers)
            self._partitions[node] = self._partitions.get(node, set()) - healed
        if not healed or container.status not in ("running", "paused"):
            return
        if self._can_nsenter():
            # -D of a rule that is not there fails harmlessly (another process
            # may have made the partition)
            self._nsenter(node, tc.partition_commands(
                [self.ips[p] for p in sorted(healed) if p in self.ips], add=False), check=False)
        else:
            self._control(node, "rejoin", peers=sorted(healed))

    def _attached(self, container: Any) -> bool:
        return self.network_name in (container.attrs.get("NetworkSettings", {}).get("Networks") or {})

    def _control(self, node: str, cmd: str, **args: Any) -> dict[str, Any]:
        from node.runtime.client import ControlClient, ControlError  # noqa: PLC0415

        cfg = NodeConfig.load(nodedir.node_dir(self.run_dir, node) / nodedir.CONFIG)
        try:
            return ControlClient(cfg.control_host, cfg.control_port, cfg.token).call(cmd, **args)
        except ControlError as exc:
            raise TestbedError(f"{node}: {cmd} through the control endpoint failed: {exc}") from None

    def _network_obj(self) -> Any:
        self._attach()
        if self._network is None:
            raise TestbedError(f"testbed {self.testbed!r} has no Docker network (not up?)")
        return self._network

    def _attach(self) -> None:
        """Recover the network, subnet, addresses and image from Docker when
        this object did not create them (a later CLI process: churn, down)."""
        if self._network is not None:
            return
        import docker.errors  # noqa: PLC0415

        try:
            network = self._client.networks.get(self.network_name)
        except docker.errors.NotFound:
            return
        if (network.attrs.get("Labels") or {}).get(LABEL_TESTBED) != self.testbed:
            raise TestbedError(f"network {self.network_name} exists but is not testbed {self.testbed!r}'s")
        self._network = network
        pools = (network.attrs.get("IPAM") or {}).get("Config") or []
        if pools:
            self._subnet = ipaddress.ip_network(pools[0]["Subnet"])
            self._gateway = pools[0].get("Gateway") or str(next(self._subnet.hosts()))
        for container in self._client.containers.list(all=True, filters=Scope(self.testbed, None).label_filter()):
            node = container.labels.get(LABEL_NODE)
            endpoint = (container.attrs.get("NetworkSettings", {}).get("Networks") or {}).get(self.network_name)
            ipam = (endpoint or {}).get("IPAMConfig") or {}
            if node and ipam.get("IPv4Address"):
                self.ips.setdefault(node, ipam["IPv4Address"])
            elif node:  # disconnected: its config knows its address
                cfg = nodedir.node_dir(self.run_dir, node) / nodedir.CONFIG
                if cfg.exists():
                    self.ips.setdefault(node, NodeConfig.load(cfg).listen_host)
            if self.image is None:
                self.image = container.attrs.get("Config", {}).get("Image")

    # ------------------------------------------------------------ shaping

    def shaping_capabilities(self) -> ShapingCapabilities:
        if self._caps is None:
            self._caps = _capabilities()
        return self._caps

    def apply_kernel_shaping(
        self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None
    ) -> list[str]:
        """Shape `node`'s egress in its namespace. `per_peer` is keyed by peer
        name ("*" for every other destination); without netem only the rates
        are applied (delay/jitter/loss are in the node's NodeConfig.shaping).
        What was asked is kept in run_dir/configs/<node>.kernel-shaping.json,
        so a restart or reconnect (from any process) applies it again."""
        self._attach()
        self._shaping_file(node).write_text(json.dumps({
            "per_peer": {p: dataclasses.asdict(s) for p, s in sorted(per_peer.items())},
            "uplink_bps": uplink_bps,
            "path": self.shaping_capabilities().path,
        }, indent=1) + "\n")
        return self._apply_tc(node)

    def _shaping_file(self, node: str) -> Path:
        return self.run_dir / "configs" / f"{node}.kernel-shaping.json"

    def _apply_tc(self, node: str) -> list[str]:
        path = self._shaping_file(node)
        if not path.exists():
            return []
        saved = json.loads(path.read_text())
        per_peer = {p: LinkShape(**s) for p, s in saved.get("per_peer", {}).items()}
        uplink = saved.get("uplink_bps")
        caps = self.shaping_capabilities()
        if not caps.kernel_rate:
            return []
        unknown = sorted(p for p in per_peer if p != DEFAULT_PEER and p not in self.ips)
        if unknown:
            raise TestbedError(f"{node}: kernel shaping names peers with no address: {', '.join(unknown)}")
        per_dest = {self.ips[p]: s for p, s in per_peer.items() if p != DEFAULT_PEER}
        cmds = tc.egress_commands(
            per_dest, uplink, default=per_peer.get(DEFAULT_PEER), exempt=[self._gateway] if self._gateway else [],
            netem=caps.kernel_delay, dev="eth0",
        )
        if not self._netns_ready(node):
            return [shlex.join(c) for c in cmds]
        self._nsenter(node, tc.clear_commands("eth0"), check=False)
        if cmds:
            self._tc_batch(node, cmds)
        return [shlex.join(c) for c in cmds]

    def qdisc_show(self, node: str) -> str:
        """`tc qdisc show` + `tc class show` + `tc filter show` in the node's namespace."""
        out = []
        for what in ("qdisc", "class", "filter"):
            out.append(self._nsenter(node, [["tc", what, "show", "dev", "eth0"]], capture=True))
        return "\n".join(out)

    def _pid(self, node: str) -> int:
        container = self._container(node)
        pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        if not pid:
            raise TestbedError(f"node {node} is not running (no network namespace to shape)")
        return pid

    def _netns_ready(self, node: str) -> bool:
        container = self._container_or_none(node)
        return (container is not None and container.status in ("running", "paused")
                and self._attached(container))

    @staticmethod
    def _can_nsenter() -> bool:
        return os.geteuid() == 0 and shutil.which("nsenter") is not None

    def _nsenter_prefix(self, node: str) -> list[str]:
        if not self._can_nsenter():
            raise BackendUnavailable(
                "kernel shaping and partial partitions enter the container's network namespace "
                "with nsenter from the host, which needs root"
            )
        return ["nsenter", "-t", str(self._pid(node)), "-n", "--"]

    def _nsenter(self, node: str, cmds: list[list[str]], check: bool = True, capture: bool = False) -> str:
        prefix = self._nsenter_prefix(node)
        out: list[str] = []
        for argv in cmds:
            result = subprocess.run(prefix + argv, capture_output=True, text=True, timeout=30)
            self.commands_run.append(f"[{node}] {shlex.join(argv)}")
            if check and result.returncode != 0:
                raise TestbedError(f"[{node}] {shlex.join(argv)} failed: {result.stderr.strip()}")
            out.append(result.stdout)
        return "".join(out)

    def _tc_batch(self, node: str, cmds: list[list[str]]) -> None:
        """All of a node's tc commands through one `tc -batch -`."""
        script = "".join(shlex.join(c[1:]) + "\n" for c in cmds)
        argv = self._nsenter_prefix(node) + ["tc", "-batch", "-"]
        result = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=60)
        self.commands_run.extend(f"[{node}] {shlex.join(c)}" for c in cmds)
        if result.returncode != 0:
            raise TestbedError(f"[{node}] tc -batch failed: {result.stderr.strip()[:2000]}")

    def isolation(self) -> dict[str, object]:
        """What a container may touch, for the manifest."""
        return nodedir.isolation(self.user)

    # ------------------------------------------------------------ collection

    def collect_traces(self) -> None:
        """Traces are already on the host (bind mount). Record each container's
        final state (exit code, OOM) next to its log."""
        for container in self._client.containers.list(all=True, filters={"label": f"{LABEL_TESTBED}={self.testbed}"}):
            node = container.labels.get(LABEL_NODE)
            if not node:
                continue
            state = container.attrs.get("State", {})
            keep = {k: state.get(k) for k in ("Status", "ExitCode", "OOMKilled", "StartedAt", "FinishedAt", "Error")}
            path = self.run_dir / "node-logs" / f"{node}.docker.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(keep, indent=1) + "\n")

    def memory_usage(self) -> dict[str, int]:
        """Bytes of memory each running container uses (cgroup v1 usage)."""
        out: dict[str, int] = {}
        for container in self._client.containers.list(filters={"label": f"{LABEL_TESTBED}={self.testbed}"}):
            node = container.labels.get(LABEL_NODE)
            usage = _cgroup_memory(container.id)
            if usage is None:
                stats = container.stats(stream=False)
                usage = int(stats.get("memory_stats", {}).get("usage", 0))
            if node:
                out[node] = usage
        return out

    def destroy(self) -> None:
        try:
            self.collect_traces()
        except Exception:  # noqa: BLE001 - destroy must go on
            pass
        try:
            self.cleanup(self.testbed)
        finally:
            self._network = None
            self._client.close()

    @classmethod
    def cleanup(cls, testbed: str | None) -> list[str]:
        """Converging removal (orchestrator.docker_teardown) of what this
        state directory made for `testbed` (None: every testbed);
        TeardownIncomplete names whatever is left."""
        client = docker_client()
        try:
            return teardown(client, Scope(testbed, current_state_dir())).raise_if_incomplete()
        finally:
            client.close()


# ---------------------------------------------------------------- helpers


def _parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return bounded(fn, items, PARALLEL)


def _host_routes() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination the host routes (not the default route)."""
    nets: list[ipaddress.IPv4Network] = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return nets
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        dest = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
        mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
        if int(mask) == 0:
            continue
        nets.append(ipaddress.IPv4Network(f"{dest}/{mask}", strict=False))
    return nets


def _docker_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    nets: list[ipaddress.IPv4Network] = []
    for network in client.networks.list():
        for pool in ((network.attrs.get("IPAM") or {}).get("Config") or []):
            with contextlib.suppress(ValueError):
                net = ipaddress.ip_network(pool.get("Subnet", ""), strict=False)
                if isinstance(net, ipaddress.IPv4Network):
                    nets.append(net)
    return nets


def _candidate_subnets(client: Any, prefix: int, testbed: str) -> Iterable[ipaddress.IPv4Network]:
    """Free /prefix blocks of SUBNET_POOL, starting at a place fixed by the
    testbed's name so that two testbeds starting together rarely race."""
    blocks = list(SUBNET_POOL.subnets(new_prefix=prefix))
    start = zlib.crc32(testbed.encode()) % len(blocks)
    taken = _docker_subnets(client) + _host_routes()
    for i in range(len(blocks)):
        block = blocks[(start + i) % len(blocks)]
        if not any(block.overlaps(t) for t in taken):
            yield block


def _cgroup_memory(container_id: str) -> int | None:
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


def _capabilities() -> ShapingCapabilities:
    if os.geteuid() != 0 or not shutil.which("nsenter") or not shutil.which("tc"):
        return ShapingCapabilities(
            kernel_delay=False, kernel_rate=False, path="userspace",
            detail="kernel shaping needs root, nsenter and tc on the host (tc runs in each "
                   "container's network namespace); all shaping is in the node's user-space shaper",
        )
    probe = tc.probe_kernel()
    if probe.htb is False:
        return ShapingCapabilities(False, False, "userspace",
                                   f"htb missing ({probe.detail}); all shaping in the node")
    if probe.netem:
        return ShapingCapabilities(True, True, "netem",
                                   f"netem+htb in each container's netns via nsenter ({probe.detail})")
    return ShapingCapabilities(
        kernel_delay=False, kernel_rate=True, path="userspace+htb",
        detail=f"sch_netem missing ({probe.detail}); delay/jitter/loss in the node's user-space "
               "shaper, rate with htb/tbf in each container's netns via nsenter",
    )
