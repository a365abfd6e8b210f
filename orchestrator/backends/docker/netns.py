"""What the Docker backend does inside each container's network namespace,
and in the host's network for them, from the host: kernel shaping and
partial partitions.

- Shaping: tc runs on the host inside the container's network namespace
  (`nsenter -t <pid> -n tc -batch -`), so the container needs no NET_ADMIN
  and the image needs no tc. The kernel part is re-applied after every start
  and reconnect (a stopped container gets a new namespace, a reconnected one
  a new veth).
- Links' delay without netem: the host's delay line (orchestrator/shaping/delayline.py),
  started at the first shaping and ended with the testbed; and room for
  every container in the host's neighbour table (orchestrator/host/neighbours.py).
- Partitions: full = off the network and back with the same static IP
  (orchestrator/backends/docker/wiring.py);
  partial (from a set of peers) = iptables DROP rules in the node's
  namespace (also through nsenter), kept separate from tc so shaping and
  partitions never disturb each other.

`Netns` does this for one DockerBackend, which makes it and calls it; it
reaches the backend's containers, addresses and network only through what
its constructor is given (`Containers`, the backend's `ips`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.config import LinkShape
from orchestrator.shaping import delayline
from orchestrator.host import iptables
from orchestrator.host import neighbours
from orchestrator.shaping import tc
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.backends.docker.wiring import Wiring
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.progress import Reporter
from orchestrator.records.state import StateStore

DEFAULT_PEER = "*"  # per_peer key for every destination not listed
DELAY_LINE_PATH = "delayline+htb"  # delay/jitter/loss by orchestrator/shaping/delayline.py, rate by htb in the netns


@dataclass(frozen=True)
class Containers:
    """What Netns asks of the backend about the testbed's containers."""

    attach: Callable[[], None]  # recover the network and addresses from the host (a later CLI process)
    get: Callable[[str], Any]  # a node's container; TestbedError when it has none
    get_or_none: Callable[[str], Any]
    wiring: Callable[[], Wiring]  # the testbed's network; TestbedError when it has none
    gateway: Callable[[], str | None]  # the host's address on it, None before there is one
    control: Callable[..., dict[str, Any]]  # (node, cmd, **args): a call to the node's control endpoint


