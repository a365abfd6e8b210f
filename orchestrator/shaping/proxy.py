"""Shaped links for a foreign router's container on a kernel without netem:
the shaping proxy (node/shaping/proxy.py) as a sidecar in its network
namespace.

Why: without sch_netem our router delays, jitters and loses its own egress
in user space; a foreign router cannot. So its container gets a sidecar, made
from our router image, that shares its network namespace
(network_mode="container:<id>"), and iptables rules in that namespace (set
from the host through nsenter, as the docker backend does for tc, backends/docker/netns.py) that send the
node's TCP through it:
- nat OUTPUT: every TCP connection the node dials, except to loopback and the
  exempt addresses (the host's gateway: control traffic), to OUTBOUND_PORT;
- nat PREROUTING: every connection dialled to the node's listen port, except
  from the exempt addresses, to INBOUND_PORT.
The proxy's own connections are exempt by owner (`-m owner --uid-owner
PROXY_UID`): it runs as a uid no router uses. Rates stay with the kernel's
htb where the backend has it (the shapes given here carry none then), as for
our router.

The sidecar runs unprivileged (PROXY_UID, every capability dropped,
no-new-privileges, read-only root filesystem), mounts only its config file,
and carries the testbed's labels (but not the node label: it is not a node),
so `down` and `gc` remove it. A node that is started again has a new network
namespace: calling `shape_foreign` again restarts the sidecar in it and sets
the rules again (the old ones died with the old namespace).

Connections the node opened before the rules existed are not redirected and
stay unshaped: `shape_foreign` counts them (`bypassed`) so the manifest says
so; the caller keeps it at 0 by shaping before the node dials.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.config import LinkShape, NodeConfig
from node.shaping.stream import MAX_RETRANSMITS, RTO_MIN_S
from node.shaping.proxy import ProxyConfig
from orchestrator.dockerapi.names import LABEL_NODE
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.shaping.split import ShapingCapabilities, user_shape

PROXY_UID = 65533  # the proxy's own uid: iptables exempts its sockets by owner
OUTBOUND_PORT = 19000
INBOUND_PORT = 19001
CONTRACT_LISTEN_PORT = 9000  # gossipsub-interop: every node listens on TCP 9000
CHAIN_OUT = "GTB_PROXY_OUT"
CHAIN_IN = "GTB_PROXY_IN"
CONFIG_INSIDE = "/proxy.json"
LABEL_PROXY_FOR = "gossip-testbed.proxy-for"  # the node a sidecar shapes
READY_TIMEOUT_S = 120.0  # a loaded host takes long to start python and import trio
# The proxy is the link, not a node: on a loaded host its timers must fire on
# time, so its cgroup weighs 4x a container's default (1024) for the CPU.
CPU_SHARES = 4096
PATH = "proxy"
DETAIL = "proxy: user-space, per destination"
LOSS_MODEL = (f"a lost TCP segment is sent again after an RTO ({RTO_MIN_S * 1000:g} ms + 2 x delay, doubling), "
              f"later segments wait behind it; {MAX_RETRANSMITS} losses in a row end the connection")

Argv = list[str]


@dataclass(frozen=True)
class ProxyShapes:
    """What the foreign node sends, shaped in the proxy: by peer IPv4 address,
    `default` for every other destination, the user-space uplink (None where
    the kernel limits rates), and the seed of loss and jitter."""

    per_dest: Mapping[str, LinkShape] = field(default_factory=dict)
    default: LinkShape = LinkShape()
    uplink_bps: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class ProxyInfo:
    """What `shape_foreign` did: the sidecar, the rules, and connections that
    escaped shaping because they were opened before the rules."""

    node: str
    sidecar: str
    config_path: str
    rules: tuple[str, ...]
    bypassed: int

    def manifest_record(self) -> dict[str, Any]:
        """The node's per-node shaping record in the manifest."""
        return {"path": PATH, "detail": DETAIL, "loss": LOSS_MODEL, "sidecar": self.sidecar,
                "unshaped_connections": self.bypassed}


def proxy_needed(caps: ShapingCapabilities) -> bool:
    """The one rule: a foreign node needs the proxy exactly where the kernel
    cannot delay (no netem); with netem the kernel shapes every container alike."""
    return not caps.kernel_delay


