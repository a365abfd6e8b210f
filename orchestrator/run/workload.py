"""The workload of a real testbed on the wall clock: publishes, churn
actions and late edges (`connect_at`) at their times from t=0 (when every
node is up), then the linger.

Publishing goes through a node's control endpoint, and only through a node
the lifecycle calls reachable (orchestrator/experiment/lifecycle.py says why); a message
with no reachable publisher is skipped with a warning, as in the simulator.

`linger: auto` (ResolvedExperiment.linger_auto): after the last publish and
churn action, wait until the network is quiet, that is until no reachable
node's counters of RPCs sent and received and of deliveries change between
two polls of its status, and at most until the experiment's end (the linger
bound); then stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from node.runtime.client import ControlError
from node.trace.vocab import RunEvent
from node.wire.rpc import workload_data
from orchestrator.backends.api import Backend
from orchestrator.experiment.model import ChurnAction, Publish, ResolvedExperiment
from orchestrator.fanout import fan_out
from orchestrator.routers.kinds import kind_of
from orchestrator.run.late_dials import LateDial
from orchestrator.run.nodestate import NodeState
from orchestrator.progress import Reporter
from orchestrator.records.runinfo import RunWriter

QUIET_POLL_S = 1.0
QUIET_COUNTERS = ("rpcs_in", "rpcs_out", "delivered")


def sleep_until(t_ns: int) -> None:
    while (left := t_ns - time.time_ns()) > 0:
        time.sleep(min(left / 1e9, 0.5))


def publish(
    p: Publish, nodes: Mapping[str, NodeState], backend: Backend, writer: RunWriter, warn: Callable[[str], None]
) -> str | None:
    """Hand one workload message to its publisher (or, injected, to every
    node in `via`); logs `publish` and returns the message id. A bare image
    publishes by its script (orchestrator/routers/foreign_nodes.py): only logged."""
    live = [n for n in p.via if n in nodes and nodes[n].reachable]
    if not live:
        warn(f"message {p.seq}: no live publisher among {list(p.via)}; skipped")
        return None
    t = time.time_ns()
    if p.publisher is not None and kind_of(nodes[p.publisher].router).scripted:  # its script publishes it
        mid = workload_data(p.seq, 8).hex()
        writer.event(t, RunEvent.PUBLISH, node=p.publisher, via=[p.publisher], topic=p.topic, message_id=mid,
                     size=p.size, seq=p.seq, scripted=True)
        return mid
    handed: list[str] = []
    mid = None
    for node in (live[:1] if p.publisher is not None else live):
        client = backend.control_client(node)
        try:
            if p.publisher is not None:
                reply = client.call("publish", topic=p.topic, size=p.size, seq=p.seq)
            else:
                reply = client.call("inject", seqno=p.seq + 1, topic=p.topic, size=p.size, seq=p.seq)
        except ControlError as exc:
            warn(f"message {p.seq}: {node} refused the publish: {exc}")
            continue
        mid = mid or reply.get("message_id")
        handed.append(node)
    if not handed:
        return None
    writer.event(t, RunEvent.PUBLISH, node=p.publisher, via=handed, topic=p.topic, message_id=mid, size=p.size, seq=p.seq)
    return mid


def run_timeline(
    resolved: ResolvedExperiment, t0_ns: int, reporter: Reporter,
    do_publish: Callable[[Publish], Any], do_churn: Callable[[ChurnAction], None],
    late: Sequence[tuple[float, tuple[LateDial, ...]]], do_late: Callable[[tuple[LateDial, ...]], None],
) -> None:
    """Late edges opening (orchestrator/run/late_dials.py), churn actions and
    publishes at their times (in that order when times tie), until the last
    of them; the caller lingers."""
    items: list[tuple[float, int, int, Any]] = [(at, 0, i, dials) for i, (at, dials) in enumerate(late)]
    items += [(c.at, 1, i, c) for i, c in enumerate(resolved.churn)]
    items += [(p.at, 2, i, p) for i, p in enumerate(resolved.publishes)]
    items.sort(key=lambda x: (x[0], x[1], x[2]))
    title = (f"workload: {len(resolved.publishes)} messages, {len(resolved.churn)} churn actions, "
             f"{resolved.end_time():.1f} s")
    with reporter.phase(title, len(items)) as advance:
        for at, _, _, item in items:
            sleep_until(t0_ns + round(at * 1e9))
            if isinstance(item, ChurnAction):
                do_churn(item)
            elif isinstance(item, tuple):
                do_late(item)
            else:
                do_publish(item)
            advance(1)


def tell_covert_sybils(resolved: ResolvedExperiment, nodes: Mapping[str, NodeState], backend: Backend,
                       t_ns: int) -> list[str]:
    """Every covert sybil (an adversary with a `start`) learns that the
    workload began at `t_ns` on the routers' clock, so its attack starts
    `start` seconds later, as in the simulator. The sybils that did not
    answer, which stay honest."""
    covert = {n: st for n, st in nodes.items() if (a := resolved.node(n).adversary) is not None and a.start > 0}
    if not covert:
        return []
    answers = ask_each(covert, backend, "workload_start", 5.0, t_ns=t_ns)
    return sorted(n for n, a in answers.items() if a is None)


def last_action_s(resolved: ResolvedExperiment) -> float:
    return max([0.0, *(p.at for p in resolved.publishes), *(c.at for c in resolved.churn)])


def quiet_counters(answer: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    """The counters linger compares, from a node's answer (None: no answer)."""
    if answer is None:
        return None
    got = answer.get("counters", {})
    return tuple(int(got.get(k, 0)) for k in QUIET_COUNTERS)


