"""How a Docker testbed's containers reach each other: the testbed's own
bridge (orchestrator/backends/docker/own_bridge.py) where the host gives root, else a Docker
network (orchestrator/backends/docker/network.py). The backend asks one of these two
and never which it has.

Why two: an own bridge lets 250 containers stop and go at once (no Docker
endpoint to release one at a time), but needs root on the host; a user
without root keeps the Docker network, as before.

Why an own bridge's containers have networking disabled in Docker rather than
network mode "none": "none" still gives each container a libnetwork sandbox
with an endpoint on Docker's "none" network, and Docker 20.10 deadlocks when
many such endpoints are released at once (moby/moby#46661: reproduced here
with 250 bare `sleep` containers on "none" stopped together). With
networking disabled Docker makes no sandbox at all: runc gives the container
a new network namespace with loopback only, which the host wires; starting
250 bare containers took 17 s instead of 31 s (no sandbox, no prestart hook
per container). Docker then writes no /etc/hosts and a /etc/resolv.conf
with no nameserver, so the testbed's (docker_nodedir.write_hosts) are
mounted instead.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.backends.docker import own_bridge
from orchestrator.backends.docker.network import candidate_subnets, create_network, subnet_prefix
from orchestrator.dockerapi.names import LABEL_TESTBED
from orchestrator.errors import BackendUnavailable, InputError, TestbedError

OWN_BRIDGE = "own-bridge"
DOCKER_NETWORK = "docker-network"
KINDS = (OWN_BRIDGE, DOCKER_NETWORK)
ENV = "TESTBED_DOCKER_NETWORK"  # a kind, to choose it for every docker testbed of this process


@dataclass(frozen=True)
class Placement:
    """How `create_container` puts a container on the testbed's network."""

    network_mode: str
    endpoint: dict[str, Any] | None = None  # the container's Docker endpoint options, on a Docker network
    network_disabled: bool = False  # no Docker sandbox: a namespace with loopback only, for the host to wire
    sysctls: dict[str, str] = field(default_factory=dict)


def shares_namespace(container: Any) -> bool:
    """Whether a container runs in another's network namespace (an identity
    packed on a host, `identities_per_host`): its host's wiring is its own."""
    return str((container.attrs.get("HostConfig") or {}).get("NetworkMode") or "").startswith("container:")


class Wiring(Protocol):
    kind: str
    subnet: ipaddress.IPv4Network
    gateway: str  # the host's address on the testbed's network
    bridge: str  # the Linux bridge its frames cross (the delay line's)
    network: str | None  # the Docker network containers hold endpoints on (None: none)
    mounts_hosts: bool  # containers get the testbed's /etc/hosts and /etc/resolv.conf (Docker writes them none)

    def placement(self, ip: str, alias: str) -> Placement:
        """Where a container with address `ip`, name `alias` goes."""

    def started(self, node: str, container: Any, ip: str) -> None:
        """A container just started (a new network namespace): put it on the network."""

    def cut(self, node: str, container: Any) -> None:
        """Take a container off the network (every connection dies, as a cable pulled)."""

    def join(self, node: str, container: Any, ip: str) -> None:
        """Put a container that was cut off back on with the same address."""

    def attached(self, node: str, container: Any) -> bool:
        """Whether the container is on the network now."""

    def describe(self) -> str:
        """One line for the user."""


class DockerNetwork:
    """An internal Docker bridge network (IPAM static addresses, aliases)."""

    kind = DOCKER_NETWORK
    mounts_hosts = False

    def __init__(self, network: Any, subnet: ipaddress.IPv4Network, gateway: str) -> None:
        self.obj, self.subnet, self.gateway = network, subnet, gateway
        self.network: str | None = network.name
        self.bridge = (network.attrs.get("Options") or {}).get("com.docker.network.bridge.name") \
            or f"br-{network.id[:12]}"

    def placement(self, ip: str, alias: str) -> Placement:
        return Placement(self.obj.name, endpoint={"ipv4_address": ip, "aliases": [alias]})

    def started(self, node: str, container: Any, ip: str) -> None:
        return None  # Docker wired it

    def cut(self, node: str, container: Any) -> None:
        if self.attached(node, container):
            self.obj.disconnect(container, force=True)

    def join(self, node: str, container: Any, ip: str) -> None:
        self.obj.connect(container, ipv4_address=ip)

    def attached(self, node: str, container: Any) -> bool:
        return self.network in (container.attrs.get("NetworkSettings", {}).get("Networks") or {})

    def describe(self) -> str:
        return f"network {self.network} on {self.subnet}"