class Netns:
    """Shaping, partial partitions and the host's network for one Docker testbed."""

    def __init__(self, testbed: str, run_dir: Path, state_scope: str, store: StateStore, reporter: Reporter,
                 ips: dict[str, str], containers: Containers) -> None:
        """`ips` is the backend's node -> address map, read as it fills."""
        self.testbed, self.run_dir, self.state_scope = testbed, run_dir, state_scope
        self.store, self.reporter = store, reporter
        self.ips = ips
        self.containers = containers
        self.commands_run: list[str] = []
        self._partitions: dict[str, set[str]] = {}
        self._caps: ShapingCapabilities | None = None
        # nodes whose current namespace holds a qdisc this object put there; a
        # (re)started node has a fresh namespace and leaves the set
        self._tc_applied: set[str] = set()
        self._delay: delayline.DelayLine | None = None  # this testbed's, once shaping needed it
        self._delay_end: tuple[dict[str, Any] | None, bool] | None = None  # its final statistics, whether it still ran
        self._overflows_at_start: int | None = None  # the host's neighbour table refusals before the run
        self._overflows: int | None = None  # ... and during it
        self._host_network_error: str | None = None  # why end_host_network could not tell

    def restarted(self, node: str) -> None:
        """A (re)started node has a fresh network namespace: no partition
        rules (the controller treats a restarted node as not isolated), and
        its kernel shaping is applied again."""
        self._partitions.pop(node, None)
        self._tc_applied.discard(node)
        self._apply_tc(node)

    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        """None/empty: leave the testbed's network (every connection dies, as
        a cable pulled); peers: drop packets to and from them (iptables in the
        node's namespace, or the node's own `isolate` without root)."""
        self.containers.attach()
        container = self.containers.get(node)
        if not peers:
            self.containers.wiring().cut(node, container)
            return
        cut = set(peers) - self._partitions.get(node, set())
        self._partitions.setdefault(node, set()).update(cut)
        if not cut or container.status not in ("running", "paused"):
            return
        if self._can_nsenter():
            self._nsenter(node, tc.partition_commands([self.ips[p] for p in sorted(cut)], add=True))
        else:
            self.containers.control(node, "isolate", peers=sorted(cut))

    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self.containers.attach()
        container = self.containers.get(node)
        if not peers:
            if not self.containers.wiring().attached(node, container):
                self.containers.wiring().join(node, container, self.ips[node])
                self._tc_applied.discard(node)  # a new veth, with no qdisc on it
                self._apply_tc(node)  # shape it again
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
            self.containers.control(node, "rejoin", peers=sorted(healed))

    def shaping_capabilities(self) -> ShapingCapabilities:
        if self._caps is None:
            self._caps = kernel_capabilities()
        return self._caps

    def apply_kernel_shaping(
        self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None
    ) -> list[str]:
        """Shape `node`'s egress in its namespace. `per_peer` is keyed by peer
        name ("*" for every other destination); without netem only the rates
        are applied (delay/jitter/loss are in the node's NodeConfig.shaping).
        What was asked is kept in run_dir/configs/<node>.kernel-shaping.json,
        so a restart or reconnect (from any process) applies it again."""
        self.containers.attach()
        path = self.shaping_capabilities().path
        self._shaping_file(node).write_text(json.dumps({
            "per_peer": {p: dataclasses.asdict(s) for p, s in sorted(per_peer.items())},
            "uplink_bps": uplink_bps,
            "path": path,
        }, indent=1) + "\n")
        cmds = self._apply_tc(node)  # first: it refuses peers with no address
        if path == DELAY_LINE_PATH:
            self._delay_line().set_source(self.ips[node], {
                p if p == DEFAULT_PEER else self.ips[p]: s for p, s in per_peer.items()})
        return cmds

    def _delay_line(self) -> delayline.DelayLine:
        """This testbed's delay line, started on its bridge when it is not running."""
        if self._delay is None:
            wiring = self.containers.wiring()
            line = self._testbed_delay_line()
            line.ensure(wiring.bridge, str(wiring.subnet),
                        seed=zlib.crc32(f"{self.testbed}:{self.run_dir.name}".encode()))
            self._delay = line
        return self._delay

    def _testbed_delay_line(self) -> delayline.DelayLine:
        return delayline.DelayLine(self.store.dir(self.testbed) / "delay-line",
                                   iptables.tag_of(self.testbed, self.state_scope))

    def prepare_host_network(self, containers: int) -> None:
        """Room for `containers` in the host's neighbour table
        (orchestrator/host/neighbours.py), and its overflow count now, which
        `end_host_network` compares with (another process: from the
        testbed's record)."""
        note = neighbours.ensure_room(containers)
        if note:
            self.reporter.note(note)
        self._overflows_at_start = neighbours.overflows()
        if self.store.exists(self.testbed):
            self.store.update(self.testbed, lambda r: r.update(neighbour_overflows=self._overflows_at_start))

    def end_host_network(self) -> None:
        """End the testbed's delay line, if it has one, keeping its final
        statistics, and count the neighbour table's overflows since
        `prepare_host_network`: for the manifest (`shaping_warnings`,
        `host_network_facts`). Never raises: what fails is a warning (the
        teardown that follows finds and removes what is left)."""
        try:
            line = self._delay or self._testbed_delay_line()
            if line.stats_path.exists() or line.running() is not None:
                self._delay_end = line.end(keep_log=self.run_dir / "delay-line.log")
            at_start = self._overflows_at_start
            if at_start is None:
                at_start = (self.store.load(self.testbed) or {}).get("neighbour_overflows")
            if at_start is not None:
                self._overflows = neighbours.overflows() - at_start
        except Exception as exc:  # noqa: BLE001 - the run's end must go on
            self._host_network_error = f"the host's network could not be checked at the end of the run: {exc}"

    def host_network_facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"delay_line": self._delay_end[0]} if self._delay_end is not None else {}
        return facts | ({"neighbour_table_overflows": self._overflows} if self._overflows is not None else {})

    def shaping_warnings(self) -> list[str]:
        warnings = [delayline.warning(*self._delay_end)] if self._delay_end is not None else []
        warnings.append(self._host_network_error)
        if self._overflows:
            warnings.append(f"the host's neighbour (ARP) table was full {self._overflows} time(s) during the run: "
                            "frames of containers that could not resolve a peer were dropped "
                            "(raise net.ipv4.neigh.default.gc_thresh3; docs/docker.md)")
        return [w for w in warnings if w]

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
        gateway = self.containers.gateway()
        cmds = tc.egress_commands(
            per_dest, uplink, default=per_peer.get(DEFAULT_PEER), exempt=[gateway] if gateway else [],
            netem=caps.path == "netem", dev="eth0",
        )
        if not cmds and node not in self._tc_applied:
            return []  # nothing to add, and nothing of ours to clear: leave the namespace alone
        if not self._netns_ready(node):
            return [shlex.join(c) for c in cmds]
        self._nsenter(node, tc.clear_commands("eth0"), check=False)
        self._tc_applied.discard(node)
        if cmds:
            self._tc_batch(node, cmds)
            self._tc_applied.add(node)
        return [shlex.join(c) for c in cmds]

    def qdisc_show(self, node: str) -> str:
        """`tc qdisc show` + `tc class show` + `tc filter show` in the node's namespace."""
        out = []
        for what in ("qdisc", "class", "filter"):
            out.append(self._nsenter(node, [["tc", what, "show", "dev", "eth0"]], capture=True))
        return "\n".join(out)

    def _pid(self, node: str) -> int:
        container = self.containers.get(node)
        pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        if not pid:
            raise TestbedError(f"node {node} is not running (no network namespace to shape)")
        return pid

    def _netns_ready(self, node: str) -> bool:
        container = self.containers.get_or_none(node)
        return (container is not None and container.status in ("running", "paused")
                and self.containers.wiring().attached(node, container))

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


def kernel_capabilities() -> ShapingCapabilities:
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
    why_not = delayline.unavailable()
    if why_not is None:
        return ShapingCapabilities(
            kernel_delay=True, kernel_rate=True, path=DELAY_LINE_PATH,
            detail=f"sch_netem missing ({probe.detail}); delay/jitter/loss by {delayline.BINARY} on the host "
                   "(NFQUEUE on the testbed's bridge), rate with htb/tbf in each container's netns via nsenter",
        )
    return ShapingCapabilities(
        kernel_delay=False, kernel_rate=True, path="userspace+htb",
        detail=f"sch_netem missing ({probe.detail}) and no delay line ({why_not}); delay/jitter/loss in the "
               "node's user-space shaper, rate with htb/tbf in each container's netns via nsenter",
    )