def proxy_shapes(resolved: ResolvedExperiment, node: str, ips: Mapping[str, str], caps: ShapingCapabilities,
                 seed: int) -> ProxyShapes:
    """What the proxy of foreign `node` shapes: exactly the user-space part our
    router would get (orchestrator.routers.nodeconfigs), keyed by peer address."""
    neighbours = resolved.neighbours()[node]
    return ProxyShapes(
        per_dest={ips[p]: user_shape(resolved.link(node, p), caps) for p in neighbours if p in ips},
        default=user_shape(resolved.default_link, caps),
        uplink_bps=None if caps.kernel_rate else resolved.node(node).uplink_bps,
        seed=seed,
    )


def config_proxy_shapes(config: NodeConfig, ips: Mapping[str, str]) -> ProxyShapes:
    """The same shapes from a foreign node's NodeConfig, where the backend
    has it rather than the experiment: its per-peer user-space shapes
    (keyed by peer id) re-keyed by the peers' addresses."""
    per_dest = {ips[name]: config.shaping[pid] for pid, name in config.peer_names.items()
                if name in ips and pid in config.shaping}
    return ProxyShapes(per_dest=per_dest, default=config.default_shape, uplink_bps=config.uplink_bps,
                       seed=config.seed)


def iptables_commands(listen_port: int, exempt: Sequence[str] = (), proxy_uid: int = PROXY_UID,
                      outbound_port: int = OUTBOUND_PORT, inbound_port: int = INBOUND_PORT) -> list[Argv]:
    """The nat rules, in chains of their own so setting them again replaces
    them (create the chains, ignoring "exists", then flush and fill them;
    hook them in once: see `_install`)."""
    nat = ["iptables", "-w", "-t", "nat"]
    out: list[Argv] = [
        nat + ["-A", CHAIN_OUT, "-o", "lo", "-j", "RETURN"],
        nat + ["-A", CHAIN_OUT, "-m", "owner", "--uid-owner", str(proxy_uid), "-j", "RETURN"],
    ]
    inb: list[Argv] = [nat + ["-A", CHAIN_IN, "-i", "lo", "-j", "RETURN"]]
    for ip in exempt:
        out.append(nat + ["-A", CHAIN_OUT, "-d", f"{ip}/32", "-j", "RETURN"])
        inb.append(nat + ["-A", CHAIN_IN, "-s", f"{ip}/32", "-j", "RETURN"])
    out.append(nat + ["-A", CHAIN_OUT, "-p", "tcp", "-j", "REDIRECT", "--to-ports", str(outbound_port)])
    inb.append(nat + ["-A", CHAIN_IN, "-p", "tcp", "--dport", str(listen_port),
                      "-j", "REDIRECT", "--to-ports", str(inbound_port)])
    return out + inb


def hook_commands() -> list[tuple[Argv, Argv]]:
    """(check, add) pairs that jump from OUTPUT and PREROUTING to our chains."""
    nat = ["iptables", "-w", "-t", "nat"]
    pairs = []
    for builtin, chain in (("OUTPUT", CHAIN_OUT), ("PREROUTING", CHAIN_IN)):
        rule = [builtin, "-p", "tcp", "-j", chain]
        pairs.append((nat + ["-C", *rule], nat + ["-A", *rule]))
    return pairs


def sidecar_name(container: Any) -> str:
    return f"{container.name}-proxy"


def shape_foreign(client: Any, container: Any, node: str, shapes: ProxyShapes, *, image: str,
                  labels: Mapping[str, str], config_dir: Path, exempt: Sequence[str] = (),
                  listen_port: int = CONTRACT_LISTEN_PORT) -> ProxyInfo:
    """Shape what the running foreign `container` (node `node`) sends: write
    the proxy's config to config_dir/<node>.proxy.json, (re)start the sidecar
    from `image` in the container's current network namespace, wait until it
    listens, then set the iptables rules. Call it again after every start of
    the node. `labels`: the backend's labels for the testbed (no node label)."""
    if os.geteuid() != 0 or not shutil.which("nsenter") or not shutil.which("iptables"):
        raise BackendUnavailable("the shaping proxy's iptables rules are set in the node's network "
                                 "namespace with nsenter and iptables from the host, which needs root")
    container.reload()
    pid = int(container.attrs.get("State", {}).get("Pid") or 0)
    if container.status != "running" or not pid:
        raise TestbedError(f"{node}: not running, no network namespace to put the shaping proxy in")
    config = ProxyConfig(OUTBOUND_PORT, INBOUND_PORT, dict(shapes.per_dest), shapes.default,
                         shapes.uplink_bps, shapes.seed)
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / f"{node}.proxy.json"
    path.write_text(config.to_json())
    os.chmod(path, 0o644)  # no secrets; the sidecar's uid reads it
    sidecar = _start_sidecar(client, container, node, image, labels, path)
    _wait_listening(pid, sidecar, (OUTBOUND_PORT, INBOUND_PORT))
    rules = iptables_commands(listen_port, exempt)
    _install(pid, rules)
    return ProxyInfo(node, sidecar.name, str(path), tuple(shlex.join(r) for r in rules),
                     _bypassed(pid, exempt))


