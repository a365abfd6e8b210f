"""The run controller: drives a resolved experiment on a real backend,
whichever backend it is (it never asks for a backend's name).

    up:      record the testbed in the state store, write the run directory
             (experiment.resolved.yaml, topology.json, events.jsonl), allocate
             addresses, build every NodeConfig (user-space shaping for what the
             backend's kernel cannot do), start every node, wait until the
             testbed is ready (orchestrator/run/readiness.py);
    workload: publishes and the churn timeline on the wall clock (orchestrator/run/workload.py,
             slowed down by orchestrator/run/wallclock.py when dilated); churn verbs mean
             what the lifecycle table says (orchestrator/experiment/lifecycle.py);
    down:    stop every node gracefully (LEAVE, flush), collect traces, remove
             what the backend created, write manifest.json
             (orchestrator/records/manifest.py), forget the testbed.

`testbed up` leaves a testbed running after `up`; `status`, `publish`,
`churn` and `down` are later CLI invocations that `attach` to it from the
state store. `testbed run` does everything in one go.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from node.config import NodeConfig
from node.dilation import DilatedClock
from node.trace.vocab import RunEvent
from node.atomic import write_atomic
from orchestrator.backends.api import Backend, BackendContext, NodeAddress, check_capabilities
from orchestrator.backends.registry import backend_class, make_backend
from orchestrator.errors import InputError, TeardownIncomplete, TestbedError
from orchestrator.experiment.model import ChurnAction, Publish, ResolvedExperiment
from orchestrator.experiment.resolve import incarnation_seed
from orchestrator.routers.kinds import kind_of
from orchestrator.routers.colocation import check_packing
from orchestrator.routers.foreign_nodes import ForeignNodes
from orchestrator.experiment.lifecycle import Call, Ineligible, NodeLife, Process, Verb, drive
from orchestrator.records.manifest import build_manifest, lag_summary, read_lag_files
from orchestrator.routers.nodeconfigs import build_configs, late_dials
from orchestrator.run import left_early
from orchestrator.run.churn import BackendRunner
from orchestrator.run.late_dials import LateDial, LateDialer, timeline
from orchestrator.run.nodestate import NodeState
from orchestrator.routers.peers import wire_facts
from orchestrator.progress import Reporter
from orchestrator.run.readiness import Readiness
from orchestrator.records.router_cpu import record_sample
from orchestrator.records.rundir import default_run_dir
from orchestrator.records.runinfo import RunWriter
from orchestrator.records.state import StateStore, check_name, recorded_configs
from orchestrator.shaping.split import ShapingCapabilities, shape_in_kernel
from orchestrator.run.wallclock import on_wall_clock
from orchestrator.run.drain import DRAIN_S, drain
from orchestrator.run.workload import (
    QUIET_POLL_S, last_action_s, linger_until_quiet, publish, run_timeline, sleep_until, start_lag_window,
    tell_covert_sybils,
)


class Controller:
    def __init__(
        self, testbed: str, backend: Backend, run_dir: Path, store: StateStore,
        nodes: dict[str, NodeState], reporter: Reporter | None = None,
    ) -> None:
        self.testbed = testbed
        self.backend = backend
        self.run_dir = run_dir
        self.store = store
        self.nodes = nodes
        self.configs: dict[str, NodeConfig] = {}
        self.reporter = reporter or Reporter()
        self.writer = RunWriter(run_dir)
        self.warnings: list[str] = []
        self.caps: ShapingCapabilities | None = None
        self.readiness = Readiness(nodes, backend, self._warn, self.event)
        self.addresses: dict[str, tuple[str, int]] = {}  # each node's, as its peers dial it
        self.late = LateDialer(nodes, backend, self.addresses.__getitem__, self._warn)
        self.foreign = ForeignNodes(run_dir, drain_s=DRAIN_S)
        self.runner = BackendRunner(backend, self._next_config)
        self._locks = {name: threading.Lock() for name in nodes}
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="churn")
        self._pending: list[Any] = []
        self.resolved: ResolvedExperiment | None = None
        self.record: dict[str, Any] = {}
        self.t0_ns: int | None = None
        self.workload_t0_ns: int | None = None
        self.started_at: str | None = None
        self._cpu_at_workload = False  # router-cpu.json's "workload" sample is taken at the first publish
        self.foreign_outputs: dict[str, dict[str, Any]] = {}
        self.gone_at_down: tuple[list[str], int] = ([], 0)  # left_early.gone when down began, and when
        self.script_slack_ns = 0  # from writing bare images' scripts to their start returning

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
        reporter = reporter or Reporter()
        testbed = check_name(testbed or resolved.name)
        check_capabilities(backend_class(backend_name), {c.action for c in resolved.churn})
        ForeignNodes(Path(), resolved).check(backend_class(backend_name))
        check_packing(resolved, backend_class(backend_name))
        if store.exists(testbed):
            raise InputError(f"a testbed named {testbed!r} is already up; `testbed down {testbed}` or use --name")
        run_dir = Path(run_dir or default_run_dir(resolved.name, backend_name)).resolve()
        names = [n.name for n in resolved.nodes]
        if len(set(names)) != len(names):
            raise InputError("node names must be unique")
        neighbours = resolved.neighbours()
        late = late_dials(on_wall_clock(resolved))
        waiting: dict[str, list[str]] = {}
        for dialler, peers in late.items():
            for peer in peers:
                waiting.setdefault(dialler, []).append(peer)
                waiting.setdefault(peer, []).append(dialler)
        nodes = {
            s.name: NodeState(s.name, s.router, s.seed, neighbours[s.name], kind_of(s.router).engine.mesh_low(s.params),
                              NodeLife(Process.STOPPED, frozenset(s.topics)), late=late.get(s.name, {}),
                              waiting=sorted(waiting.get(s.name, [])))
            for s in resolved.nodes
        }
        store.create({
            "name": testbed, "backend": backend_name, "run_dir": str(run_dir), "token": secrets.token_hex(16),
            "status": "starting", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cli_pid": os.getpid(), "experiment": resolved.source, "experiment_name": resolved.name,
            "seed": resolved.seed, "t0_ns": time.time_ns(), "nodes": {}, "wire_facts": wire_facts(resolved),
            "time_dilation": resolved.time_dilation,
        })
        try:
            backend = make_backend(backend_name, BackendContext(testbed, run_dir, store, reporter))
            ctl = cls(testbed, backend, run_dir, store, nodes, reporter)
            ctl.resolved = ctl.foreign.resolved = resolved
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
        reporter = reporter or Reporter()
        record = store.load(testbed)
        if record is None:
            raise InputError(f"no testbed named {testbed!r} (see `testbed status`)")
        if record.get("corrupt"):
            raise TestbedError(f"the record of testbed {testbed!r} is unreadable; `testbed down {testbed}` cleans up")
        run_dir = Path(record["run_dir"])
        nodes = {
            name: NodeState.from_record(name, entry.get("spec", {}))
            for name, entry in sorted((record.get("nodes") or {}).items())
        }
        if not record.get("backend"):
            raise TestbedError(f"the record of testbed {testbed!r} names no backend; `testbed down {testbed}` cleans up")
        backend = make_backend(record["backend"], BackendContext(testbed, run_dir, store, reporter))
        ctl = cls(testbed, backend, run_dir, store, nodes, reporter)
        ctl.configs = recorded_configs(record)
        ctl.addresses.update({name: (entry["host"], int(entry["port"]))
                              for name, entry in (record.get("nodes") or {}).items() if "host" in entry})
        ctl.record = record
        ctl.writer.clock = DilatedClock(record.get("t0_ns") or 0, record.get("time_dilation", 1.0))
        return ctl

    # Helpers

    def event(self, kind: str, **fields: Any) -> None:
        self.writer.event(time.time_ns(), kind, **fields)

    def _save_node(self, node: str) -> None:
        self.store.set_node(self.testbed, node, spec=self.nodes[node].to_record())

    def _set_status(self, status: str, **extra: Any) -> None:
        def change(record: dict[str, Any]) -> None:
            record["status"] = status
            record.update(extra)

        self.store.update(self.testbed, change)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.event(RunEvent.WARNING, message=message)
        self.reporter.note(f"[yellow]warning:[/] {message}")

    # up

    def up(self, ready_timeout: float | None = None, with_workload: bool = False) -> None:
        """Start every node; `with_workload`: the workload follows (`testbed
        run`), so bare images get their publishes in their scripts."""
        resolved = self.resolved
        assert resolved is not None, "up() needs a controller made by create()"
        names = [n.name for n in resolved.nodes]
        self.t0_ns = time.time_ns()
        self.writer.clock = clock = DilatedClock(self.t0_ns, resolved.time_dilation)
        wall = on_wall_clock(resolved)  # links slowed down when the experiment is dilated
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.event(RunEvent.RUN_START)
        for spec in resolved.nodes:
            if spec.memory or spec.cpus:
                self.backend.set_resources(spec.name, spec.memory, spec.cpus)
            if spec.placement:
                self.backend.set_placement(spec.name, spec.placement)
            if spec.host is not None and spec.host != spec.name:
                self.backend.set_host(spec.name, spec.host)
        addresses = self.backend.prepare(names)
        self.caps = self.backend.shaping_capabilities()
        if self.caps.path != "netem":
            self.reporter.note(f"shaping: {self.caps.path} ({self.caps.detail})")
        token = (self.store.load(self.testbed) or {}).get("token", "")
        self.configs = build_configs(wall, addresses, self.caps, token, self.run_dir, clock)
        if (unshaped := self.foreign.configured(self.caps, self.backend.capabilities.foreign_proxy)) is not None:
            self._warn(unshaped)
        self._record_nodes(names, addresses)
        self._set_status("starting", shaping=self.caps.__dict__, t0_ns=self.t0_ns, started_at=self.started_at)
        with self.reporter.phase(f"starting {len(names)} nodes", len(names)) as advance:
            # Bare images last, their scripts written for a workload start fixed just before (foreign_nodes.py).
            first, bare = self.foreign.start_order()
            written = time.time_ns()
            for batch in (first, bare):
                if batch is bare and batch:  # the nodes a bare image dials listen before it starts
                    self.readiness.listening(first, clock.wall_s(30.0) + 0.3 * len(first), self.reporter)
                if batch is bare and with_workload:
                    written = time.time_ns()
                    self.workload_t0_ns = self.foreign.plan_workload(written)
                self.foreign.before_batch(self.workload_t0_ns, with_workload, batch)
                self.backend.start_many([self._next_config(name) for name in batch])
            self.script_slack_ns = time.time_ns() - written if self.workload_t0_ns else 0
            for name in names:
                st = self.nodes[name]
                st.life = replace(st.life, process=Process.RUNNING)
                self._save_node(name)
            advance(len(names))
        shape_in_kernel(self.backend, wall, self.caps, names)
        timeout = ready_timeout if ready_timeout is not None else clock.wall_s(30.0) + 0.3 * len(names)
        self.readiness.wait(names, timeout, self.reporter)
        self.event(RunEvent.ALL_UP, nodes=len(names))
        if not with_workload:
            self._open_late_now()
        self._sample_cpu("up")
        self._set_status("up", up_at_ns=time.time_ns(), lag_at_up=start_lag_window(self.nodes, self.backend))
        self.write_manifest(final=False)

    def _record_nodes(self, names: list[str], addresses: dict[str, NodeAddress]) -> None:
        """Each node's config file and addresses in the testbed's record, for
        the nodes' start and for later CLI processes."""
        cfg_dir = self.store.dir(self.testbed) / "configs"
        cfg_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in names:
            cfg_path = cfg_dir / f"{name}.json"
            write_atomic(cfg_path, self.configs[name].to_json(), 0o600)
            self.store.set_node(
                self.testbed, name, spec=self.nodes[name].to_record(), config=str(cfg_path),
                host=addresses[name].host, port=addresses[name].port,
                control_host=addresses[name].control_host, control_port=addresses[name].control_port,
            )
            self.addresses[name] = (addresses[name].host, addresses[name].port)

    def _next_config(self, name: str) -> NodeConfig:
        """The config of the node's next incarnation: a restarted node gets a
        fresh, reproducible engine seed and the topics it is in now."""
        st = self.nodes[name]
        st.incarnation += 1
        seed = incarnation_seed(st.seed, st.incarnation)
        self.foreign.before_start(name, time.time_ns())
        return replace(self.configs[name], seed=seed, topics=tuple(sorted(st.topics)))

    # Workload

    def run_workload(self, resolved: ResolvedExperiment) -> None:
        """Publishes and churn at their times, then the linger: the fixed
        one, or with `linger: auto` until the network is quiet (at most
        until the experiment's end). All of it on the wall clock's time."""
        written, resolved = resolved, on_wall_clock(resolved)
        t0, end_ns, late = self.foreign.workload_window(self.workload_t0_ns, self.script_slack_ns, time.time_ns(),
                                                        resolved.end_time())
        self.workload_t0_ns = t0
        if late is not None:
            self._warn(late)
        self._set_status("running", workload_t0_ns=t0)
        if silent := tell_covert_sybils(resolved, self.nodes, self.backend, self.writer.clock.virtual_ns(t0)):
            self._warn(f"covert sybils that did not learn when the workload began stay honest: {', '.join(silent)}")
        run_timeline(resolved, t0, self.reporter, self.publish, lambda action: self.churn(action, wait=False),
                     timeline(self.nodes), self._open_late_in_the_run)
        if resolved.linger_auto:
            sleep_until(t0 + round(last_action_s(resolved) * 1e9))
            self.drain_churn()
            clock = self.writer.clock
            took = linger_until_quiet(self.nodes, self.backend, end_ns, self.reporter,
                                      poll_s=clock.wall_s(QUIET_POLL_S))
            if took is None:
                self._warn(f"linger: auto: the network was still busy at the linger bound "
                           f"({written.end_time():g} s after the start of the workload)")
            else:
                self.event(RunEvent.QUIET, after_s=round(took / clock.factor, 3))
        else:
            sleep_until(end_ns)
        self.drain_churn()

    def publish(self, p: Publish) -> str | None:
        if not self._cpu_at_workload:
            self._cpu_at_workload = True
            self._sample_cpu("workload")
        return publish(p, self.nodes, self.backend, self.writer, self._warn)

    def _open_late_now(self) -> None:
        """`up` without a workload: nothing times the late edges, so they open at once."""
        late = timeline(self.nodes)
        if late:
            self.reporter.note("connect_at: with no workload to time them, the late edges are dialled now")
        for _, dials in late:
            self.late.connect(self._open_late(dials))

    def _open_late(self, dials: tuple[LateDial, ...]) -> tuple[LateDial, ...]:
        """These edges open; the dials to make."""
        self.event(RunEvent.EDGES_OPEN, edges=len(dials))
        due = self.late.open(dials)
        for name in sorted({n for d in dials for n in (d.dialler, d.peer)}):
            self._save_node(name)
        return due

    def _open_late_in_the_run(self, dials: tuple[LateDial, ...]) -> None:
        """In the workload, the dials are made beside it, as churn is, so a
        publish due meanwhile is not held up by them."""
        self._pending.append(self._pool.submit(self.late.connect, self._open_late(dials)))

    # Churn

    def churn(self, action: ChurnAction, wait: bool = True) -> None:
        unknown = [n for n in action.nodes if n not in self.nodes]
        if unknown:
            raise InputError(f"churn {action.action}: unknown node(s) {', '.join(unknown)}")
        check_capabilities(self.backend, {action.action})
        self.event(
            RunEvent.CHURN, action=action.action, nodes=list(action.nodes),
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
        """One verb on one node, step by step as the lifecycle table says,
        with node_down/node_up logged when each step is done (a started or
        reconnected node is up once it is connected and meshed)."""
        st = self.nodes[name]
        steps = drive(self.runner, name, st.life, Verb(action.action), action.topic, action.peers)
        try:
            for step in steps:
                st.life = step.life
                if step.call is Call.START:
                    self.late.redial(name)
                if step.call in (Call.START, Call.RECONNECT) and st.reachable:
                    self._wait_back(name)
                for ev in step.events:
                    self.event(ev.kind, node=name, cause=ev.cause)
        except Ineligible as exc:
            self._warn(f"churn {action.action} on {name} skipped: {exc}")

    def _wait_back(self, name: str) -> None:
        try:
            self.readiness.wait([name], timeout=20.0, reporter=Reporter(), mesh_timeout=5.0)
        except TestbedError as exc:
            self._warn(str(exc))

    # down

    def node_statuses(self) -> dict[str, dict[str, Any] | None]:
        """Every node's status, asked concurrently; None for a paused node."""
        live = [n for n, st in self.nodes.items() if st.life.process is not Process.PAUSED]
        found = self.readiness.statuses(live)
        return {n: found.get(n) for n in self.nodes}

    def down(self) -> list[str]:
        """Stop everything gracefully, collect traces, finish the run directory
        and forget the testbed. Safe to call on a half-started testbed."""
        self.drain_churn()
        self._pool.shutdown(wait=True)
        self._sample_cpu("down")
        self.event(RunEvent.RUN_END)
        for name, st in self.nodes.items():
            if st.life.process is Process.PAUSED:
                self.backend.resume(name)
        self.gone_at_down = (left_early.gone(self.nodes, self.backend), time.time_ns())
        answers = drain(self.nodes, self.backend, self.reporter, self.writer.clock)
        lags = {n: answer.get("lag", {}) for n, answer in answers.items() if answer is not None}
        if silent := sorted(n for n, answer in answers.items() if answer is None):
            self._warn(f"{len(silent)} router(s) did not answer at the end: stopped or hung on their own during the run "
                       f"(see node-logs/): {', '.join(silent[:10])}")
        with self.reporter.phase("stopping nodes and collecting traces", len(self.nodes)) as advance:
            incomplete: TeardownIncomplete | None = None
            try:  # a stop that leaves containers Docker cannot be asked about ends here, with the record kept
                for name, why in self.backend.stop_many(list(self.nodes)).items():
                    self.warnings.append(f"{name}: stop failed: {why}")
                advance(len(self.nodes))
                try:
                    self.backend.collect_traces()
                finally:
                    self.backend.destroy()
                    lines = type(self.backend).cleanup(self.testbed, self.store)
            except TeardownIncomplete as exc:  # the run directory is finished all the same
                incomplete, lines = exc, exc.removed
                self._warn(str(exc))
        self.foreign_outputs, warnings = self.foreign.after_down(list(self.nodes))
        for message in self.backend.collection_warnings() + warnings:
            self._warn(message)
        self._check_traces()
        self.write_manifest(final=True, lags=lags)
        self.writer.close()
        if incomplete is not None:  # the record stays, "finished": a later `down` only removes what is left
            self._set_status("finished")
            raise incomplete
        self.store.remove(self.testbed)
        return lines

    def _sample_cpu(self, at: str) -> None:
        """router-cpu.json (orchestrator/records/router_cpu.py); failing costs the figure, never the run."""
        try:
            record_sample(self.run_dir, at, self.backend.cpu_seconds(), self.backend.cpu_source)
        except Exception as exc:  # noqa: BLE001
            self._warn(f"router CPU at {at} not recorded: {exc}")

    def _check_traces(self) -> None:
        if missing := [n for n in self.nodes if not (self.run_dir / "traces" / f"{n}.pb").is_file()]:
            self._warn(f"no trace for {len(missing)} node(s): {', '.join(missing[:10])}")

    def write_manifest(self, final: bool, lags: dict[str, dict[str, Any]] | None = None) -> None:
        record = self.store.load(self.testbed) or {}
        caps = self.caps.__dict__ if self.caps is not None else record.get("shaping", {})
        t0 = self.t0_ns or record.get("t0_ns")
        workload_t0 = self.workload_t0_ns or record.get("workload_t0_ns")  # on the wall clock, like t0
        extra: dict[str, Any] = {"testbed": self.testbed, "status": "finished" if final else "up",
                                 **record.get("wire_facts", {})}
        if self.caps is not None:
            routers = {n: st.router for n, st in self.nodes.items()}
            extra["node_facts"] = self.foreign.node_facts(routers, self.caps, self.backend.capabilities.foreign_proxy)
        extra.update({"foreign_outputs": self.foreign_outputs} if self.foreign_outputs else {})
        if (isolation := self.backend.isolation()) is not None:
            extra["isolation"] = isolation
        if self.writer.clock.factor != 1.0:
            extra["time_dilation"] = self.writer.clock.factor
        extra.update(self.backend.manifest_facts())
        if final:
            self.warnings.extend(self.backend.shaping_warnings())
            extra["wall_time_s"] = round((time.time_ns() - (t0 or time.time_ns())) / 1e9, 3)
            extra["event_loop_lag"], warning = lag_summary(read_lag_files(self.run_dir, list(self.nodes), lags or {}))
            extra["event_loop_lag_at_up"] = lag_summary(record.get("lag_at_up") or {})[0]
            if warning:
                self.warnings.append(warning)
            if left := left_early.facts(self.run_dir, *self.gone_at_down, workload_t0):
                extra["left_early"] = left
                self.warnings.append(left_early.warning(left))
        self.writer.write_manifest(build_manifest(
            backend=self.backend.name, experiment=record.get("experiment"),
            name=record.get("experiment_name", self.testbed), seed=record.get("seed"), clock="wall", t0_ns=t0,
            workload_t0_ns=self.writer.clock.virtual_ns(workload_t0) if workload_t0 else None,
            started_at=self.started_at or record.get("started_at"), shaping_path=caps.get("path"),
            netem_available=caps.get("path") == "netem" if self.backend.capabilities.kernel_shaping else None,
            shaping_detail=caps.get("detail"), nodes=len(self.nodes), warnings=self.warnings, **extra,
        ))
