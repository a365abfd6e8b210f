"""A node's lifecycle: what each churn verb means, written once.

The resolver (which churn actions make sense when), the controller (what
the backend is asked to do), the simulator (what happens to an engine) and
the CLI (`testbed churn`, which nodes a verb can pick) all read this table,
so a verb cannot mean one thing in a simulated run and another on Docker.

In the style of h11's `_state.py`: the process part of a node's state is a
small enum, and `PROCESS_TABLE` maps (state, verb) to the backend calls to
make, each with the state it leaves the node in. Connectivity (who the node is cut off
from) and subscriptions change by the rules in `transition`. The events a
run logs (node_down/node_up and their cause) follow from reachability
before, during and after: a node is reachable when its process runs, is not
paused and is not cut off from everyone.

Rules the copies used to disagree on, settled here (docs/architecture.md
says why):
- `restart` needs a running (or paused) process; a stopped node is started
  with `start`. Otherwise a restart of a dead node would log a node_down for
  a node that was already down, or not, depending on who applied it.
- The workload publishes, and leave/join are applied, only through a
  reachable node. The orchestrator reaches a node over the network it is
  cut off from (Docker's full disconnect takes the container off it), and a
  message published by a node nobody can hear measures the workload's
  choice of publisher, not the router.
- A stopped process keeps no partition: a started node has a fresh network
  namespace (Docker) or a fresh router (processes), so it comes back
  connected to everyone.
- Stopping a paused node unpauses it first, so the stop is graceful (a
  frozen process cannot handle SIGTERM).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from node.trace.vocab import RunEvent


class Verb(str, enum.Enum):
    """The churn verbs, as experiment files and `testbed churn` spell them."""

    KILL = "kill"
    STOP = "stop"
    START = "start"
    RESTART = "restart"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    DISCONNECT = "disconnect"
    RECONNECT = "reconnect"
    LEAVE = "leave"
    JOIN = "join"


class Process(str, enum.Enum):
    """The node's process (or container); the values are what the state store
    and `testbed status` show."""

    RUNNING = "up"
    PAUSED = "paused"
    STOPPED = "down"


class Call(str, enum.Enum):
    """One thing a runner does to a node, in the backend's words."""

    KILL = "kill"
    STOP = "stop"
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    DISCONNECT = "disconnect"
    RECONNECT = "reconnect"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"


# The verb that undoes each undoable verb (a timeline entry's `for`, the end
# of a steady-churn down time).
UNDO: dict[Verb, Verb] = {
    Verb.KILL: Verb.START, Verb.STOP: Verb.START, Verb.PAUSE: Verb.UNPAUSE,
    Verb.DISCONNECT: Verb.RECONNECT, Verb.LEAVE: Verb.JOIN,
}

_R, _P, _S = Process.RUNNING, Process.PAUSED, Process.STOPPED

# (state, verb) -> the calls in order, each with the state it leaves the node
# in and the cause its node_down/node_up carries. None: the call is a means
# to an end and the node's modelled state does not change (a paused node is
# resumed only so that it can be stopped gracefully).
PROCESS_TABLE: dict[tuple[Process, Verb], tuple[tuple[Call, Process | None, str], ...]] = {
    (_R, Verb.KILL): ((Call.KILL, _S, "kill"),),
    (_P, Verb.KILL): ((Call.KILL, _S, "kill"),),
    (_R, Verb.STOP): ((Call.STOP, _S, "stop"),),
    (_P, Verb.STOP): ((Call.RESUME, None, ""), (Call.STOP, _S, "stop")),
    (_S, Verb.START): ((Call.START, _R, "start"),),
    (_R, Verb.RESTART): ((Call.STOP, _S, "stop"), (Call.START, _R, "restart")),
    (_P, Verb.RESTART): ((Call.RESUME, None, ""), (Call.STOP, _S, "stop"), (Call.START, _R, "restart")),
    (_R, Verb.PAUSE): ((Call.PAUSE, _P, "pause"),),
    (_P, Verb.UNPAUSE): ((Call.RESUME, _R, "unpause"),),
}