def _start_sidecar(client: Any, container: Any, node: str, image: str, labels: Mapping[str, str],
                   config_path: Path) -> Any:
    import docker.errors  # noqa: PLC0415

    name = sidecar_name(container)
    mode = f"container:{container.id}"
    try:
        old = client.containers.get(name)
    except docker.errors.NotFound:
        old = None
    if old is not None and old.attrs.get("HostConfig", {}).get("NetworkMode") == mode:
        old.restart(timeout=2)  # joins the node's current namespace
        return old
    if old is not None:
        old.remove(force=True)
    own = {k: v for k, v in labels.items() if k != LABEL_NODE}
    own[LABEL_PROXY_FOR] = node
    sidecar = client.containers.create(
        image, entrypoint=["python3", "-m", "node.shaping.proxy", "--config", CONFIG_INSIDE],
        name=name, labels=own, network_mode=mode, user=f"{PROXY_UID}:{PROXY_UID}",
        volumes={str(config_path): {"bind": CONFIG_INSIDE, "mode": "ro"}},
        cap_drop=["ALL"], security_opt=["no-new-privileges"], read_only=True, init=True,
        mem_limit="128m", pids_limit=64, cpu_shares=CPU_SHARES, log_config={"type": "json-file", "config": {"max-size": "1m"}},
    )
    sidecar.start()
    return sidecar


def _nsenter(pid: int, argv: Argv, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["nsenter", "-t", str(pid), "-n", "--", *argv],
                            capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise TestbedError(f"[netns of pid {pid}] {shlex.join(argv)} failed: {result.stderr.strip()}")
    return result


def _wait_listening(pid: int, sidecar: Any, ports: Sequence[int]) -> None:
    """Until both proxy ports listen in the namespace: rules that redirect to
    a closed port would refuse every connection."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        listening = _nsenter(pid, ["ss", "-Htln"], check=False).stdout
        if all(f":{port} " in listening for port in ports):
            return
        sidecar.reload()
        if sidecar.status not in ("created", "running", "restarting"):
            break
        time.sleep(0.1)
    logs = sidecar.logs(tail=20).decode(errors="replace").strip()
    raise TestbedError(f"shaping proxy {sidecar.name} is not listening (status {sidecar.status}): {logs}")


def _install(pid: int, rules: list[Argv]) -> None:
    nat = ["iptables", "-w", "-t", "nat"]
    for chain in (CHAIN_OUT, CHAIN_IN):
        _nsenter(pid, nat + ["-N", chain], check=False)  # exists after a previous call: fine
        _nsenter(pid, nat + ["-F", chain])
    for rule in rules:
        _nsenter(pid, rule)
    for check, add in hook_commands():
        if _nsenter(pid, check, check=False).returncode != 0:
            _nsenter(pid, add)


def _bypassed(pid: int, exempt: Sequence[str]) -> int:
    """Established TCP connections that the rules cannot catch any more: not
    on loopback, not the proxy's own, not with an exempt address."""
    text = _nsenter(pid, ["ss", "-Htne", "state", "established"], check=False).stdout
    count = 0
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4 or f"uid:{PROXY_UID}" in line:
            continue
        (local, local_port), remote = words[2].rsplit(":", 1), words[3].rsplit(":", 1)[0]
        if local.startswith("127.") or remote.startswith("127.") or remote in exempt:
            continue
        if local_port in (str(OUTBOUND_PORT), str(INBOUND_PORT)):
            continue
        count += 1
    return count
