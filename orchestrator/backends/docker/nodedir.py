"""Each container sees only its own node directory, owned by the unprivileged
uid its router runs as.

Why: with the whole run directory mounted, any node could overwrite or delete
another node's trace, and the router ran as root for no reason. Now:

    run_dir/nodes/<node>/          0700, owned by the node's uid; mounted at /node
      config.json                  the NodeConfig as the router sees it (paths under /node)
      trace.pb  lag.json  node.log what the router writes
    run_dir/nodes/hosts            0644, every node's name and address (an own bridge's containers' /etc/hosts)

The run directory keeps the shape every reader expects (traces/<node>.pb,
node-logs/<node>.lag.json, node-logs/<node>.log): those paths are relative
symlinks into the node directory, so analysis, `zip -r` and `tar` see the
files where they always were, and a node restarted appends to the same trace.

The uid: the invoking user's when the CLI does not run as root (the files are
then simply the user's), else NODE_UID, the "nonroot" uid of distroless
images, which owns nothing else on the host.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from node.config import NodeConfig
from orchestrator.dockerapi.names import MOUNT, NODE_UID
from orchestrator.errors import InputError

CONFIG = "config.json"
TRACE = "trace.pb"
LAG = "lag.json"
LOG = "node.log"
SCORES = "scores.csv"
TREE = "tree.csv"


@dataclass(frozen=True)
class NodeUser:
    uid: int
    gid: int

    @property
    def docker_user(self) -> str:
        return f"{self.uid}:{self.gid}"


def node_user() -> NodeUser:
    """The uid:gid routers run as: never 0."""
    if os.getuid() != 0:
        return NodeUser(os.getuid(), os.getgid())
    return NodeUser(NODE_UID, NODE_UID)


def node_dir(run_dir: Path, node: str) -> Path:
    return run_dir / "nodes" / node


# A resolver configuration that names a nameserver but reaches none: the
# testbed resolves node names through the hosts file and serves no DNS.
# py-libp2p builds a DNS resolver when it is imported and exits with "no
# nameservers" when /etc/resolv.conf lists none (issue 38: mixed.yaml died on
# docker); a lookup here fails at once on the container's own loopback.
RESOLV_CONF = "# gossip-testbed: names resolve through /etc/hosts; there is no DNS server\nnameserver 127.0.0.1\n"


def hosts_file(run_dir: Path) -> Path:
    return run_dir / "nodes" / "hosts"


def resolv_conf_file(run_dir: Path) -> Path:
    return run_dir / "nodes" / "resolv.conf"


def hosts_bind(run_dir: Path) -> dict[str, dict[str, str]]:
    """The hosts file and the resolver configuration as the containers'
    /etc/hosts and /etc/resolv.conf, read-only."""
    return {
        str(hosts_file(run_dir)): {"bind": "/etc/hosts", "mode": "ro"},
        str(resolv_conf_file(run_dir)): {"bind": "/etc/resolv.conf", "mode": "ro"},
    }


def write_hosts(run_dir: Path, hosts: dict[str, str]) -> None:
    """run_dir/nodes/hosts: localhost and every node's alias (nodeN) with its
    address; and run_dir/nodes/resolv.conf (RESOLV_CONF). Mounted as
    /etc/hosts and /etc/resolv.conf (hosts_bind) where Docker writes the
    containers none (an own bridge's: orchestrator/backends/docker/wiring.py)."""
    path = hosts_file(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["127.0.0.1\tlocalhost", *(f"{ip}\t{alias}" for alias, ip in hosts.items())]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    resolv = resolv_conf_file(run_dir)
    resolv.write_text(RESOLV_CONF)
    resolv.chmod(0o644)


def inside(name: str) -> str:
    """A node directory file's path in the container."""
    return f"{MOUNT}/{name}"


def _link(host_path: str, target: Path, run_dir: Path, field: str) -> None:
    """Make `host_path` (where the run directory's readers look) a relative
    symlink to `target` in the node directory."""
    link = Path(host_path)
    if not link.is_absolute():
        link = run_dir / link
    link = link.parent.resolve() / link.name
    if not link.is_relative_to(run_dir):
        raise InputError(f"{field} {host_path}: a docker node can only write under the run directory {run_dir}")
    link.parent.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(target, link.parent)
    if link.is_symlink() and os.readlink(link) == rel:
        return
    if link.exists() or link.is_symlink():
        raise InputError(f"{field} {link}: already exists; a docker node's {field} must be a new file")
    link.symlink_to(rel)


def prepare(run_dir: Path, config: NodeConfig, user: NodeUser) -> NodeConfig:
    """Create (or refresh, on a restart) the node's directory and config and
    the run directory's links into it; returns the config as the router sees
    it."""
    run_dir = run_dir.resolve()
    d = node_dir(run_dir, config.name)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    _link(config.trace_path, d / TRACE, run_dir, "trace_path")
    _link(config.lag_path or config.trace_path + ".lag.json", d / LAG, run_dir, "lag_path")
    _link(str(run_dir / "node-logs" / f"{config.name}.log"), d / LOG, run_dir, "log")
    if config.scores_path:
        _link(config.scores_path, d / SCORES, run_dir, "scores_path")
    if config.tree_path:
        _link(config.tree_path, d / TREE, run_dir, "tree_path")
    seen = dataclasses.replace(config, trace_path=inside(TRACE), lag_path=inside(LAG),
                               scores_path=inside(SCORES) if config.scores_path else "",
                               tree_path=inside(TREE) if config.tree_path else "")
    cfg = d / CONFIG
    fd = os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the testbed token
    with os.fdopen(fd, "w") as f:
        f.write(seen.to_json())
    if os.getuid() == 0:
        for path in (d, cfg):
            os.chown(path, user.uid, user.gid)
    return seen


def isolation(user: NodeUser, shared: dict[str, dict[str, str]], hosts: bool) -> dict[str, object]:
    """What the manifest records about a container's privileges; `shared`:
    the binds of the image's own files (orchestrator.images.tree); `hosts`:
    whether the testbed's hosts file and resolv.conf are mounted (write_hosts)."""
    mounts = [f"run_dir/nodes/<node> at {MOUNT} (read-write): config, trace, lag file, log"]
    if hosts:
        mounts.append("run_dir/nodes/hosts and resolv.conf at /etc/hosts and /etc/resolv.conf (read-only): "
                      "every node's name and address; a nameserver that reaches nothing")
    if shared:
        mounts.append(f"{', '.join(b['bind'] for b in shared.values())} (read-only): the router image's own "
                      f"files, unpacked once at {os.path.commonpath(list(shared))}")
    return {
        "user": user.docker_user,
        "mounts": mounts,
        "cap_drop": ["ALL"],
        "read_only_rootfs": True,
        "no_new_privileges": True,
        "privileged": False,
    }