def ask_each(nodes: Mapping[str, NodeState], backend: Backend, cmd: str, timeout: float, workers: int = 16,
             **args: Any) -> dict[str, dict[str, Any] | None]:
    """`cmd` to every reachable node with a control endpoint (a bare image
    has none), `workers` at a time: each node's answer, None for no answer."""
    names = [n for n, st in nodes.items() if st.reachable and not kind_of(st.router).scripted]
    return dict(zip(names, fan_out(
        lambda n: backend.control_client(n).try_call(cmd, timeout=timeout, **args), names, workers), strict=True))


def counters(nodes: Mapping[str, NodeState], backend: Backend) -> dict[str, tuple[int, ...] | None]:
    """Each reachable node's RPC and delivery counters (None: no answer)."""
    return {n: quiet_counters(a) for n, a in ask_each(nodes, backend, "status", 2.0, workers=8).items()}


def linger_until_quiet(
    nodes: Mapping[str, NodeState], backend: Backend, deadline_ns: int, reporter: Reporter,
    poll_s: float = QUIET_POLL_S, title: str = "lingering until the network is quiet",
    first: dict[str, tuple[int, ...] | None] | None = None,
) -> float | None:
    """Poll until two polls in a row see the same counters; the seconds that
    took, or None when the deadline came first. `first`: counters the caller
    already has, taken as the first poll."""
    start = time.time_ns()
    with reporter.phase(title):
        previous = counters(nodes, backend) if first is None else first
        while time.time_ns() + poll_s * 1e9 <= deadline_ns:
            time.sleep(poll_s)
            now = counters(nodes, backend)
            if now == previous:
                return round((time.time_ns() - start) / 1e9, 3)
            previous = now
    sleep_until(deadline_ns)
    return None


def start_lag_window(nodes: Mapping[str, NodeState], backend: Backend) -> dict[str, dict[str, Any]]:
    """At the end of `up`: each router's event-loop lag so far, and a new lag
    window from now. Until then a router's timers compete with every other
    router's start (at 250 containers on two cores, for a minute or two), and
    no message is measured then; from now on its lag covers what the run
    measures, rest and workload, and the start-up is reported on its own.
    Bare images have no lag to reset; a node that does not answer keeps its
    whole life in one window."""
    answers = ask_each(nodes, backend, "status", 5.0, reset_lag=True)
    return {n: a["lag"] for n, a in answers.items() if a and (a.get("lag") or {}).get("samples")}