class OwnBridge:
    """The testbed's own Linux bridge; containers on network mode none."""

    kind = OWN_BRIDGE
    network = None
    mounts_hosts = True

    def __init__(self, bridge: own_bridge.Bridge) -> None:
        self.own = bridge
        self.subnet, self.gateway, self.bridge = bridge.subnet, bridge.gateway, bridge.name

    def placement(self, ip: str, alias: str) -> Placement:
        # nonlocal bind: a router binds its address before `started` gives eth0 that address
        return Placement("none", network_disabled=True,
                         sysctls={"net.ipv4.ip_nonlocal_bind": "1", "net.ipv6.conf.all.disable_ipv6": "1"})

    def started(self, node: str, container: Any, ip: str) -> None:
        container.reload()
        pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        if not pid:
            raise TestbedError(f"node {node} exited as it started: no network namespace to wire")
        own_bridge.wire(self.own, self._veth(node), pid, ip)

    def cut(self, node: str, container: Any) -> None:
        own_bridge.unwire(self._veth(node))

    def join(self, node: str, container: Any, ip: str) -> None:
        if container.status in ("running", "paused"):
            self.started(node, container, ip)

    def attached(self, node: str, container: Any) -> bool:
        return own_bridge.wired(self._veth(node))

    def describe(self) -> str:
        return f"bridge {self.bridge} on {self.subnet}"

    def _veth(self, node: str) -> str:
        return own_bridge.veth_name(self.own.tag, node)


def create(kind: str, client: Any, name: str, count: int, testbed: str, tag: str, labels: dict[str, str]
           ) -> Wiring:
    """A new network of `kind` for `count` containers."""
    if kind == OWN_BRIDGE:
        prefix = subnet_prefix(count)
        bridge = own_bridge.create(tag, lambda: candidate_subnets(client, prefix, testbed))
        return OwnBridge(bridge)
    network, subnet, gateway = create_network(client, name, count, testbed, labels)
    return DockerNetwork(network, subnet, gateway)


def find(client: Any, name: str, testbed: str, tag: str) -> Wiring | None:
    """The network a testbed already has (a later CLI process), or None."""
    import docker.errors  # noqa: PLC0415 - the Docker SDK only where Docker is used

    bridge = own_bridge.lookup(tag)
    if bridge is not None:
        return OwnBridge(bridge)
    try:
        network = client.networks.get(name)
    except docker.errors.NotFound:
        return None
    if (network.attrs.get("Labels") or {}).get(LABEL_TESTBED) != testbed:
        raise TestbedError(f"network {name} exists but is not testbed {testbed!r}'s")
    pools = (network.attrs.get("IPAM") or {}).get("Config") or []
    if not pools:
        raise TestbedError(f"network {name} has no subnet")
    subnet = ipaddress.IPv4Network(pools[0]["Subnet"])
    return DockerNetwork(network, subnet, pools[0].get("Gateway") or str(next(subnet.hosts())))


def chosen(kind: str | None) -> str:
    """The kind asked for, else $TESTBED_DOCKER_NETWORK, else an own bridge
    where the host can give one, else a Docker network; InputError for
    anything else."""
    where = "the docker backend's network option"
    if kind is None and os.environ.get(ENV):
        kind, where = os.environ[ENV], f"${ENV}"
    if kind is None:
        return OWN_BRIDGE if own_bridge.unavailable() is None else DOCKER_NETWORK
    if kind not in KINDS:
        raise InputError(f"{where}: {kind!r} is not one of {', '.join(KINDS)}")
    if kind == OWN_BRIDGE and own_bridge.unavailable():
        raise BackendUnavailable(own_bridge.unavailable() or "")
    return kind
