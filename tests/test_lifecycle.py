"""The node lifecycle table (orchestrator/experiment/lifecycle.py) and the runners that
read it: the resolver, the simulator, the controller and `testbed churn`
settle the same questions the same way.

The two questions the copies used to disagree on:
- restart of a stopped node: refused everywhere ("use start");
- publishing through a node cut off from everyone: skipped everywhere.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from node.config import LinkShape, NodeConfig
from orchestrator.backends.api import Backend, BackendContext, Capabilities, NodeAddress
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.run.controller import Controller
from orchestrator.errors import InputError
from orchestrator.experiment.model import ChurnAction, LinkParams, NodeSpec, Publish, ResolvedExperiment
from orchestrator.experiment.spec import parse_experiment
from orchestrator.experiment.lifecycle import (
    PROCESS_TABLE,
    Call,
    Ineligible,
    LifeEvent,
    NodeLife,
    Process,
    Verb,
    eligible,
    transition,
    why_not,
)
from orchestrator.run.nodestate import NodeState
from orchestrator.sim.run import run_simulation
from orchestrator.sim.simulator import Simulator
from orchestrator.records.state import StateStore
from orchestrator.run.workload import publish

RUNNING = NodeLife(Process.RUNNING, frozenset({"t"}))
PAUSED = NodeLife(Process.PAUSED, frozenset({"t"}))
STOPPED = NodeLife(Process.STOPPED, frozenset({"t"}))
ISOLATED = NodeLife(Process.RUNNING, frozenset({"t"}), cut_all=True)


# -- the table


@pytest.mark.parametrize(("life", "verb", "calls", "process", "events"), [
    (RUNNING, Verb.KILL, (Call.KILL,), Process.STOPPED, (LifeEvent("node_down", "kill"),)),
    (PAUSED, Verb.KILL, (Call.KILL,), Process.STOPPED, ()),
    (RUNNING, Verb.STOP, (Call.STOP,), Process.STOPPED, (LifeEvent("node_down", "stop"),)),
    (PAUSED, Verb.STOP, (Call.RESUME, Call.STOP), Process.STOPPED, ()),
    (STOPPED, Verb.START, (Call.START,), Process.RUNNING, (LifeEvent("node_up", "start"),)),
    (RUNNING, Verb.RESTART, (Call.STOP, Call.START), Process.RUNNING,
     (LifeEvent("node_down", "stop"), LifeEvent("node_up", "restart"))),
    (PAUSED, Verb.RESTART, (Call.RESUME, Call.STOP, Call.START), Process.RUNNING, (LifeEvent("node_up", "restart"),)),
    (RUNNING, Verb.PAUSE, (Call.PAUSE,), Process.PAUSED, (LifeEvent("node_down", "pause"),)),
    (PAUSED, Verb.UNPAUSE, (Call.RESUME,), Process.RUNNING, (LifeEvent("node_up", "unpause"),)),
    (ISOLATED, Verb.RESTART, (Call.STOP, Call.START), Process.RUNNING, (LifeEvent("node_up", "restart"),)),
])
def test_process_verbs(life, verb, calls, process, events):
    change = transition(life, verb)
    assert change.calls == calls
    assert change.life.process is process
    assert change.events == events


def test_every_process_verb_is_in_the_table_or_refused_with_a_reason():
    for process in Process:
        for verb in (Verb.KILL, Verb.STOP, Verb.START, Verb.RESTART, Verb.PAUSE, Verb.UNPAUSE):
            why = why_not(NodeLife(process), verb)
            assert (why is None) == ((process, verb) in PROCESS_TABLE), (process, verb)
            if why is not None:
                with pytest.raises(Ineligible, match=why.split(" (")[0]):
                    transition(NodeLife(process), verb)


def test_restart_needs_a_running_node():
    assert why_not(STOPPED, Verb.RESTART) == "it is not running (killed or stopped); use start"
    assert eligible(RUNNING, Verb.RESTART) and eligible(PAUSED, Verb.RESTART)


def test_a_stopped_process_keeps_no_partition():
    cut = transition(RUNNING, Verb.DISCONNECT, peers=("n2",)).life
    assert cut.cut == {"n2"} and cut.reachable and cut.cut_off_from("n2") and not cut.cut_off_from("n3")
    assert transition(cut, Verb.RESTART).life == RUNNING
    assert transition(transition(ISOLATED, Verb.KILL).life, Verb.START).life == RUNNING
    assert why_not(transition(ISOLATED, Verb.KILL).life, Verb.RECONNECT) == "it is not running"


def test_partitions():
    down = transition(RUNNING, Verb.DISCONNECT)
    assert down.life.cut_all and down.events == (LifeEvent("node_down", "disconnect"),)
    assert why_not(down.life, Verb.DISCONNECT) == "it is already disconnected from everyone"
    assert "without 'peers'" in why_not(down.life, Verb.RECONNECT, peers=("n2",))
    back = transition(down.life, Verb.RECONNECT)
    assert back.life == RUNNING and back.events == (LifeEvent("node_up", "reconnect"),)
    some = transition(RUNNING, Verb.DISCONNECT, peers=("n2", "n3")).life
    assert why_not(some, Verb.DISCONNECT, peers=("n2",)) == "it is already disconnected from all those peers"
    assert transition(some, Verb.RECONNECT, peers=("n2",)).life.cut == {"n3"}
    assert why_not(RUNNING, Verb.RECONNECT) == "it is not disconnected"
    assert why_not(PAUSED, Verb.DISCONNECT) == "it is paused"


def test_leave_and_join_need_a_reachable_node():
    assert transition(RUNNING, Verb.LEAVE, "t").life.topics == frozenset()
    assert transition(RUNNING, Verb.JOIN, "u").calls == (Call.SUBSCRIBE,)
    assert "not subscribed" in why_not(RUNNING, Verb.LEAVE, "u")
    assert "already subscribed" in why_not(RUNNING, Verb.JOIN, "t")
    for life in (STOPPED, PAUSED, ISOLATED):
        assert "not reachable" in why_not(life, Verb.LEAVE, "t")
    assert why_not(RUNNING, Verb.LEAVE) == "leave needs a topic"


def test_records_round_trip():
    life = NodeLife(Process.PAUSED, frozenset({"a", "b"}), cut=frozenset({"n1"}))
    assert NodeLife.from_record(life.to_record()) == life


# -- disagreement 1: restart of a stopped node, the same everywhere

EXP = """\
name: life
seed: 1
nodes: {count: 6, router: gossipsub, topics: [t]}
overlay: {type: random, degree: 3}
workload: {topic: t, messages: 4, interval: 1, publishers: {nodes: [n0]}}
churn:
  timeline:
%s
"""


def test_resolver_refuses_restart_of_a_stopped_node():
    text = EXP % textwrap.indent("- {at: 1, action: kill, select: {nodes: [n3]}}\n"
                                 "- {at: 2, action: restart, select: {nodes: [n3]}}", "    ")
    with pytest.raises(InputError, match="cannot restart n3: it is not running .*use start"):
        parse_experiment(text, "life.yaml").resolve()


def resolved(churn: tuple[ChurnAction, ...] = (), publishes: tuple[Publish, ...] = ()) -> ResolvedExperiment:
    names = [f"n{i}" for i in range(4)]
    nodes = tuple(NodeSpec(n, "default", "gossipsub", {}, ("t",), 10 + i) for i, n in enumerate(names))
    edges = tuple((names[i], names[(i + 1) % 4]) for i in range(4))
    return ResolvedExperiment(
        name="life", source="tests/test_lifecycle.py", seed=1, nodes=nodes, edges=edges, links={},
        default_link=LinkParams(latency_ms=5.0), publishes=publishes, churn=churn, expectations=(),
        duration=4.0, linger=1.0,
    )


def simulate(tmp_path: Path, exp: ResolvedExperiment) -> list[tuple[str, dict]]:
    events: list[tuple[str, dict]] = []
    Simulator(exp, tmp_path / "traces", lambda t, kind, **f: events.append((kind, f))).run()
    return events


def test_simulator_skips_restart_of_a_stopped_node(tmp_path):
    events = simulate(tmp_path, resolved(churn=(ChurnAction(1.0, "kill", ("n1",)), ChurnAction(2.0, "restart", ("n1",)))))
    assert ("node_down", {"node": "n1", "cause": "kill"}) in events
    assert not any(kind == "node_up" for kind, _ in events)
    assert any(kind == "warning" and "restart on n1 skipped: it is not running" in f["message"] for kind, f in events)


class RecordingBackend(Backend):
    """A backend that runs nothing and records what it is asked to do."""

    name = "recording"
    capabilities = Capabilities(kernel_shaping=False, netem=False, partitions=True, pause=True)

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.calls: list[tuple[str, str]] = []

    def _record(self, call: str, node: str) -> None:
        self.calls.append((call, node))

    def prepare(self, nodes: Sequence[str]) -> dict[str, NodeAddress]:
        return {}

    def shaping_capabilities(self) -> ShapingCapabilities:
        return ShapingCapabilities(False, False, "userspace", "records calls")

    def start(self, config: NodeConfig) -> None:
        self._record("start", config.name)

    def stop(self, node: str) -> None:
        self._record("stop", node)

    def kill(self, node: str) -> None:
        self._record("kill", node)

    def pause(self, node: str) -> None:
        self._record("pause", node)

    def resume(self, node: str) -> None:
        self._record("resume", node)

    def disconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self._record("disconnect", node)

    def reconnect(self, node: str, peers: Sequence[str] | None = None) -> None:
        self._record("reconnect", node)

    def apply_kernel_shaping(self, node: str, per_peer: Mapping[str, LinkShape], uplink_bps: int | None) -> list[str]:
        return []

    def is_running(self, node: str) -> bool:
        return True

    def collect_traces(self) -> None:
        pass

    def destroy(self) -> None:
        pass

    @classmethod
    def cleanup(cls, testbed: str | None, store: StateStore) -> list[str]:
        return []


def recording_controller(tmp_path: Path, lives: dict[str, NodeLife]) -> Controller:
    store = StateStore(tmp_path / "state")
    store.create({"name": "rec", "backend": "recording", "nodes": {}})
    backend = RecordingBackend(BackendContext("rec", tmp_path / "run", store))
    nodes = {n: NodeState(n, "floodsub", 1, [], 0, life) for n, life in lives.items()}
    return Controller("rec", backend, tmp_path / "run", store, nodes)


def test_controller_skips_restart_of_a_stopped_node(tmp_path):
    ctl = recording_controller(tmp_path, {"n1": STOPPED, "n2": RUNNING})
    ctl.churn(ChurnAction(0.0, "restart", ("n1",)))
    assert ctl.backend.calls == []
    assert ctl.nodes["n1"].life == STOPPED
    assert any("restart on n1 skipped: it is not running" in w for w in ctl.warnings)
    ctl.churn(ChurnAction(0.0, "kill", ("n2",)))
    assert ctl.backend.calls == [("kill", "n2")]
    ctl.writer.close()


def test_controller_resumes_a_paused_node_before_stopping_it(tmp_path):
    ctl = recording_controller(tmp_path, {"n1": PAUSED})
    ctl.churn(ChurnAction(0.0, "stop", ("n1",)))
    assert ctl.backend.calls == [("resume", "n1"), ("stop", "n1")]
    assert ctl.nodes["n1"].life.process is Process.STOPPED
    ctl.writer.close()


# -- disagreement 2: publishing through a node cut off from everyone


def test_simulator_does_not_publish_through_a_disconnected_node(tmp_path):
    exp = resolved(
        churn=(ChurnAction(1.0, "disconnect", ("n0",)),),
        publishes=(Publish(0, 0.5, "t", 32, "n0", ("n0",)), Publish(1, 2.0, "t", 32, "n0", ("n0",))),
    )
    events = simulate(tmp_path, exp)
    assert [f["seq"] for kind, f in events if kind == "publish"] == [0]
    assert any(kind == "warning" and "message 1: no live publisher" in f["message"] for kind, f in events)
    run_simulation(exp, "name: life\n", tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["warnings"] == ["message 1: no live publisher among ['n0']; skipped"]


def test_controller_does_not_publish_through_a_disconnected_node(tmp_path):
    ctl = recording_controller(tmp_path, {"n0": ISOLATED})
    warnings: list[str] = []
    assert publish(Publish(1, 0.0, "t", 32, "n0", ("n0",)), ctl.nodes, ctl.backend, ctl.writer, warnings.append) is None
    assert warnings == ["message 1: no live publisher among ['n0']; skipped"]
    ctl.writer.close()


def test_resolver_does_not_pick_a_disconnected_publisher():
    text = EXP % textwrap.indent("- {at: 0.5, action: disconnect, select: {nodes: [n0]}}", "    ")
    with pytest.raises(InputError, match="none of the publishers .* is up"):
        parse_experiment(text, "life.yaml").resolve()
