"""What one swarm task is: the service spec of a node (image, entry, mounts,
capabilities, placement, published control port) and the short privileged
step that shapes the task's own links before the router starts.

Why the router shapes its own links: the controller cannot `nsenter` a
container on another host, so the kernel part of a node's shaping (the tc
program orchestrator/shaping/tc.py generates) travels with the task and is applied
inside it. The task starts as root with every capability dropped except
NET_ADMIN (tc), CHOWN (hand /node to the router's uid), SETUID/SETGID (to
become that uid) and SETPCAP (to empty the bounding set: without it the four
stay there, measured); the entry runs `tc -batch`, writes what it did to
/node/shaping.json, then execs the router through `setpriv` as the
unprivileged uid with no capabilities, an empty bounding set and
no_new_privs. So the router never holds NET_ADMIN.

Peers are named, not numbered: a task's address is its network alias (the
node's name) on the overlay, and a restarted task gets a new IP. The tc
program names destinations (`match ip dst n3/32`); the entry resolves the
names it can when it starts and records the ones it could not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from node.config import LinkShape
from orchestrator.shaping import tc
from orchestrator.dockerapi.names import MOUNT, NODE_UID

LISTEN_PORT = 4001
CONTROL_PORT = 4002
CONFIG_FILE = "config.json"  # the secret's file name under /run/secrets
SHAPING_ENV = "TESTBED_SHAPING"
DEV = "@overlay"  # the tc device, resolved in the task to the interface on the overlay subnet
TASK_CAPS = ["CAP_NET_ADMIN", "CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]
DNS_WAIT_S = 30.0  # how long the entry waits for peers' names to resolve

# The task's entry (python3 -c ENTRY node_dir config uid): root, the four
# capabilities above, nothing else. Kept to the standard library: the image
# holds only node/ and its dependencies.
ENTRY = r"""
import ipaddress, json, os, socket, subprocess, sys, time
node_dir, config, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
plan = json.loads(os.environ.get("TESTBED_SHAPING") or "{}")
# A restart finds the volume the router's uid owns; root has CHOWN, not DAC_OVERRIDE.
for name in [""] + os.listdir(node_dir):
    os.chown(os.path.join(node_dir, name), 0, 0)
done = {"path": plan.get("path", "userspace"), "commands": 0, "unresolved": [], "error": None, "dev": None}

def overlay_dev(subnet):
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and ipaddress.ip_interface(f[3]).ip in ipaddress.ip_network(subnet):
            return f[1]
    return None

def resolve(name, deadline):
    while True:
        try:
            return socket.gethostbyname(name)
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)

