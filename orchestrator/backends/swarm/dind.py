"""Docker-in-Docker swarm nodes: several Docker engines on one machine, so
the swarm backend's multi-host paths (image distribution, tasks and churn on
other engines, overlay between engines, traces from other nodes' volumes, a
node lost) run for real where there is only one host.

Each node is a container of gossip-testbed/dind:<hash> (the project's Debian
base plus Debian's docker.io, built here: nothing is pulled) running its own
dockerd, reachable from the host at tcp://<its address>:2375, with its
/var/lib/docker on a volume. The nodes share one bridge network of their own
and form a swarm whose manager is the first node, so the host's engine (shared
with other users) never joins a swarm.

Why not `--privileged`: on an engine whose own bounding set lacks a
capability (here: CAP_SYS_RESOURCE), `--privileged` asks runc for every
capability and the start fails with "unable to apply caps: operation not
permitted". A node therefore gets every capability the engine has
(`--cap-add ALL --cap-drop SYS_RESOURCE`), no seccomp/AppArmor profile, no
masked or read-only /proc paths, every device in its device cgroup, and its
entry remounts /sys and its cgroup hierarchies read-write (Docker mounts them
read-only into unprivileged containers; the nested dockerd creates its
containers' cgroups there). The storage driver is vfs: it works on any
backing filesystem.

Everything created carries LABEL_DIND=<lab>, not the testbed's own labels, so
`testbed down --all`/`gc` of other testbeds never removes a lab's engines;
`remove` does, from the label alone.
"""

from __future__ import annotations

import hashlib
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.images.base import build_context, image_or_none, local_base
from orchestrator.progress import Reporter

DIND_REPO = "gossip-testbed/dind"
LABEL_DIND = "gossip-testbed.dind"  # the lab's name, on its containers, volumes and network
ENGINE_PORT = 2375
# Debian's packages: dockerd, containerd, runc, tini (docker.io), iptables for
# the nested engine's bridges, iproute2 comes with the base.
PACKAGES = ("docker.io", "iptables", "ca-certificates")
CAPABILITIES_MISSING = ("SYS_RESOURCE",)  # not in this engine's bounding set (see module doc)
DOCKERFILE = """\
FROM {base}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages} \\
 && rm -rf /var/lib/apt/lists/*
COPY entry.sh /usr/local/bin/dind-entry
ENTRYPOINT ["/bin/sh", "/usr/local/bin/dind-entry"]
"""
# /sys and the cgroup hierarchies come read-only into an unprivileged
# container; a bind mount is remounted read-write with `remount,bind,rw`.
ENTRY = f"""\
set -e
mount -o remount,rw /sys
for d in /sys/fs/cgroup /sys/fs/cgroup/*; do
  mount -o remount,bind,rw "$d" 2>/dev/null || mount -o remount,rw "$d"
done
exec dockerd --storage-driver=vfs -H unix:///var/run/docker.sock -H tcp://0.0.0.0:{ENGINE_PORT} "$@"
"""
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DindNode:
    """One engine of a lab: its container on the host, the hostname the swarm
    knows it by, and where its engine answers."""

    container: str
    hostname: str
    address: str

    @property
    def url(self) -> str:
        return f"tcp://{self.address}:{ENGINE_PORT}"


def dind_image_tag(base_id: str) -> str:
    key = hashlib.sha256((DOCKERFILE + ENTRY + base_id + " ".join(PACKAGES)).encode()).hexdigest()[:12]
    return f"{DIND_REPO}:{key}"


def build_dind_image(client: Any, reporter: Reporter) -> str:
    """The tag of an up-to-date node image, built FROM the router image's base
    (already here: `testbed image build` made it) when it is missing."""
    base = local_base(client, "auto")
    if base is None:
        raise BackendUnavailable("no base image here to build the Docker-in-Docker node on: "
                                 "run `testbed image build` first")
    base_ref, base_id = base
    tag = dind_image_tag(base_id)
    if image_or_none(client, tag) is not None:
        return tag
    reporter.note(f"building {tag} from {base_ref} (apt-get install {' '.join(PACKAGES)})")
    with tempfile.TemporaryDirectory(prefix="dind-") as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base_id, packages=" ".join(PACKAGES)))
        (ctx / "entry.sh").write_text(ENTRY)
        build_context(client, ctx, tag, reporter)
    return tag


def container_options(lab: str, index: int, image: str) -> dict[str, Any]:
    """docker-py `api.create_container` keywords for node `index` of `lab`
    (its host config is `host_config`)."""
    name = f"{lab}-{index}"
    return dict(image=image, name=name, hostname=name, labels={LABEL_DIND: lab})


