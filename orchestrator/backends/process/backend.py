"""The process backend: one OS process per router (`python -m node --config
FILE`) on the host, each on its own loopback address.

Addresses: Linux routes all of 127.0.0.0/8 to lo, so every node gets its own
127.N.b.c with the same fixed ports (PEER_PORT, CONTROL_PORT), like hosts on a
LAN. N (1-254) is derived from the testbed name by hashing and moved on past
the N of every other testbed recorded in the state directory, so two testbeds
never collide; node k (1-based) is 127.N.(k // 254).(k % 254 + 1).
Identities packed on one host (`identities_per_host`) share its address, the
j-th of them (its own node is 0) on ports PEER_PORT + 2j and CONTROL_PORT + 2j.

Every process is recorded in the state directory (pid, kernel start time,
command line) right after it is spawned, before anything waits for it, and
its config file lives under the testbed's state directory, so `cleanup` finds
every router of a testbed even after the CLI was SIGKILLed, and never kills a
recycled pid: a pid is only signalled while its start time and command line
still match, and a /proc scan catches a process spawned just before the
record was written.

Shaping: everything in user space inside the node (no per-node network
namespace here, so no tc): kernel_delay False, kernel_rate False. So a
foreign router (orchestrator/routers/kinds.py: an adapter, started by the argv its
kind gives, `--params` from its node directory run_dir/nodes/<node>/) sends
unshaped; the manifest says so per node. Its stdout (the contract's NDJSON)
is appended to nodes/<node>/stdout.ndjson, its stderr to node-logs/<node>.log.
Bare images cannot run here (validated before anything starts).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from node.config import LinkShape, NodeConfig
from node.runtime.client import ControlError
from node.atomic import write_atomic
from orchestrator.backends.api import Backend, BackendContext, Capabilities, NodeAddress
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.records.router_cpu import proc_cpu_seconds
from orchestrator.routers.kinds import kind_of
from orchestrator.routers.foreign_nodes import PARAMS, STDOUT, node_dir
from orchestrator.host.procs import proc_alive, proc_cmdline, proc_start_time, send_signal, terminate, wait_gone
from orchestrator.records.state import StateStore

PEER_PORT = 9000
CONTROL_PORT = 9001
STOP_GRACE_S = 10.0
PROJECT_ROOT = Path(__file__).resolve().parents[3]


def _is_node_cmdline(cmdline: list[str], config_dir: Path | None = None) -> bool:
    """A router's (ours or a foreign adapter's): `--config` under config_dir."""
    if "--config" not in cmdline:
        return False
    if config_dir is None:
        return True
    i = cmdline.index("--config")
    return i + 1 < len(cmdline) and cmdline[i + 1].startswith(str(config_dir) + os.sep)



def subnet_octet(testbed: str, taken: set[int]) -> int:
    """The second octet of this testbed's 127.N.0.0/16, hashed from the name,
    moved on past octets other testbeds hold."""
    start = int.from_bytes(hashlib.sha256(testbed.encode()).digest()[:4], "big") % 254
    for i in range(254):
        octet = (start + i) % 254 + 1
        if octet not in taken:
            return octet
    raise BackendUnavailable("all 254 loopback /16 ranges are held by recorded testbeds; `testbed down --all`")


def node_host(octet: int, index: int) -> str:
    k = index + 1
    if k >= 254 * 254:
        raise TestbedError("the process backend supports at most 64515 nodes per testbed")
    return f"127.{octet}.{k // 254}.{k % 254 + 1}"


class ProcessBackend(Backend):
    name = "process"
    capabilities = Capabilities(kernel_shaping=False, netem=False, partitions=True, pause=True, shared_hosts=True)

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.procs: dict[str, subprocess.Popen] = {}
        self.configs: dict[str, NodeConfig] = {}

    # Set-up

    def config_dir(self) -> Path:
        return self.store.dir(self.testbed) / "configs"

    def prepare(self, nodes: Sequence[str]) -> dict[str, NodeAddress]:
        if sys.platform != "linux":
            raise BackendUnavailable("the process backend needs Linux (all of 127.0.0.0/8 on lo, /proc)")
        record = self.store.load(self.testbed) or {}
        octet = record.get("net")
        if not isinstance(octet, int):
            taken = set()
            for other in self.store.names():
                if other != self.testbed:
                    net = (self.store.load(other) or {}).get("net")
                    if isinstance(net, int):
                        taken.add(net)
            octet = subnet_octet(self.testbed, taken)

            def change(rec: dict) -> None:
                rec["net"] = octet
                rec.setdefault("backend", self.name)

            self.store.update(self.testbed, change)
        index = {name: i for i, name in enumerate(nodes)}
        addresses = {}
        for name, (host, slot) in self.host_slots(nodes).items():
            ip = node_host(octet, index[host])
            addresses[name] = NodeAddress(ip, PEER_PORT + 2 * slot, ip, CONTROL_PORT + 2 * slot)
        return addresses

    def shaping_capabilities(self) -> ShapingCapabilities:
        return ShapingCapabilities(
            kernel_delay=False, kernel_rate=False, path="userspace",
            detail="process backend: delay, jitter, loss and rate applied by each node's user-space shaper "
                   "on what it sends (no per-node network namespace for tc)",
        )

    def apply_kernel_shaping(
        self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None
    ) -> list[str]:
        return []

    # Processes

    def _record(self, node: str) -> dict:
        return ((self.store.load(self.testbed) or {}).get("nodes") or {}).get(node) or {}

    def _pid(self, node: str) -> tuple[int, int | None] | None:
        entry = self._record(node)
        pid = entry.get("pid")
        if not isinstance(pid, int):
            return None
        return pid, entry.get("start_time")

    def start(self, config: NodeConfig) -> None:
        node = config.name
        if self.is_running(node):
            return
        cdir = self.config_dir()
        cdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = cdir / f"{node}.json"
        write_atomic(path, config.to_json(), 0o600)
        logs = self.run_dir / "node-logs"
        logs.mkdir(parents=True, exist_ok=True)
        Path(config.trace_path).parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "node", "--config", str(path)]
        out_path: Path | None = None  # stdout: beside stderr in the node's log, or a foreign node's NDJSON
        if (kind := kind_of(config.router)).foreign:
            ndir = node_dir(self.run_dir, node)
            cmd = [*kind.process_argv(), "--params", str(ndir / PARAMS), "--config", str(path)]
            out_path = ndir / STDOUT
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(logs / f"{node}.log", "ab") as log, (
                open(out_path, "ab") if out_path else contextlib.nullcontext(log)) as out:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=log, env=env,
                start_new_session=True, close_fds=True,
            )
        # Recorded before anyone waits for the node: `down` must find it.
        self.store.set_node(
            self.testbed, node, pid=proc.pid, start_time=proc_start_time(proc.pid), cmdline=cmd,
            config=str(path), host=config.listen_host, port=config.listen_port,
            control_host=config.control_host, control_port=config.control_port,
        )
        self.procs[node] = proc
        self.configs[node] = config

    def exit_code(self, node: str) -> int | None:
        proc = self.procs.get(node)
        return None if proc is None else proc.poll()

    def is_running(self, node: str) -> bool:
        proc = self.procs.get(node)
        if proc is not None and proc.poll() is not None:
            return False
        found = self._pid(node)
        return found is not None and proc_alive(*found)

    def _send(self, node: str, sig: int) -> tuple[int, int | None] | None:
        found = self._pid(node)
        if found is None or not proc_alive(*found):
            return None
        send_signal(found[0], sig)
        return found

    def stop(self, node: str) -> None:
        found = self._pid(node)
        if found is not None:
            terminate([found], STOP_GRACE_S)
        self._collect(node)

    def kill(self, node: str) -> None:
        found = self._send(node, signal.SIGKILL)
        if found is not None:
            wait_gone(*found, timeout=5.0)
        self._collect(node)

    def _collect(self, node: str) -> None:
        proc = self.procs.pop(node, None)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def pause(self, node: str) -> None:
        self._send(node, signal.SIGSTOP)

    def resume(self, node: str) -> None:
        self._send(node, signal.SIGCONT)

    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        try:
            self.control_client(node).call("isolate", peers=list(peers) if peers else None)
        except ControlError as exc:
            raise TestbedError(f"{node}: disconnect failed: {exc}") from None

    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        try:
            self.control_client(node).call("rejoin", peers=list(peers) if peers else None)
        except ControlError as exc:
            raise TestbedError(f"{node}: reconnect failed: {exc}") from None

    cpu_source = "/proc/<pid>/stat utime+stime of each router process"

    def cpu_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for node in (self.store.load(self.testbed) or {}).get("nodes") or {}:
            found = self._pid(node)
            used = proc_cpu_seconds(found[0]) if found is not None and proc_alive(*found) else None
            if used is not None:
                out[node] = used
        return out

    def collect_traces(self) -> None:
        """Nodes write straight into run_dir/traces; nothing to copy."""

    def destroy(self) -> None:
        record = self.store.load(self.testbed) or {}
        procs = [
            (e["pid"], e.get("start_time")) for e in (record.get("nodes") or {}).values()
            if isinstance(e.get("pid"), int)
        ]
        terminate(procs, STOP_GRACE_S)
        for node in list(self.procs):
            self._collect(node)

    # Cleanup after anything, even a SIGKILLed CLI

    @staticmethod
    def _kill_strays(store: StateStore, testbed: str | None) -> list[str]:
        """SIGKILL router processes whose --config lies under this testbed's
        (or, for None, any testbed's) state directory."""
        root = store.dir(testbed) if testbed else store.testbeds
        lines = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid == os.getpid():
                continue
            if _is_node_cmdline(proc_cmdline(pid), root) and proc_alive(pid):
                start = proc_start_time(pid)
                send_signal(pid, signal.SIGKILL)
                wait_gone(pid, start, 5.0)
                lines.append(f"killed stray router process {pid}")
        return lines

    @classmethod
    def cleanup(cls, testbed: str | None, store: StateStore) -> list[str]:
        names = [testbed] if testbed else store.names()
        lines: list[str] = []
        for name in names:
            record = store.load(name)
            if record is None or record.get("backend", cls.name) != cls.name:
                continue
            procs = []
            for node, entry in sorted((record.get("nodes") or {}).items()):
                pid = entry.get("pid")
                if not isinstance(pid, int):
                    continue
                start = entry.get("start_time")
                cmdline = proc_cmdline(pid)
                if proc_alive(pid, start) and (not entry.get("cmdline") or cmdline == entry["cmdline"]):
                    procs.append((pid, start))
                    lines.append(f"{name}: stopped {node} (pid {pid})")
            terminate(procs, 3.0)
            lines += [f"{name}: {line}" for line in cls._kill_strays(store, name)]
        if testbed is None:
            lines += cls._kill_strays(store, None)
        return lines