_PROCESS_NEEDS = {
    Verb.KILL: "running", Verb.STOP: "running", Verb.RESTART: "running",
    Verb.START: "killed or stopped", Verb.PAUSE: "running and not paused", Verb.UNPAUSE: "paused",
}
_WHY_NOT_PROCESS = {
    (_S, Verb.KILL): "it is not running (killed or stopped)",
    (_S, Verb.STOP): "it is not running (killed or stopped)",
    (_S, Verb.RESTART): "it is not running (killed or stopped); use start",
    (_R, Verb.START): "it is already running",
    (_P, Verb.START): "it is already running",
    (_S, Verb.PAUSE): "it is not running",
    (_P, Verb.PAUSE): "it is already paused",
    (_R, Verb.UNPAUSE): "it is not paused",
    (_S, Verb.UNPAUSE): "it is not paused",
}


@dataclass(frozen=True)
class NodeLife:
    """What every runner believes about one node. `cut_all`: cut off from
    everyone; `cut`: from these peers (a partial partition)."""

    process: Process = Process.RUNNING
    topics: frozenset[str] = frozenset()
    cut_all: bool = False
    cut: frozenset[str] = frozenset()

    @property
    def running(self) -> bool:
        return self.process is not Process.STOPPED

    @property
    def reachable(self) -> bool:
        return self.process is Process.RUNNING and not self.cut_all

    @property
    def isolated(self) -> bool:
        return self.cut_all or bool(self.cut)

    def cut_off_from(self, peer: str) -> bool:
        return self.cut_all or peer in self.cut

    def to_record(self) -> dict[str, object]:
        return {"state": self.process.value, "topics": sorted(self.topics),
                "cut_all": self.cut_all, "cut": sorted(self.cut)}

    @classmethod
    def from_record(cls, rec: dict[str, object]) -> NodeLife:
        return cls(Process(rec.get("state", "down")), frozenset(rec.get("topics") or ()),  # type: ignore[arg-type]
                   bool(rec.get("cut_all", False)), frozenset(rec.get("cut") or ()))  # type: ignore[arg-type]


@dataclass(frozen=True)
class LifeEvent:
    """node_down or node_up, as events.jsonl records them."""

    kind: RunEvent
    cause: str


@dataclass(frozen=True)
class Step:
    """One call to make, the node's state once it is done, and the events to
    log then."""

    call: Call
    life: NodeLife
    events: tuple[LifeEvent, ...] = ()


@dataclass(frozen=True)
class Transition:
    """The outcome of one verb on one node: the steps in order and the state
    after them."""

    steps: tuple[Step, ...]
    life: NodeLife

    @property
    def calls(self) -> tuple[Call, ...]:
        return tuple(step.call for step in self.steps)

    @property
    def events(self) -> tuple[LifeEvent, ...]:
        return tuple(ev for step in self.steps for ev in step.events)


class Ineligible(ValueError):
    """The verb makes no sense on this node now; the message says why."""


def needs(verb: Verb, topic: str | None = None) -> str:
    """What a node must be for `verb`, for messages such as 'only 2 nodes
    are running'."""
    if verb in _PROCESS_NEEDS:
        return _PROCESS_NEEDS[verb]
    return {
        Verb.DISCONNECT: "running and not already disconnected", Verb.RECONNECT: "disconnected",
        Verb.LEAVE: f"reachable and subscribed to {topic!r}", Verb.JOIN: f"reachable and not subscribed to {topic!r}",
    }[verb]


def why_not(life: NodeLife, verb: Verb, topic: str | None = None, peers: Iterable[str] = ()) -> str | None:
    """Why `verb` cannot apply to a node in state `life` (None: it can).
    `peers` narrows disconnect/reconnect; `topic` is for leave/join."""
    verb = Verb(verb)
    peers = tuple(peers)
    if verb in _PROCESS_NEEDS:
        return None if (life.process, verb) in PROCESS_TABLE else _WHY_NOT_PROCESS[(life.process, verb)]
    if verb is Verb.DISCONNECT:
        if life.process is not Process.RUNNING:
            return "it is not running" if not life.running else "it is paused"
        if life.cut_all:
            return "it is already disconnected from everyone"
        if peers and all(p in life.cut for p in peers):
            return "it is already disconnected from all those peers"
        return None
    if verb is Verb.RECONNECT:
        if life.process is not Process.RUNNING:
            return "it is not running" if not life.running else "it is paused"
        if peers:
            if life.cut_all:
                return "it is disconnected from everyone; reconnect it without 'peers'"
            return None if any(p in life.cut for p in peers) else "it is not disconnected from any of those peers"
        return None if life.isolated else "it is not disconnected"
    if not topic:
        return f"{verb.value} needs a topic"
    if not life.reachable:
        return "it is not reachable (stopped, paused or disconnected)"
    if verb is Verb.LEAVE:
        return None if topic in life.topics else f"it is not subscribed to {topic!r}"
    return None if topic not in life.topics else f"it is already subscribed to {topic!r}"


