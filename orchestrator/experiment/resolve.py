"""Resolution: an `Experiment` and one seed -> the concrete `ResolvedExperiment`.

Every random choice draws from its own `random.Random` derived from the seed
and a purpose string ("overlay", "churn/2/0", "steady/n17", "workload/0", ...),
so one choice does not shift another when a file changes elsewhere, and
nothing depends on PYTHONHASHSEED: candidates are always lists in the
experiment's canonical node order (groups in file order, then index), never sets.

Churn is resolved by replaying it in time order on each node's lifecycle
state (orchestrator/experiment/lifecycle.py, the table every runner uses). That lets a random
selector pick only nodes the action makes sense for (kill picks among running
nodes, start among killed ones), lets a named selector fail with a clear error
when it does not, and tells the workload which nodes are reachable when each
message is published (publishers that are down are skipped, injection draws
only reachable nodes).
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.experiment import layout
from orchestrator.errors import InputError
from orchestrator.experiment.activity import Selector, TimelineEntry
from orchestrator.experiment.layout import derive_rng, derive_seed
from orchestrator.experiment.model import ChurnAction, Publish, ResolvedExperiment
from orchestrator.experiment.values import MAX_CHURN_ACTIONS, half_up
from orchestrator.experiment.yamlsrc import format_path
from orchestrator.experiment.lifecycle import UNDO, NodeLife, Verb, needs, transition, why_not

if TYPE_CHECKING:  # a type only: experiment.py imports this module to run it
    from orchestrator.experiment.experiment import Experiment


def incarnation_seed(seed: int, incarnation: int) -> int:
    """The engine seed of a node's n-th start: its own seed first, then a fresh
    but reproducible one per restart (shared by the simulator and the backends)."""
    return seed if incarnation == 1 else derive_seed(seed, "incarnation", incarnation)


def resolve(exp: Experiment, seed: int) -> ResolvedExperiment:
    return _Resolver(exp, seed).run()


def _fmt(t: float) -> str:
    return f"{t:g}s"


@dataclass
class _NodeState:
    life: NodeLife
    # (time, reachable) after each change, in time order
    times: list[float] = field(default_factory=lambda: [float("-inf")])
    reachable: list[bool] = field(default_factory=lambda: [True])

    def record(self, t: float) -> None:
        if self.life.reachable != self.reachable[-1]:
            self.times.append(t)
            self.reachable.append(self.life.reachable)

    def up_at(self, t: float) -> bool:
        return self.reachable[bisect.bisect_right(self.times, t) - 1]


class _Resolver:
    def __init__(self, exp: Experiment, seed: int) -> None:
        self.exp = exp
        self.seed = seed
        self.names = exp.node_names()
        self.index = {n: i for i, n in enumerate(self.names)}
        self.group_nodes = {g.name: g.node_names() for g in exp.groups}
        self.topics_of = {n: g.topics for g in exp.groups for n in g.node_names()}

    def run(self) -> ResolvedExperiment:
        exp, seed = self.exp, self.seed
        nodes = layout.nodes(exp, seed)
        edges = layout.overlay(exp, seed, self.names)
        pair = layout.pair_links(exp, seed, nodes)
        links = {e: pair(*e) for e in edges}
        self.state = {n: _NodeState(NodeLife(topics=frozenset(self.topics_of[n]))) for n in self.names}
        times = [w.times() for w in exp.workloads]
        last_publish = max((t for ts in times for t in ts), default=0.0)
        churn = self.churn(last_publish)
        publishes = self.publishes(times)
        if exp.duration is not None:
            duration = exp.duration
        else:
            last = max([last_publish, *(c.at for c in churn)])
            duration = max(round(last + (0.0 if exp.linger_auto else exp.linger), 9), 1.0)
        return ResolvedExperiment(
            name=exp.name, source=exp.file, seed=seed, nodes=tuple(nodes), edges=tuple(edges),
            links=links, default_link=pair.default(), publishes=tuple(publishes), churn=tuple(churn),
            expectations=exp.expectations, duration=duration, linger=exp.linger, linger_auto=exp.linger_auto,
            strict_traces=exp.strict_traces, time_dilation=exp.time_dilation,
            resources=exp.resource_defaults, security=exp.wire.security, authenticity=exp.wire.authenticity,
            message_id=exp.wire.message_id, validation_delay=dict(exp.validation_delay), pair_link=pair,
        )

    # -- churn

    def churn(self, last_publish: float) -> list[ChurnAction]:
        exp = self.exp
        queue: list[tuple[float, int, str, object]] = []
        seq = 0

        def push(t: float, kind: str, item: object) -> None:
            nonlocal seq
            heapq.heappush(queue, (t, seq, kind, item))
            seq += 1

        self.timeline_named = {n for e in exp.churn.timeline for n in e.select.nodes}
        self.pending: Counter[str] = Counter()  # nodes with an undo (`for`) still to come
        for i, entry in enumerate(exp.churn.timeline):
            for k, t in enumerate(entry.times()):
                push(t, "entry", (i, k, entry))
        self.steady_nodes: list[str] = []
        for action in self.steady(last_publish):
            push(action.at, "action", action)

        out: list[ChurnAction] = []
        while queue:
            t, _, kind, item = heapq.heappop(queue)
            if kind == "entry":
                i, k, entry = item  # type: ignore[misc]
                action = self.occurrence(t, i, k, entry)
                if entry.for_ is not None:
                    undo = ChurnAction(
                        at=round(t + entry.for_, 9), action=UNDO[Verb(action.action)].value, nodes=action.nodes,  # type: ignore[arg-type]
                        topic=action.topic, peers=action.peers, source=f"{action.source} (for {entry.for_:g}s)",
                    )
                    push(undo.at, "undo", (undo, entry))
                    self.pending.update(action.nodes)
            elif kind == "undo":
                action, entry = item  # type: ignore[misc]
                self.pending.subtract(action.nodes)
                for n in action.nodes:
                    why = self.ineligible(action.action, n, action.topic, action.peers)
                    if why:
                        raise exp.error(
                            (*entry.path, "for"), f"the {action.action} that undoes this entry at "
                            f"t={_fmt(action.at)} cannot apply to {n}: {why}",
                        )
            else:
                action = item  # type: ignore[assignment]
                for n in action.nodes:
                    why = self.ineligible(action.action, n, action.topic, action.peers)
                    if why:  # steady churn only touches its own nodes; this is a bug guard
                        raise exp.error(exp.churn.steady.path if exp.churn.steady else ("churn",),
                                        f"steady churn conflicts at t={_fmt(t)} on {n}: {why}")
            self.apply(action)
            out.append(action)
        return out

    def ineligible(self, verb: str, n: str, topic: str | None, peers: tuple[str, ...]) -> str | None:
        """Why `verb` makes no sense on node n now (None: it does)."""
        return why_not(self.state[n].life, Verb(verb), topic, peers)

    def apply(self, a: ChurnAction) -> None:
        for n in a.nodes:
            s = self.state[n]
            s.life = transition(s.life, Verb(a.action), a.topic, a.peers).life
            s.record(a.at)

    def base(self, sel: Selector) -> list[str]:
        return list(self.group_nodes[sel.group]) if sel.group else list(self.names)

    def occurrence(self, t: float, i: int, k: int, entry: TimelineEntry) -> ChurnAction:
        exp = self.exp
        rng = derive_rng(self.seed, "churn", i, k)
        sel = entry.select
        when = f"at t={_fmt(t)}"
        steady = set(self.steady_nodes)
        if sel.nodes:
            chosen = list(sel.nodes)
            for n in chosen:
                why = self.ineligible(entry.action, n, entry.topic, ())
                if why:
                    raise exp.error(sel.path, f"{when}: cannot {entry.action} {n}: {why}")
        else:
            full = self.base(sel)
            # steady-churn nodes belong to steady churn
            pool = [n for n in full if n not in steady]
            eligible = [n for n in pool if self.ineligible(entry.action, n, entry.topic, ()) is None]
            what = needs(Verb(entry.action), entry.topic)
            if sel.count is not None or sel.percent is not None:
                # a random pick never takes a node the timeline names elsewhere
                # nor one waiting for the undo of an earlier `for`, so those
                # actions stay valid whatever the draw
                eligible = [n for n in eligible if n not in self.timeline_named and not self.pending[n]]
                want = sel.count if sel.count is not None else half_up(sel.percent * len(full) / 100)  # type: ignore[operator]
                if want > len(eligible):
                    raise exp.error(
                        sel.path, f"{when}: selects {want} nodes to {entry.action} but only {len(eligible)} "
                        f"of {sel.describe()} are {what} (random picks skip nodes named in the timeline, "
                        "nodes waiting for a 'for' undo" + (" and steady-churn nodes)" if steady else ")"),
                    )
                chosen = rng.sample(eligible, want)
            else:
                if not eligible:
                    raise exp.error(sel.path, f"{when}: the selector ({sel.describe()}) matches no node that is {what}")
                chosen = eligible
        chosen.sort(key=self.index.__getitem__)
        peers: tuple[str, ...] = ()
        if entry.peers is not None:
            peers = self.pick_peers(entry.peers, chosen, rng, when)
            for n in chosen:
                why = self.ineligible(entry.action, n, entry.topic, peers)
                if why:
                    raise exp.error(entry.path, f"{when}: cannot {entry.action} {n}: {why}")
        return ChurnAction(
            at=t, action=entry.action, nodes=tuple(chosen), topic=entry.topic,  # type: ignore[arg-type]
            peers=peers, source=format_path(entry.path),
        )

    def pick_peers(self, sel: Selector, chosen: list[str], rng: random.Random, when: str) -> tuple[str, ...]:
        if sel.nodes:
            overlap = [n for n in sel.nodes if n in chosen]
            if overlap:
                raise self.exp.error(sel.path, f"{when}: {overlap[0]} is both a selected node and one of its peers")
            peers = list(sel.nodes)
        else:
            full = self.base(sel)
            pool = [n for n in full if n not in chosen]
            if sel.count is not None or sel.percent is not None:
                want = sel.count if sel.count is not None else half_up(sel.percent * len(full) / 100)  # type: ignore[operator]
                if want > len(pool):
                    raise self.exp.error(sel.path, f"{when}: selects {want} peers but only {len(pool)} other nodes are in {sel.describe()}")
                peers = rng.sample(pool, want)
            else:
                if not pool:
                    raise self.exp.error(sel.path, f"{when}: the peers selector matches no node besides the selected ones")
                peers = pool
        peers.sort(key=self.index.__getitem__)
        return tuple(peers)

    def steady(self, last_publish: float) -> list[ChurnAction]:
        s = self.exp.churn.steady
        if s is None:
            return []
        if s.select is None or s.select.all:
            pool = self.base(s.select) if s.select else list(self.names)
        elif s.select.nodes:
            pool = list(s.select.nodes)
        elif s.select.count is not None or s.select.percent is not None:
            raise self.exp.error(s.select.path, "steady churn picks 'fraction' of its pool; select the pool with 'nodes', 'group' or 'all'")
        else:
            pool = self.base(s.select)
        # Nodes the file names (timeline selectors, publishers) keep their
        # deliberate roles: steady churn never picks them.
        named = {n for e in self.exp.churn.timeline for n in e.select.nodes}
        named.update(n for w in self.exp.workloads if w.publishers is not None for n in w.publishers.nodes)
        candidates = [n for n in pool if n not in named]
        want = half_up(s.fraction * len(pool))
        if want > len(candidates):
            raise self.exp.error(
                (*s.path, "fraction"), f"{want} of {len(pool)} nodes should churn but only {len(candidates)} "
                "are not named in the churn timeline or as publishers",
            )
        rng = derive_rng(self.seed, "steady-select")
        chosen = sorted(rng.sample(candidates, want), key=self.index.__getitem__)
        self.steady_nodes = chosen
        until = s.until if s.until is not None else (self.exp.duration if self.exp.duration is not None else last_publish)
        up_verb = UNDO[Verb(s.action)].value

        def too_many() -> InputError:
            return self.exp.error(s.path, f"steady churn would act more than {MAX_CHURN_ACTIONS} times; "
                                  "lengthen the sessions or shorten the churn")

        cycle = max(s.session.expected(), s.session.min) + max(s.downtime.expected(), s.downtime.min)  # type: ignore[union-attr]
        if len(chosen) * 2 * (until - s.start) / cycle > 2 * MAX_CHURN_ACTIONS:  # refused before drawing them all
            raise too_many()
        out: list[ChurnAction] = []
        for n in chosen:
            nrng = derive_rng(self.seed, "steady", n)
            t = s.start
            while True:
                t = round(t + s.session.draw(nrng), 6)
                if t >= until:
                    break
                back = round(t + s.downtime.draw(nrng), 6)  # type: ignore[union-attr]
                if len(out) >= MAX_CHURN_ACTIONS:
                    raise too_many()
                out.append(ChurnAction(at=t, action=s.action, nodes=(n,), source="churn.steady"))  # type: ignore[arg-type]
                if back >= until:
                    out.append(ChurnAction(at=until, action=up_verb, nodes=(n,), source="churn.steady (end)"))  # type: ignore[arg-type]
                    break
                out.append(ChurnAction(at=back, action=up_verb, nodes=(n,), source="churn.steady"))  # type: ignore[arg-type]
                t = back
        out.sort(key=lambda a: (a.at, self.index[a.nodes[0]]))
        return out

    # -- workload

    def publishes(self, times: list[list[float]]) -> list[Publish]:
        rows: list[tuple[float, int, int, Publish]] = []
        for wi, w in enumerate(self.exp.workloads):
            rng = derive_rng(self.seed, "workload", wi)
            subscribers = [n for n in self.names if w.topic in self.topics_of[n]]
            sel = w.publishers
            if sel is None:
                pool = subscribers
                if not pool:
                    raise self.exp.error(w.path, f"no node subscribes to topic {w.topic!r}")
                publishers = pool if w.inject is not None else [rng.choice(pool)]
            elif sel.nodes:
                publishers = list(sel.nodes)
            else:
                full = self.base(sel)
                if sel.count is not None or sel.percent is not None:
                    want = sel.count if sel.count is not None else half_up(sel.percent * len(full) / 100)  # type: ignore[operator]
                    publishers = sorted(rng.sample(full, want), key=self.index.__getitem__)
                else:
                    publishers = full
            if w.inject is not None and w.inject > len(publishers):
                raise self.exp.error(
                    (*w.path, "inject"), f"cannot hand each message to {w.inject} distinct nodes: the publishers "
                    f"pool has {len(publishers)}",
                )
            for i, t in enumerate(times[wi]):
                live = [n for n in publishers if self.state[n].up_at(t)]
                if w.inject is not None:
                    if len(live) < w.inject:
                        raise self.exp.error(
                            (*w.path, "inject"), f"message {i} at t={_fmt(t)}: only {len(live)} of the pool are up "
                            f"(churn), {w.inject} needed",
                        )
                    via = tuple(sorted(rng.sample(live, w.inject), key=self.index.__getitem__))
                    pub = Publish(seq=0, at=t, topic=w.topic, size=w.size, publisher=None, via=via)
                else:
                    if not live:
                        raise self.exp.error(
                            w.path, f"message {i} at t={_fmt(t)}: none of the publishers ({_short(publishers)}) is up (churn)"
                        )
                    if w.order == "random":
                        who = rng.choice(live)
                    else:
                        k = len(publishers)
                        who = next(publishers[(i + j) % k] for j in range(k) if publishers[(i + j) % k] in live)
                    pub = Publish(seq=0, at=t, topic=w.topic, size=w.size, publisher=who, via=(who,))
                rows.append((t, wi, i, pub))
        rows.sort(key=lambda r: r[:3])
        return [
            Publish(seq=s, at=p.at, topic=p.topic, size=p.size, publisher=p.publisher, via=p.via)
            for s, (_, _, _, p) in enumerate(rows)
        ]


def _short(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 5 else f"{', '.join(names[:5])}, ... ({len(names)} nodes)"


__all__ = ["resolve", "incarnation_seed"]
