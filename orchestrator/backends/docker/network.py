"""The Docker network of a testbed: an internal bridge on a subnet picked
from 10.200.0.0/13 that collides with no Docker network and no host route,
starting at a place fixed by the testbed's name so that two testbeds
starting together rarely race for the same block."""

from __future__ import annotations

import contextlib
import ipaddress
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.errors import TestbedError

SUBNET_POOL = ipaddress.ip_network("10.200.0.0/13")


def create_network(
    client: Any, name: str, count: int, testbed: str, labels: dict[str, str]
) -> tuple[Any, ipaddress.IPv4Network, str]:
    """Create the network for `count` nodes: (network, subnet, gateway)."""
    import docker.errors  # noqa: PLC0415 - the Docker SDK only where Docker is used
    from docker.types import IPAMConfig, IPAMPool  # noqa: PLC0415

    prefix = subnet_prefix(count)
    tried: list[str] = []
    for subnet in candidate_subnets(client, prefix, testbed):
        gateway = str(next(subnet.hosts()))
        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=gateway)])
        try:
            network = client.networks.create(
                name, driver="bridge", internal=True, ipam=ipam, labels=labels, check_duplicate=True,
            )
        except docker.errors.APIError as exc:
            if "overlap" in str(exc).lower():  # another testbed took it meanwhile
                tried.append(f"{subnet}: {exc.explanation}")
                continue
            raise TestbedError(f"cannot create network {name}: {exc.explanation or exc}") from exc
        return network, subnet, gateway
    raise TestbedError(f"no free /{prefix} left in {SUBNET_POOL} for testbed {testbed!r}: " + "; ".join(tried[-5:]))


def subnet_prefix(count: int) -> int:
    """The longest prefix with room for `count` nodes, the gateway, the
    network and broadcast addresses (a /24 at least)."""
    return min(24, 32 - max(2, (count + 3 - 1).bit_length()))


def host_routes() -> list[ipaddress.IPv4Network]:
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


def docker_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    nets: list[ipaddress.IPv4Network] = []
    for network in client.networks.list():
        for pool in ((network.attrs.get("IPAM") or {}).get("Config") or []):
            with contextlib.suppress(ValueError):
                net = ipaddress.ip_network(pool.get("Subnet", ""), strict=False)
                if isinstance(net, ipaddress.IPv4Network):
                    nets.append(net)
    return nets


def candidate_subnets(client: Any, prefix: int, testbed: str) -> Iterable[ipaddress.IPv4Network]:
    """Free /prefix blocks of SUBNET_POOL, starting at a place fixed by the
    testbed's name so that two testbeds starting together rarely race."""
    blocks = list(SUBNET_POOL.subnets(new_prefix=prefix))
    start = zlib.crc32(testbed.encode()) % len(blocks)
    taken = docker_subnets(client) + host_routes()
    for i in range(len(blocks)):
        block = blocks[(start + i) % len(blocks)]
        if not any(block.overlaps(t) for t in taken):
            yield block