def eligible(life: NodeLife, verb: Verb, topic: str | None = None, peers: Iterable[str] = ()) -> bool:
    return why_not(life, verb, topic, peers) is None


def transition(life: NodeLife, verb: Verb, topic: str | None = None, peers: Iterable[str] = ()) -> Transition:
    """Apply `verb`; raises Ineligible when it cannot apply."""
    verb = Verb(verb)
    peers = frozenset(peers)
    why = why_not(life, verb, topic, peers)
    if why is not None:
        raise Ineligible(why)
    row = PROCESS_TABLE.get((life.process, verb))
    if row is not None:
        steps: list[Step] = []
        now = life
        for call, process, cause in row:
            if process is None:
                steps.append(Step(call, now))
                continue
            before = now
            now = replace(now, process=process)
            if process is Process.STOPPED:  # a stopped process keeps no partition
                now = replace(now, cut_all=False, cut=frozenset())
            steps.append(_step(call, before, now, cause))
        return Transition(tuple(steps), now)
    if verb is Verb.DISCONNECT:
        after = replace(life, cut_all=True) if not peers else replace(life, cut=life.cut | peers)
        return Transition((_step(Call.DISCONNECT, life, after, verb.value),), after)
    if verb is Verb.RECONNECT:
        after = replace(life, cut_all=False, cut=frozenset()) if not peers else replace(life, cut=life.cut - peers)
        return Transition((_step(Call.RECONNECT, life, after, verb.value),), after)
    assert topic is not None
    if verb is Verb.LEAVE:
        after = replace(life, topics=life.topics - {topic})
        return Transition((Step(Call.UNSUBSCRIBE, after),), after)
    after = replace(life, topics=life.topics | {topic})
    return Transition((Step(Call.SUBSCRIBE, after),), after)


def _step(call: Call, before: NodeLife, after: NodeLife, cause: str) -> Step:
    """The call, with node_down or node_up when it changes reachability."""
    if before.reachable and not after.reachable:
        return Step(call, after, (LifeEvent(RunEvent.NODE_DOWN, cause),))
    if after.reachable and not before.reachable:
        return Step(call, after, (LifeEvent(RunEvent.NODE_UP, cause),))
    return Step(call, after)


# Verbs a backend must declare a capability for.
NEEDS_CAPABILITY = {Verb.PAUSE: "pause", Verb.UNPAUSE: "pause", Verb.DISCONNECT: "partitions",
                    Verb.RECONNECT: "partitions"}


class Runner(Protocol):
    """Whoever runs the nodes, in the table's words: one method per Call.
    The controller implements it on a backend (orchestrator/run/churn.py),
    the simulator on its engines (orchestrator/sim/churn.py), so a verb is
    driven through the same steps in both."""

    def kill(self, node: str) -> None: ...
    def stop(self, node: str) -> None: ...
    def start(self, node: str) -> None: ...
    def pause(self, node: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def disconnect(self, node: str, peers: Collection[str] | None) -> None: ...
    def reconnect(self, node: str, peers: Collection[str] | None) -> None: ...
    def subscribe(self, node: str, topic: str) -> None: ...
    def unsubscribe(self, node: str, topic: str) -> None: ...


def perform(runner: Runner, call: Call, node: str, peers: Collection[str] | None, topic: str | None) -> None:
    """Ask `runner` for one call: the peers go with the partition calls,
    the topic with the subscription calls."""
    method = getattr(runner, call.value)
    if call in (Call.DISCONNECT, Call.RECONNECT):
        method(node, peers)
    elif call in (Call.SUBSCRIBE, Call.UNSUBSCRIBE):
        method(node, topic)
    else:
        method(node)


def drive(runner: Runner, node: str, life: NodeLife, verb: Verb, topic: str | None = None,
          peers: Collection[str] = ()) -> Iterator[Step]:
    """One verb on one node, step by step: each step's call is made on
    `runner`, then the step is handed back so the caller records the state
    it leaves the node in and logs its events. Ineligible when the table
    has no such transition (before any call)."""
    change = transition(life, verb, topic, peers)
    for step in change.steps:
        perform(runner, step.call, node, peers or None, topic)
        yield step
