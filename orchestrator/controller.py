"""The run controller: drives a resolved experiment on a real backend
(processes or containers), whichever backend it is.

    up:      record the testbed in the state directory, write the run directory
             (experiment.resolved.yaml, topology.json, events.jsonl), allocate
             addresses, build every NodeConfig (user-space shaping for what the
             backend's kernel cannot do), start every node, wait until every node
             answers, is connected to its overlay neighbours and has a mesh;
    workload: publishes and the churn timeline on the wall clock, from t=0 when
             all nodes are up (events.jsonl: publish, churn, node_down/node_up);
    down:    stop every node gracefully (LEAVE, flush), collect traces, remove
             what the backend created, write manifest.json, forget the testbed.

`testbed up` leaves a testbed running after `up`; `status`, `publish`,
`churn` and `down` are later CLI invocations that `attach` to it from the
state directory. `testbed run` does everything in one go.

Backends plug in by name (orchestrator/backends.py); node configurations are
built in orchestrator/nodeconfigs.py.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from node.config import NodeConfig
from node.runtime.client import ControlClient, ControlError
from orchestrator.backend import Backend, ShapingCapabilities
from orchestrator.backends import BACKENDS, backend_class, backend_exists
from orchestrator.errors import BackendUnavailable, InputError, TeardownIncomplete, TestbedError
from orchestrator.experiment.model import ChurnAction, Publish, ResolvedExperiment
from orchestrator.experiment.resolve import incarnation_seed
from orchestrator.nodeconfigs import build_configs, kernel_shape
from orchestrator.progress import Reporter
from orchestrator.rundir import default_run_dir
from orchestrator.runinfo import RunWriter, host_facts
from orchestrator.state import StateStore, check_name
from orchestrator.version import tool_version

INJECTOR = "injector"  # the `from` of injected messages, as in the simulator
MESH_ROUTERS = {"gossipsub": "D_low", "meshsub": "D_low", "simsub": "N_low"}
LAG_WARN_MS = 20.0
POLL_S = 0.2


@dataclass
class NodeState:
    """What the controller believes about a node, as the simulator models it."""

    name: str
    router: str
    topics: list[str]
    seed: int
    neighbours: list[str]
    mesh_low: int
    state: str = "down"  # up | down | paused
    isolated: list[str] | None = None  # None: not isolated; []: from everyone
    incarnation: int = 0

    @property
    def reachable(self) -> bool:
        return self.state == "up" and self.isolated != []

    def cut_off_from(self, other: str) -> bool:
        return self.isolated is not None and (not self.isolated or other in self.isolated)

    def to_record(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "router", "topics", "seed", "neighbours", "mesh_low", "state", "isolated", "incarnation")}

    @classmethod
    def from_record(cls, name: str, rec: dict[str, Any]) -> NodeState:
        return cls(
            name, rec.get("router", ""), list(rec.get("topics", [])), int(rec.get("seed", 0)),
            list(rec.get("neighbours", [])), int(rec.get("mesh_low", 0)), rec.get("state", "down"),
            rec.get("isolated"), int(rec.get("incarnation", 0)),
        )


def mesh_low(router: str, params: dict[str, Any]) -> int:
    key = MESH_ROUTERS.get(router)
    if key is None:
        return 0
    return int(params.get(key, 4))


class Controller:
    def __init__(
        self, testbed: str, backend: Backend, run_dir: Path, token: str, store: StateStore,
        nodes: dict[str, NodeState], configs: dict[str, NodeConfig], reporter: Reporter | None = None,
    ) -> None:
        self.testbed = testbed
        self.backend = backend
        self.run_dir = run_dir
        self.token = token
        self.store = store
        self.nodes = nodes
        self.configs = configs
        self.reporter = reporter or Reporter()
        self.writer = RunWriter(run_dir)
        self.warnings: list[str] = []
        self.caps: ShapingCapabilities | None = None
        self._locks = {name: threading.Lock() for name in nodes}
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="churn")
        self._pending: list[Any] = []
        self.resolved: ResolvedExperiment | None = None
        self.record: dict[str, Any] = {}
        self.t0_ns: int | None = None
        self.workload_t0_ns: int | None = None
        self.started_at: str | None = None

    # Creation and re-attachment

    @classmethod
    def create(
        cls, resolved: ResolvedExperiment, resolved_yaml: str | None, backend_name: str,
        testbed: str | None = None, run_dir: Path | None = None, store: StateStore | None = None,
        reporter: Reporter | None = None,
    ) -> Controller:
        """Validate, record the testbed and write the static run files. Nothing
        is started yet; bad input raises InputError before anything exists."""
        store = store or StateStore()
        testbed = check_name(testbed or resolved.name)
        bcls = backend_class(backend_name)
        if store.exists(testbed):
            raise InputError(f"a testbed named {testbed!r} is already up; `testbed down {testbed}` or use --name")
        run_dir = Path(run_dir or default_run_dir(resolved.name, backend_name)).resolve()
        names = [n.name for n in resolved.nodes]
        if len(set(names)) != len(names) or INJECTOR in names:
            raise InputError("node names must be unique and must not be 'injector'")
        token = secrets.token_hex(16)
        neighbours = resolved.neighbours()
        nodes = {
            s.name: NodeState(s.name, s.router, list(s.topics), s.seed, neighbours[s.name],
                              mesh_low(s.router, dict(s.params)))
            for s in resolved.nodes
        }
        store.create({
            "name": testbed, "backend": backend_name, "run_dir": str(run_dir), "token": token,
            "status": "starting", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cli_pid": os.getpid(), "experiment": resolved.source, "experiment_name": resolved.name,
            "seed": resolved.seed, "t0_ns": time.time_ns(), "nodes": {},
        })
        try:
            backend = bcls(testbed, run_dir)
            ctl = cls(testbed, backend, run_dir, token, store, nodes, {}, reporter)
            ctl.resolved = resolved
            if resolved_yaml is not None:
                ctl.writer.write_resolved(resolved_yaml)
            ctl.writer.write_topology(resolved)
        except BaseException:
            store.remove(testbed)
            raise
        return ctl

    @classmethod
    def attach(cls, testbed: str, store: StateStore | None = None, reporter: Reporter | None = None) -> Controller:
        store = store or StateStore()
        record = store.load(testbed)
        if record is None:
            raise InputError(f"no testbed named {testbed!r} (see `testbed status`)")
        if record.get("corrupt"):
            raise TestbedError(f"the record of testbed {testbed!r} is unreadable; `testbed down {testbed}` cleans up")
        bcls = backend_class(record.get("backend", "process"))
        run_dir = Path(record["run_dir"])
        nodes = {
            name: NodeState.from_record(name, entry.get("spec", {}))
            for name, entry in sorted((record.get("nodes") or {}).items())
        }
        configs = {}
        for name, entry in (record.get("nodes") or {}).items():
            path = entry.get("config")
            if path and Path(path).is_file():
                configs[name] = NodeConfig.load(Path(path))
        ctl = cls(testbed, bcls(testbed, run_dir), run_dir, record.get("token", ""), store, nodes, configs, reporter)
        ctl.record = record
        return ctl

    # Helpers

    def event(self, kind: str, **fields: Any) -> None:
        self.writer.event(time.time_ns(), kind, **fields)

    def client(self, node: str) -> ControlClient:
        cfg = self.configs.get(node)
        if cfg is not None:
            return ControlClient(cfg.control_host, cfg.control_port, self.token)
        entry = ((self.store.load(self.testbed) or {}).get("nodes") or {}).get(node) or {}
        if "control_host" not in entry:
            raise TestbedError(f"{node}: no control address recorded")
        return ControlClient(entry["control_host"], entry["control_port"], self.token)

    def _save_node(self, node: str) -> None:
        self.store.set_node(self.testbed, node, spec=self.nodes[node].to_record())

    def _set_status(self, status: str, **extra: Any) -> None:
        def change(record: dict[str, Any]) -> None:
            record["status"] = status
            record.update(extra)

        self.store.update(self.testbed, change)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.event("warning", message=message)
        self.reporter.note(f"[yellow]warning:[/] {message}")

    # up

    def up(self, ready_timeout: float | None = None) -> None:
        resolved = self.resolved
        assert resolved is not None, "up() needs a controller made by create()"
        names = [n.name for n in resolved.nodes]
        self.t0_ns = time.time_ns()
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.event("run_start")
        for spec in resolved.nodes:
            if spec.memory or spec.cpus:
                self.backend.set_resources(spec.name, spec.memory, spec.cpus)
        addresses = self.backend.prepare(names)
        self.caps = self.backend.shaping_capabilities()
        if self.caps.path != "netem":
            self.reporter.note(f"shaping: {self.caps.path} ({self.caps.detail})")
        self.configs = build_configs(resolved, addresses, self.caps, self.token, self.run_dir)
        cfg_dir = self.store.dir(self.testbed) / "configs"
        cfg_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in names:
            cfg_path = cfg_dir / f"{name}.json"
            fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.configs[name].to_json())
            self.store.set_node(
                self.testbed, name, spec=self.nodes[name].to_record(), config=str(cfg_path),
                host=addresses[name].host, port=addresses[name].port,
                control_host=addresses[name].control_host, control_port=addresses[name].control_port,
            )
        self._set_status("starting", shaping=self.caps.__dict__, t0_ns=self.t0_ns, started_at=self.started_at)
        with self.reporter.phase(f"starting {len(names)} nodes ({self.backend.name})", len(names)) as advance:
            start_many = getattr(self.backend, "start_many", None)
            if start_many is not None:  # a backend that starts nodes in parallel (docker)
                start_many([self._next_config(name) for name in names])
                for name in names:
                    self.nodes[name].state = "up"
                    self._save_node(name)
                advance(len(names))
            else:
                for name in names:
                    self._start_node(name, first=True)
                    advance(1)
        if self.caps.kernel_delay or self.caps.kernel_rate:
            neighbours = resolved.neighbours()
            for name in names:
                per_peer = (
                    {p: kernel_shape(resolved.link(name, p)) for p in neighbours[name]}
                    if self.caps.kernel_delay else {}
                )
                uplink = resolved.node(name).uplink_bps if self.caps.kernel_rate else None
                self.backend.apply_kernel_shaping(name, per_peer, uplink)
        timeout = ready_timeout if ready_timeout is not None else 30.0 + 0.3 * len(names)
        self.wait_ready(names, timeout)
        self.event("all_up", nodes=len(names))
        self._set_status("up", up_at_ns=time.time_ns())
        self.write_manifest(final=False)

    def _next_config(self, name: str) -> NodeConfig:
        """The config of the node's next incarnation: a restarted node gets a
        fresh, reproducible engine seed and the topics it is in now."""
        st = self.nodes[name]
        st.incarnation += 1
        st.isolated = None
        seed = incarnation_seed(st.seed, st.incarnation)
        return replace(self.configs[name], seed=seed, topics=tuple(st.topics))

    def _start_node(self, name: str, first: bool = False) -> None:
        st = self.nodes[name]
        self.backend.start(self._next_config(name))
        if first:
            st.state = "up"
        self._save_node(name)

    # Readiness

    def _expected_peers(self, name: str) -> set[str]:
        st = self.nodes[name]
        return {
            p for p in st.neighbours
            if p in self.nodes and self.nodes[p].reachable and not st.cut_off_from(p)
            and not self.nodes[p].cut_off_from(name)
        }

    def _meshed(self, name: str, status: dict[str, Any]) -> bool:
        st = self.nodes[name]
        if not st.mesh_low:
            return True
        peers = set(status.get("peers", []))
        mesh = status.get("mesh", {})
        for topic in st.topics:
            if topic not in mesh:
                return False
            candidates = [
                p for p in peers
                if p in self.nodes and self.nodes[p].router in MESH_ROUTERS
                and (st.router == "simsub" or topic in self.nodes[p].topics)
            ]
            if len(mesh[topic]) < min(st.mesh_low, len(candidates)):
                return False
        return True

    def wait_ready(
        self, names: Sequence[str], timeout: float, mesh_timeout: float | None = None, quiet: bool = False
    ) -> None:
        """Every node answers its control endpoint and is connected to every
        reachable overlay neighbour (error naming the stragglers), then has a
        mesh (a warning if not after `mesh_timeout`)."""
        reporter = Reporter() if quiet else self.reporter
        pending = set(names)
        last: dict[str, dict[str, Any] | None] = {}
        dead: set[str] = set()
        deadline = time.monotonic() + timeout
        with reporter.phase(f"waiting for {len(names)} nodes to connect", len(names)) as advance:
            while pending and time.monotonic() < deadline:
                for name in sorted(pending):
                    status = self.client(name).try_call("status", timeout=2.0)
                    last[name] = status
                    if status is None:
                        if not self.backend.is_running(name):
                            dead.add(name)
                        continue
                    if self._expected_peers(name) <= set(status.get("peers", [])):
                        pending.discard(name)
                        advance(1)
                if dead & pending:
                    break
                if pending:
                    time.sleep(POLL_S)
        if pending:
            self._fail_ready(sorted(pending), last, dead)
        mesh_pending = set(names)
        mesh_deadline = time.monotonic() + (mesh_timeout if mesh_timeout is not None else 5.0 + 0.05 * len(names))
        with reporter.phase("waiting for meshes", len(names)) as advance:
            while mesh_pending and time.monotonic() < mesh_deadline:
                for name in sorted(mesh_pending):
                    status = self.client(name).try_call("status", timeout=2.0)
                    if status is not None and self._meshed(name, status):
                        mesh_pending.discard(name)
                        advance(1)
                if mesh_pending:
                    time.sleep(POLL_S)
        if mesh_pending:
            shown = ", ".join(sorted(mesh_pending)[:10])
            self._warn(f"{len(mesh_pending)} node(s) had no full mesh after the wait: {shown}")

    def _fail_ready(self, pending: list[str], last: dict[str, Any], dead: set[str]) -> None:
        exited = [n for n in pending if n in dead]
        silent = [n for n in pending if n not in dead and last.get(n) is None]
        partial = [n for n in pending if n not in dead and last.get(n) is not None]
        parts = []
        if exited:
            parts.append(f"exited: {', '.join(exited)} (see {self.run_dir / 'node-logs'})")
        if silent:
            parts.append(f"never answered: {', '.join(silent[:20])}{' ...' if len(silent) > 20 else ''}")
        if partial:
            desc = []
            for n in partial[:20]:
                missing = sorted(self._expected_peers(n) - set(last[n].get("peers", [])))
                desc.append(f"{n} (missing {', '.join(missing[:5])})")
            parts.append(f"not connected: {'; '.join(desc)}")
        self.event("warning", message="nodes never came up: " + "; ".join(parts))
        raise TestbedError(f"{len(pending)} node(s) never came up: " + "; ".join(parts))

    # Workload

    def run_workload(self, resolved: ResolvedExperiment) -> None:
        self.workload_t0_ns = time.time_ns()
        self._set_status("running", workload_t0_ns=self.workload_t0_ns)
        items: list[tuple[float, int, int, Any]] = [(c.at, 0, i, c) for i, c in enumerate(resolved.churn)]
        items += [(p.at, 1, i, p) for i, p in enumerate(resolved.publishes)]
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        end_s = resolved.end_time()
        with self.reporter.phase(f"workload: {len(resolved.publishes)} messages, {len(resolved.churn)} churn actions, {end_s:.1f} s", len(items)) as advance:
            for at, _, _, item in items:
                self._sleep_until(self.workload_t0_ns + round(at * 1e9))
                if isinstance(item, ChurnAction):
                    self.churn(item, wait=False)
                else:
                    self.publish(item)
                advance(1)
            self._sleep_until(self.workload_t0_ns + round(end_s * 1e9))
        self.drain_churn()

    @staticmethod
    def _sleep_until(t_ns: int) -> None:
        while (left := t_ns - time.time_ns()) > 0:
            time.sleep(min(left / 1e9, 0.5))

    def publish(self, p: Publish) -> str | None:
        live = [n for n in p.via if n in self.nodes and self.nodes[n].reachable]
        if not live:
            self._warn(f"message {p.seq}: no live publisher among {list(p.via)}; skipped")
            return None
        t = time.time_ns()
        handed: list[str] = []
        mid = None
        for node in (live[:1] if p.publisher is not None else live):
            try:
                if p.publisher is not None:
                    reply = self.client(node).call("publish", topic=p.topic, size=p.size, seq=p.seq)
                else:
                    reply = self.client(node).call(
                        "inject", **{"from": INJECTOR}, seqno=p.seq + 1, topic=p.topic, size=p.size, seq=p.seq
                    )
            except ControlError as exc:
                self._warn(f"message {p.seq}: {node} refused the publish: {exc}")
                continue
            mid = mid or reply.get("message_id")
            handed.append(node)
        if not handed:
            return None
        self.writer.event(
            t, "publish", node=p.publisher, via=handed, topic=p.topic, message_id=mid, size=p.size, seq=p.seq
        )
        return mid

    # Churn

    def churn(self, action: ChurnAction, wait: bool = True) -> None:
        unknown = [n for n in action.nodes if n not in self.nodes]
        if unknown:
            raise InputError(f"churn {action.action}: unknown node(s) {', '.join(unknown)}")
        self.event(
            "churn", action=action.action, nodes=list(action.nodes),
            **({"topic": action.topic} if action.topic else {}),
            **({"peers": list(action.peers)} if action.peers else {}),
        )
        futures = [self._pool.submit(self._apply_locked, action, n) for n in action.nodes]
        if wait:
            for f in futures:
                f.result()
        else:
            self._pending += futures

    def drain_churn(self) -> None:
        pending, self._pending = self._pending, []
        for f in pending:
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                self._warn(f"churn action failed: {exc}")

    def _apply_locked(self, action: ChurnAction, name: str) -> None:
        with self._locks[name]:
            self._apply(action, name)
            self._save_node(name)

    def _apply(self, action: ChurnAction, name: str) -> None:
        """One verb on one node, with node_down/node_up logged when the node
        really stops or becomes reachable again (a started node is up once it
        is connected and meshed), as the simulator's reachability defines them."""
        st = self.nodes[name]
        verb = action.action

        def went_down(cause: str, was: bool) -> None:
            if was and not st.reachable:
                self.event("node_down", node=name, cause=cause)

        def came_up(cause: str, was: bool) -> None:
            if st.reachable and not was:
                self.event("node_up", node=name, cause=cause)

        was = st.reachable
        if verb in ("kill", "stop"):
            if st.state != "down":
                (self.backend.kill if verb == "kill" else self.backend.stop)(name)
                st.state = "down"
            went_down(verb, was)
        elif verb in ("start", "restart"):
            if verb == "restart" and st.state != "down":
                self.backend.stop(name)
                st.state = "down"
                went_down("stop", was)
                was = False
            if st.state == "down" or not self.backend.is_running(name):
                self._start_node(name)
                self._wait_back(name)
                st.state = "up"
            came_up(verb, was)
        elif verb == "pause":
            if st.state == "up":
                self.backend.pause(name)
                st.state = "paused"
            went_down("pause", was)
        elif verb == "unpause":
            if st.state == "paused":
                self.backend.resume(name)
                st.state = "up"
            came_up("unpause", was)
        elif verb == "disconnect":
            if st.state != "down":
                peers = list(action.peers) or None
                self.backend.disconnect(name, peers)
                if peers is None or st.isolated == []:
                    st.isolated = []
                else:
                    st.isolated = sorted(set(st.isolated or []) | set(peers))
            went_down("disconnect", was)
        elif verb == "reconnect":
            if st.isolated is not None:
                peers = list(action.peers) or None
                if st.state != "down":
                    self.backend.reconnect(name, peers)
                if peers is None or not st.isolated:
                    st.isolated = None
                else:
                    st.isolated = sorted(set(st.isolated) - set(peers)) or None
                if st.reachable and not was:
                    self._wait_back(name)
            came_up("reconnect", was)
        elif verb in ("leave", "join"):
            if not action.topic:
                raise InputError(f"churn {verb} needs a topic")
            if verb == "leave" and action.topic in st.topics:
                st.topics.remove(action.topic)
            elif verb == "join" and action.topic not in st.topics:
                st.topics.append(action.topic)
            if st.state == "up":
                self.client(name).call("unsubscribe" if verb == "leave" else "subscribe", topic=action.topic)
        else:
            raise InputError(f"unknown churn action {verb!r}")

    def _wait_back(self, name: str) -> None:
        """A (re)started or reconnected node: wait until it is connected and
        meshed again, so node_up is logged when it can really receive."""
        try:
            self.wait_ready([name], timeout=20.0, mesh_timeout=5.0, quiet=True)
        except TestbedError as exc:
            self._warn(str(exc))

    # down

    def node_statuses(self) -> dict[str, dict[str, Any] | None]:
        def one(name: str) -> dict[str, Any] | None:
            if self.nodes.get(name) is not None and self.nodes[name].state == "paused":
                return None
            return self.client(name).try_call("status", timeout=2.0)

        with ThreadPoolExecutor(max_workers=8) as pool:
            return dict(zip(self.nodes, pool.map(one, self.nodes), strict=True))

    def down(self) -> list[str]:
        """Stop everything gracefully, collect traces, finish the run directory
        and forget the testbed. Safe to call on a half-started testbed."""
        self.drain_churn()
        self._pool.shutdown(wait=True)
        lags = {n: s.get("lag", {}) for n, s in self.node_statuses().items() if s}
        self.event("run_end")
        with self.reporter.phase("stopping nodes and collecting traces", len(self.nodes)) as advance:
            for name, st in self.nodes.items():
                if st.state == "paused":
                    self.backend.resume(name)
            with ThreadPoolExecutor(max_workers=16) as pool:
                for _ in pool.map(self._stop_quietly, self.nodes):
                    advance(1)
            incomplete: TeardownIncomplete | None = None
            try:
                try:
                    self.backend.collect_traces()
                finally:
                    self.backend.destroy()
                lines = type(self.backend).cleanup(self.testbed)
            except TeardownIncomplete as exc:  # the run directory is finished all the same
                incomplete, lines = exc, exc.removed
                self._warn(str(exc))
        self._check_traces()
        self.write_manifest(final=True, lags=lags)
        self.writer.close()
        if incomplete is not None:
            raise incomplete  # the record stays: a later `testbed down` retries
        self.store.remove(self.testbed)
        return lines

    def _stop_quietly(self, name: str) -> None:
        try:
            if self.backend.is_running(name):
                self.backend.stop(name)
        except Exception as exc:  # noqa: BLE001
            self.warnings.append(f"{name}: stop failed: {exc}")

    def _check_traces(self) -> None:
        missing = [n for n in self.nodes if not (self.run_dir / "traces" / f"{n}.pb").is_file()]
        if missing:
            self._warn(f"no trace for {len(missing)} node(s): {', '.join(missing[:10])}")

    def _read_lag_files(self, lags: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in self.nodes:
            path = self.run_dir / "node-logs" / f"{name}.lag.json"
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if doc.get("samples"):
                lags[name] = {k: doc.get(k) for k in ("p50_ms", "p99_ms", "max_ms", "samples")}
        return lags

    def write_manifest(self, final: bool, lags: dict[str, dict[str, Any]] | None = None) -> None:
        record = self.store.load(self.testbed) or {}
        caps = self.caps.__dict__ if self.caps is not None else record.get("shaping", {})
        t0 = self.t0_ns or record.get("t0_ns")
        manifest: dict[str, Any] = {
            "tool": "gossip-testbed", "version": tool_version(), "backend": self.backend.name,
            "experiment": record.get("experiment"),
            "name": record.get("experiment_name", self.testbed), "testbed": self.testbed,
            "seed": record.get("seed"), "clock": "wall", "t0_ns": t0,
            "workload_t0_ns": self.workload_t0_ns or record.get("workload_t0_ns"),
            "started_at": self.started_at or record.get("started_at"),
            "status": "finished" if final else "up",
            "shaping": {
                "path": caps.get("path"), "netem_available": caps.get("kernel_delay") if self.backend.name != "process" else None,
                "detail": caps.get("detail"),
            },
            "host": host_facts(), "nodes": len(self.nodes),
        }
        isolation = getattr(self.backend, "isolation", None)  # a backend that confines its nodes (docker)
        if isolation is not None:
            manifest["isolation"] = isolation()
        if final:
            manifest["wall_time_s"] = round((time.time_ns() - (t0 or time.time_ns())) / 1e9, 3)
            lags = self._read_lag_files(dict(lags or {}))
            p99s = [v["p99_ms"] for v in lags.values() if v.get("p99_ms") is not None]
            manifest["event_loop_lag"] = {
                "p99_max_ms": max(p99s) if p99s else None,
                "p99_median_ms": sorted(p99s)[len(p99s) // 2] if p99s else None,
                "max_ms": max((v.get("max_ms") or 0 for v in lags.values()), default=None),
                "per_node": lags,
            }
            if p99s and max(p99s) > LAG_WARN_MS:
                worst = max(lags, key=lambda n: lags[n].get("p99_ms") or 0)
                self.warnings.append(
                    f"high event-loop lag: p99 up to {max(p99s):.1f} ms ({worst}); the host was loaded, "
                    "latencies include scheduling delay"
                )
        manifest["warnings"] = list(self.warnings)
        self.writer.write_manifest(manifest)


def down_testbed(testbed: str, store: StateStore | None = None, reporter: Reporter | None = None) -> list[str]:
    """`testbed down NAME`: graceful when the record is sound, cleanup
    whatever happened; idempotent."""
    store = store or StateStore()
    record = store.load(testbed)
    lines: list[str] = []
    if record is not None and not record.get("corrupt"):
        try:
            ctl = Controller.attach(testbed, store, reporter)
            lines += ctl.down()
        except TeardownIncomplete:
            raise  # already tried everything; the record stays
        except TestbedError as exc:
            lines.append(f"{testbed}: graceful stop failed ({exc}); cleaning up")
    backend_names = [record.get("backend")] if record and record.get("backend") in BACKENDS else list(BACKENDS)
    for name in backend_names:
        if not backend_exists(name):
            continue
        try:
            lines += backend_class(name).cleanup(testbed)
        except BackendUnavailable:
            continue
    store.remove(testbed)
    return lines


def down_all(store: StateStore | None = None, reporter: Reporter | None = None) -> list[str]:
    """Every testbed of this state directory, then whatever its labels say
    a killed CLI left; one testbed that cannot be removed does not stop the
    others, and all that is left is reported together at the end."""
    store = store or StateStore()
    lines: list[str] = []
    left: list[str] = []
    for name in store.names():
        try:
            lines += down_testbed(name, store, reporter)
        except TeardownIncomplete as exc:
            lines += exc.removed
            left += exc.left
    for name in BACKENDS:
        if not backend_exists(name):
            continue
        try:
            lines += backend_class(name).cleanup(None)
        except BackendUnavailable:
            continue
        except TeardownIncomplete as exc:
            lines += exc.removed
            left += [line for line in exc.left if line not in left]
    if left:
        raise TeardownIncomplete(left, lines)
    return lines


def run_name(experiment: str) -> str:
    """A testbed name for one `testbed run`: the experiment's, made safe, plus
    a random suffix so a run never collides with a testbed that is up."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in experiment).strip("-._") or "run"
    return f"{safe[:50]}-{secrets.token_hex(3)}"


def run_experiment(
    resolved: ResolvedExperiment, resolved_yaml: str | None, backend_name: str, run_dir: Path | None = None,
    store: StateStore | None = None, reporter: Reporter | None = None, ready_timeout: float | None = None,
) -> Controller:
    """`testbed run`: up, workload and churn, linger, collection and down.
    Whatever fails or is interrupted, the testbed is torn down."""
    ctl = Controller.create(resolved, resolved_yaml, backend_name, run_name(resolved.name), run_dir, store, reporter)
    try:
        ctl.up(ready_timeout)
        ctl.run_workload(resolved)
    except BaseException:
        try:
            ctl.down()
        except Exception:  # noqa: BLE001 - the first error is the one to report
            down_testbed(ctl.testbed, ctl.store)
        raise
    ctl.down()
    return ctl