def host_config(lab: str, index: int) -> dict[str, Any]:
    """The node's HostConfig as the engine API takes it. MaskedPaths and
    ReadonlyPaths empty is what the CLI's `--security-opt
    systempaths=unconfined` sends (the engine itself refuses that string):
    the nested dockerd writes /proc/sys (ip_forward, bridge settings)."""
    return {
        "NetworkMode": lab,
        "CapAdd": ["ALL"], "CapDrop": list(CAPABILITIES_MISSING),
        "SecurityOpt": ["seccomp=unconfined", "apparmor=unconfined"],
        "MaskedPaths": [], "ReadonlyPaths": [],
        "DeviceCgroupRules": ["a *:* rwm"],
        "Tmpfs": {"/run": "", "/var/run": ""},
        "Binds": [f"{lab}-{index}:/var/lib/docker:rw"],
    }


def start_nodes(client: Any, lab: str, count: int, image: str) -> list[DindNode]:
    """`count` engines on the lab's own bridge network, each answering."""
    import docker.errors  # noqa: PLC0415

    if client.networks.list(names=[lab]):
        raise TestbedError(f"a network {lab} exists already: remove the lab first (remove({lab!r}))")
    client.networks.create(lab, driver="bridge", labels={LABEL_DIND: lab})
    nodes = []
    for index in range(1, count + 1):
        opts = container_options(lab, index, image)
        client.volumes.create(opts["name"], labels={LABEL_DIND: lab})
        try:
            created = client.api.create_container(**opts, host_config=host_config(lab, index))
            client.api.start(created["Id"])
        except docker.errors.APIError as exc:
            raise TestbedError(f"the Docker-in-Docker node {opts['name']} did not start: {exc}") from exc
        container = client.containers.get(created["Id"])
        address = container.attrs["NetworkSettings"]["Networks"][lab]["IPAddress"]
        nodes.append(DindNode(opts["name"], opts["hostname"], address))
    for node in nodes:
        wait_engine(client, node).close()
    return nodes


def wait_engine(client: Any, node: DindNode, timeout: float = READY_TIMEOUT_S) -> Any:
    """A client of the node's engine once it answers; TestbedError with the
    end of its log when it has not within `timeout`."""
    import docker  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while True:
        try:  # the client asks the engine's API version as it is made
            return docker.DockerClient(base_url=node.url, timeout=120)
        except docker.errors.DockerException:  # connection refused until dockerd listens
            pass
        container = client.containers.get(node.container)
        if container.status != "running" or time.monotonic() > deadline:
            tail = container.logs(tail=15).decode(errors="replace")
            raise TestbedError(f"the engine of {node.container} did not answer at {node.url} "
                               f"({container.status}):\n{tail}")
        time.sleep(0.5)


def form_swarm(nodes: list[DindNode]) -> None:
    """The first node inits a swarm advertising its lab address; the others
    join it as workers."""
    import docker  # noqa: PLC0415

    manager = docker.DockerClient(base_url=nodes[0].url, timeout=120)
    try:
        manager.swarm.init(advertise_addr=nodes[0].address, listen_addr=f"{nodes[0].address}:2377")
        token = manager.swarm.attrs["JoinTokens"]["Worker"]
    finally:
        manager.close()
    for node in nodes[1:]:
        worker = docker.DockerClient(base_url=node.url, timeout=120)
        try:
            worker.swarm.join(remote_addrs=[f"{nodes[0].address}:2377"], join_token=token,
                              advertise_addr=node.address, listen_addr=f"{node.address}:2377")
        finally:
            worker.close()


def engines_env(nodes: list[DindNode]) -> str:
    """TESTBED_SWARM_ENGINES naming every node's engine."""
    return ",".join(f"{n.hostname}={n.url}" for n in nodes)


def stop_engine(client: Any, node: DindNode) -> None:
    """The node is lost: its container (its engine and every task on it)
    stops, as a host that goes down."""
    client.containers.get(node.container).stop(timeout=5)


def remove(client: Any, lab: str) -> list[str]:
    """Remove the lab's containers, volumes and network (by label alone);
    returns what was removed."""
    import docker.errors  # noqa: PLC0415

    removed = []
    selector = {"label": f"{LABEL_DIND}={lab}"}
    for container in client.containers.list(all=True, filters=selector):
        container.remove(force=True, v=True)
        removed.append(f"container {container.name}")
    for volume in client.volumes.list(filters=selector):
        try:
            volume.remove(force=True)
            removed.append(f"volume {volume.name}")
        except docker.errors.NotFound:
            continue
    for network in client.networks.list(filters=selector):
        network.remove()
        removed.append(f"network {network.name}")
    return removed


def describe(nodes: list[DindNode]) -> str:
    """Shell lines that point a CLI at the lab (the manager and every engine)."""
    return (f"export DOCKER_HOST={shlex.quote(nodes[0].url)}\n"
            f"export TESTBED_SWARM_ENGINES={shlex.quote(engines_env(nodes))}")