cmds = plan.get("commands") or []
if cmds:
    dev = overlay_dev(plan["subnet"])
    deadline = time.monotonic() + plan.get("dns_wait_s", 30)
    lines = []
    for argv in cmds:
        out, skip = [], False
        for arg in argv[1:]:
            if arg == "@overlay":
                arg = dev
            elif arg.endswith("/32") and not arg[0].isdigit():
                ip = resolve(arg[:-3], deadline)
                if ip is None:
                    done["unresolved"].append(arg[:-3])
                    skip = True
                arg = f"{ip}/32"
            out.append(arg)
        if not skip:
            lines.append(" ".join(out))
    done["dev"] = dev
    if dev is None:
        done["error"] = "no interface on the overlay subnet " + plan["subnet"]
    else:
        r = subprocess.run(["tc", "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
        done["commands"] = len(lines)
        if r.returncode != 0:
            done["error"] = (r.stderr or r.stdout).strip()[:2000]
with open(os.path.join(node_dir, "shaping.json"), "w") as f:
    json.dump(done, f)
log = os.open(os.path.join(node_dir, "node.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for name in os.listdir(node_dir):
    os.chown(os.path.join(node_dir, name), uid, uid)
os.chown(node_dir, uid, uid)
os.dup2(log, 1)
os.dup2(log, 2)
os.execvp("setpriv", ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                      "--bounding-set=-all", "--no-new-privs", "python3", "-m", "node", "--config", config])
"""


@dataclass(frozen=True)
class ShapingPlan:
    """The kernel part of one node's shaping as the task receives it: tc
    commands whose destinations are peer names, for the overlay `subnet`."""

    path: str
    subnet: str
    commands: tuple[tuple[str, ...], ...]

    def to_env(self) -> str:
        return json.dumps({"path": self.path, "subnet": self.subnet, "dns_wait_s": DNS_WAIT_S,
                           "commands": [list(c) for c in self.commands]})


def shaping_plan(
    per_peer: Mapping[str, LinkShape], uplink_bps: int | None, default: LinkShape | None,
    netem: bool, path: str, subnet: str,
) -> ShapingPlan:
    """tc.egress_commands with peer names where addresses go."""
    cmds = tc.egress_commands(dict(per_peer), uplink_bps, default=default, netem=netem, dev=DEV)
    return ShapingPlan(path, subnet, tuple(tuple(c) for c in cmds))


@dataclass(frozen=True)
class TaskSpec:
    """Everything that differs between two nodes' services."""

    service: str
    node: str
    image: str
    network_id: str
    volume: str
    secret_id: str
    secret_name: str
    labels: Mapping[str, str]
    constraints: Sequence[str]
    memory_bytes: int | None
    nano_cpus: int | None
    shaping: ShapingPlan | None


def task_template(spec: TaskSpec) -> Any:
    """The docker-py TaskTemplate of one node's service."""
    from docker.types import (  # noqa: PLC0415 - the Docker SDK only where Docker is used
        ContainerSpec, Mount, NetworkAttachmentConfig, Placement, Resources, RestartPolicy, SecretReference,
        TaskTemplate,
    )

    secret = SecretReference(spec.secret_id, spec.secret_name, filename=CONFIG_FILE,
                             uid=str(NODE_UID), gid=str(NODE_UID), mode=0o400)
    env = {"TESTBED_NODE": spec.node}
    if spec.shaping is not None:
        env[SHAPING_ENV] = spec.shaping.to_env()
    container = ContainerSpec(
        spec.image,
        command=["python3", "-c", ENTRY, MOUNT, f"/run/secrets/{CONFIG_FILE}", str(NODE_UID)],
        env=env,
        labels=dict(spec.labels),
        hostname=spec.node,
        user="0:0",
        mounts=[Mount(MOUNT, spec.volume, type="volume", labels=dict(spec.labels)),
                Mount("/tmp", None, type="tmpfs", tmpfs_size=16 * 2**20)],
        secrets=[secret],
        read_only=True,
        # No docker-init: as root without CAP_KILL it could not forward
        # SIGTERM to the router's uid. The entry execs into the router, which
        # is PID 1 and handles SIGTERM itself (leave, prune, flush).
        init=False,
        stop_grace_period=10 * 10**9,
        cap_add=TASK_CAPS,
        cap_drop=["ALL"],
    )
    return TaskTemplate(
        container,
        resources=Resources(mem_limit=spec.memory_bytes, cpu_limit=spec.nano_cpus),
        restart_policy=RestartPolicy(condition="none"),
        placement=Placement(constraints=list(spec.constraints)),
        networks=[NetworkAttachmentConfig(spec.network_id, aliases=[spec.node])],
        log_driver={"Name": "json-file", "Options": {"max-size": "1m"}},
    )


def endpoint_spec() -> Any:
    """dnsrr (a node's name resolves to its task's address, no VIP), and
    the control port published on the swarm node that runs the task."""
    from docker.types import EndpointSpec  # noqa: PLC0415

    return EndpointSpec(mode="dnsrr", ports=[{"Protocol": "tcp", "TargetPort": CONTROL_PORT, "PublishMode": "host"}])
