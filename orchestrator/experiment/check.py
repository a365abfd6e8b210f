"""From a validated file to a checked `Experiment`: the rules that need the
whole file. Node and group names must exist and be unique, selectors must be
able to match, the region matrix must cover every group, router parameters
must satisfy their router, the workload and churn must fit in the duration,
and the sizes that multiply (nodes x degree, churn repetitions) stay within
the bounds in values.py. Every problem is one InputError at the field's line.

Rules that depend on time (a node is running when it is killed) are
resolve.py's, which replays the churn.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from node.wire.rpc import FIRST_8_BYTES
from orchestrator.errors import InputError
from orchestrator.experiment import values as v
from orchestrator.experiment.adversary import check_adversaries
from orchestrator.experiment.activity import Churn, Selector, Steady, TimelineEntry, Workload
from orchestrator.experiment.document import ExperimentFile, Variant, VariantGroup, read_document
from orchestrator.experiment.experiment import Experiment
from orchestrator.experiment.parts import Group, Links, Overlay, Resources, Wire, assign_paths
from orchestrator.experiment.validation_fit import check_validation_delay
from orchestrator.experiment.wire_fit import shared_wire
from orchestrator.experiment.yamlsrc import Path_, Source, load_yaml, parse_yaml
from orchestrator.routers.kinds import CONTRACT, kind_of

MAX_PARAM_INT = 1_000_000
# Router parameters are typed by the router registry's dataclasses, not by the
# file model; their values still get the file's rules (finite, bounded).
_PARAM_TYPES = {
    "bool": TypeAdapter(v.Flag),
    "int": TypeAdapter(v.integer("an integer", ge=0, le=MAX_PARAM_INT)),
    "float": TypeAdapter(v.number("a number", ge=0.0, le=v.MAX_SECONDS)),
    "signed": TypeAdapter(v.number("a number", ge=-v.MAX_SECONDS, le=v.MAX_SECONDS)),  # score thresholds, penalties
}


def load_experiment(path: Path, backend: str | None = None) -> Experiment:
    """Load and check an experiment file; InputError on any problem. On a
    `backend` the file gives `sizes:` for, its groups have those counts."""
    path = Path(path)
    raw, source = load_yaml(path)
    return _Checker(source).experiment(read_document(raw, source), default_name=path.stem, backend=backend)


def parse_experiment(text: str, name: str = "<string>") -> Experiment:
    """Like load_experiment, from text (for tests and tools)."""
    raw, source = parse_yaml(text, name)
    return _Checker(source).experiment(read_document(raw, source), default_name=Path(name).stem or "experiment")


def _sample_names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {names[-1]}"


def _safe_name(stem: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).strip("-.") or "experiment"
    return cleaned if v.NAME_RE.match(cleaned) else f"x{cleaned}"


class _Checker:
    def __init__(self, source: Source) -> None:
        self.src = source
        self.groups: tuple[Group, ...] = ()
        self.names: list[str] = []
        self.name_set: set[str] = set()

    def ids_fit(self, doc: ExperimentFile, wire: Wire) -> None:
        """first-8-bytes ids come from the data: every message needs 8 bytes."""
        if wire.message_id != FIRST_8_BYTES:
            return
        for w in doc.workload:
            if w.size < 8:
                raise self.err((*w.path, "size"), "message_id first-8-bytes takes the id from the first 8 bytes "
                                                  f"of data: messages need at least 8 bytes, got {w.size}")

    def foreign_fit(self, doc: ExperimentFile, groups: tuple[Group, ...], workloads: tuple[Workload, ...]) -> None:
        """Foreign routers (orchestrator/routers/kinds.py; the wire they share is
        wire_fit.py's) publish only their own messages; a bare image has no control endpoint; their
        timers run on their own clocks, so they cannot be time-dilated."""
        if not any(kind_of(g.router).foreign for g in groups):
            return  # every rule below is one our routers meet
        router_of = {n: g.router for g in groups for n in g.node_names()}
        undilatable = [g for g in groups if not kind_of(g.router).dilatable]
        if doc.time_dilation != 1.0 and undilatable:
            g = undilatable[0]
            raise self.err(("time_dilation",), f"group {g.name or 'nodes'!r} runs a foreign router "
                           f"({kind_of(g.router).implementation}), whose timers the testbed cannot slow down; time "
                           "dilation needs our routers on every node")
        for w in workloads:
            if w.inject is not None:
                for n in self.pool_names(w.publishers, w.topic):
                    if not kind_of(router_of[n]).takes_injection:
                        raise self.err((*w.path, "inject"), f"injection hands one message to several nodes, but {n} runs "
                                       f"{kind_of(router_of[n]).implementation}, which only publishes its own; "
                                       "select publishers among our routers' nodes")
        for g in groups:
            if g.connect_at is not None and kind_of(g.router).foreign:
                raise self.err((*g.path, "connect_at"), f"group {g.name or 'nodes'!r} runs a foreign router "
                               f"({kind_of(g.router).implementation}): a late dial is asked of our router daemon's "
                               "control endpoint, so connect_at is for groups of our routers")
        rated = [h for h in groups if h.app_specific_score]
        if rated:
            g = next(g for g in groups if kind_of(g.router).foreign)
            raise self.err((*rated[0].path, "app_specific_score"), f"group {g.name or 'nodes'!r} runs a foreign "
                           f"router ({kind_of(g.router).implementation}), which cannot be given an application-specific "
                           "score (P5); set app_specific_score only in files of our routers")
        for e in doc.churn.timeline:
            if e.action in ("leave", "join"):
                for n in self.pool_names(e.select, None):
                    if not kind_of(router_of[n]).control:
                        raise self.err((*e.path, "select"), f"{e.action} needs the node's control endpoint, and {n} is "
                                       f"a bare {CONTRACT} image without one")

    def pool_names(self, sel: Selector | None, topic: str | None) -> list[str]:
        """Every node a selector can pick (None: the topic's subscribers)."""
        if sel is None:
            return [n for g in self.groups if topic in g.topics for n in g.node_names()]
        if sel.nodes:
            return list(sel.nodes)
        return [n for g in self.groups if sel.group is None or g.name == sel.group for n in g.node_names()]

    def err(self, path: Path_, message: str) -> InputError:
        return self.src.error(path, message)

    def experiment(self, doc: ExperimentFile, default_name: str, backend: str | None = None) -> Experiment:
        assign_paths(doc, ())
        written = self.sized(doc, backend)
        single = len(written) == 1
        self.groups = tuple(self.group(g, single, doc.resources) for g in written)  # type: ignore[arg-type]
        self.node_names()
        check_adversaries(self.groups, self.err)
        topics = sorted({t for g in self.groups for t in g.topics})
        overlay = self.overlay(doc.overlay)
        links = self.links(doc.links)
        workloads = tuple(self.workload(w, topics) for w in doc.workload)
        wire = shared_wire(doc.wire, self.groups, self.err)
        self.ids_fit(doc, wire)
        self.foreign_fit(doc, self.groups, workloads)
        check_validation_delay(doc.validation_delay, self.groups, self.err)
        churn = self.churn(doc.churn, topics, workloads, doc.duration)
        linger_auto = doc.linger == "auto"
        linger = v.LINGER_AUTO_MAX if linger_auto else float(doc.linger)
        if doc.duration is not None:
            self.within(doc.duration, workloads, churn)
        base = Experiment(
            name=doc.name or _safe_name(default_name), description=doc.description or "", seed=doc.seed,
            groups=self.groups, overlay=overlay, links=links, workloads=workloads, churn=churn,
            expectations=tuple(doc.expectations), duration=doc.duration, linger=linger, linger_auto=linger_auto,
            strict_traces=doc.strict_traces, time_dilation=doc.time_dilation,
            wire=wire, resources=doc.resources, source=self.src, single_group_form=doc.nodes is not None,
            sizes={kind: dict(counts) for kind, counts in (doc.sizes or {}).items()},
            validation_delay=tuple(doc.validation_delay.items()),
        )
        if doc.variants is not None:
            base = dataclasses.replace(base, variant_set=self.variants(doc, base, written))  # type: ignore[arg-type]
        return base

    # -- nodes

    def sized(self, doc: ExperimentFile, backend: str | None) -> list[Group]:
        """The written groups, with the counts `sizes:` gives for `backend`;
        every name in `sizes:` must be a group's, whichever backend runs."""
        written: list[Group] = doc.groups if doc.groups is not None else [doc.nodes]  # type: ignore[list-item]
        names = [g.name or "default" for g in written]
        for kind, counts in (doc.sizes or {}).items():
            for name in counts:
                if name not in names:
                    raise self.err(("sizes", kind, name), f"no group named {name!r} (groups: {', '.join(names)})")
        counts = (doc.sizes or {}).get(backend, {})  # type: ignore[call-overload]
        return [g.model_copy(update={"count": counts[n]}) if n in counts else g for g, n in zip(written, names)]

    def group(self, g: Group, single: bool, defaults: Resources | None) -> Group:
        if g.name is None and not single:
            raise self.err(g.path, "missing required key 'name' (every group needs a name when there are several)")
        name = g.name or "default"
        prefix = g.prefix if g.prefix is not None else ("n" if single else f"{name}-")
        resources = g.resources
        if defaults is not None:
            resources = Resources(**{**defaults.dump(), **(g.resources.dump() if g.resources else {})})
        params = self.router_params(g.router, g.router_params, (*g.path, "router_params"))
        return g.model_copy(update={"name": name, "prefix": prefix, "router_params": params, "resources": resources})

    def node_names(self) -> None:
        seen_groups: dict[str, int] = {}
        for i, g in enumerate(self.groups):
            if g.name in seen_groups:
                raise self.err((*g.path, "name"), f"group name {g.name!r} is already used by group {seen_groups[g.name]}")
            seen_groups[g.name] = i  # type: ignore[index]
        total = sum(g.count for g in self.groups)
        if total > v.MAX_NODES:
            raise self.err((), f"the groups have {total} nodes together; at most {v.MAX_NODES} can run")
        owner: dict[str, str] = {}
        for g in self.groups:
            for n in g.node_names():
                if n in owner:
                    raise self.err(
                        (*g.path, "prefix"), f"node name {n!r} is produced by groups {owner[n]!r} and {g.name!r}; "
                        "give one of them another prefix",
                    )
                owner[n] = g.name  # type: ignore[assignment]
                self.names.append(n)
        self.name_set = set(self.names)

    def router_params(self, router: str, value: dict[str, Any] | None, path: Path_,
                      origins: dict[str, Path_] | None = None) -> dict[str, Any]:
        """Every parameter of `router`, defaults filled in. `origins`: where
        each key was written, when not at path.key (a variant's parameters
        merged over its group's)."""
        kind = kind_of(router).engine
        fields = {f.name: f for f in dataclasses.fields(kind.params)}
        known = sorted(set(fields) - set(kind.fixed))
        where_of = {k: (*path, k) for k in value or {}} | dict(origins or {})
        values: dict[str, Any] = {}
        for key, x in (value or {}).items():
            if key not in known and kind_of(router).foreign and key in kind.fixed:
                raise self.err(where_of[key], f"{kind_of(router).implementation} cannot be given {key}: "
                               f"{kind_of(router).params_from} has no counterpart (it takes: {', '.join(known)})")
            if key not in known:
                raise self.err(where_of[key], f"unknown key; expected one of: {', '.join(known)} (the parameters of {router})")
            signed = fields[key].metadata.get("signed", False)
            values[key] = self.param_value(x, "signed" if signed else str(fields[key].type), where_of[key])
        try:
            params = kind.make_params(values)
        except (ValueError, TypeError) as exc:
            message, where = str(exc), path
            # prefer the keys written at `path` (a variant's) over those merged in
            for key in sorted(values, key=lambda k: (where_of[k][:len(path)] != path, -len(k))):
                if re.search(rf"\b{re.escape(key)}\b", message):
                    where = where_of[key]
                    break
            raise self.err(where, f"bad {router} parameters: {message}") from None
        full = dataclasses.asdict(params)
        return {f.name: full[f.name] for f in dataclasses.fields(params) if f.name not in kind.fixed}

    def param_value(self, value: Any, annotation: str, path: Path_) -> Any:
        kinds = {a.strip() for a in annotation.split("|")}
        if value is None:
            if "None" in kinds:
                return None
            raise self.err(path, f"expected {annotation}, got nothing (null)")
        kind = "bool" if "bool" in kinds else "int" if "int" in kinds else "signed" if "signed" in kinds else "float"
        try:
            return _PARAM_TYPES[kind].validate_python(value)
        except ValidationError as exc:
            raise self.err(path, exc.errors()[0]["ctx"]["message"]) from None

    # -- overlay and links

    def overlay(self, ov: Overlay) -> Overlay:
        n = len(self.names)
        if ov.degree is not None:
            if ov.degree >= n:
                raise self.err((*ov.path, "degree"),
                               f"degree {ov.degree} is too large for {n} nodes (each node can have at most {n - 1} peers)")
            if ov.type == "random_regular" and (n * ov.degree) % 2:
                raise self.err(
                    (*ov.path, "degree"), f"no graph with every node at degree {ov.degree} on {n} nodes exists "
                    f"(n*degree = {n * ov.degree} is odd); change the degree or the node count",
                )
        edges = {"full": n * (n - 1) // 2, "random": n * (ov.degree or 0), "random_regular": n * (ov.degree or 0) // 2,
                 "explicit": len(ov.edges)}[ov.type]
        if edges > v.MAX_EDGES:
            raise self.err(ov.path, f"this overlay has up to {edges} edges; at most {v.MAX_EDGES} can run")
        if ov.type != "explicit":
            return ov
        pairs: set[tuple[str, str]] = set()
        known = self.name_set
        for i, (a, b) in enumerate(ov.edges):
            if a == b or a not in known or b not in known:
                p = (*ov.path, "edges", i)
                self.node_ref(a, (*p, 0))
                self.node_ref(b, (*p, 1))
                raise self.err(p, f"a node cannot connect to itself ({a})")
            pairs.add((a, b) if a < b else (b, a))
        return ov.model_copy(update={"edges": tuple(sorted(pairs)), "connected": False})

    def links(self, links: Links) -> Links:
        lat = links.latency
        if lat.model != "regions":
            return links
        for g in self.groups:
            if not g.regions and links.preset is None:  # a preset draws the regions of groups without one
                raise self.err((*g.path, "region"), "the regions latency model needs every group to have a region "
                               f"(group {g.name!r} has none)")
        pairs = lat.pairs()
        regions = sorted({r for pair in pairs for r in pair})
        for g in self.groups:
            for r in g.regions:
                if r not in regions:
                    raise self.err((*g.path, "region"), f"region {r!r} is not in links.latency.matrix "  # or the preset's
                                   f"(regions there: {', '.join(regions)})")
        for i, a in enumerate(regions):
            for b in regions[i:]:
                if (a, b) not in pairs:
                    raise self.err((*lat.path, "matrix"), f"the matrix has no latency between regions {a!r} and {b!r}; "
                                   f"add matrix.{a}.{b}")
        return links

    # -- selectors, workload, churn

    def node_ref(self, name: str, path: Path_) -> str:
        if name not in self.name_set:
            raise self.err(path, f"no node named {name!r} (nodes: {_sample_names(self.names)})")
        return name

    def pool(self, sel: Selector) -> int:
        if sel.nodes:
            return len(sel.nodes)
        return sum(g.count for g in self.groups if sel.group is None or g.name == sel.group)

    def selector(self, sel: Selector) -> None:
        if sel.group is not None and sel.group not in {g.name for g in self.groups}:
            names = ", ".join(g.name for g in self.groups)  # type: ignore[misc]
            raise self.err((*sel.path, "group"), f"expected a group name ({names}), got {sel.group!r}")
        for i, n in enumerate(sel.nodes):
            self.node_ref(n, (*sel.path, "nodes", i))
        pool = self.pool(sel)
        scope = f"group {sel.group!r}" if sel.group else "the experiment"
        if sel.count is not None and sel.count > pool:
            raise self.err((*sel.path, "count"), f"selects {sel.count} nodes but {scope} has only {pool}")
        if sel.percent is not None and v.half_up(sel.percent * pool / 100) < 1:
            raise self.err((*sel.path, "percent"),
                           f"{sel.percent:g}% of {pool} nodes in {scope} rounds to 0: the selector matches nothing")

    def workload(self, w: Workload, topics: list[str]) -> Workload:
        if w.topic is not None and w.topic not in topics:
            raise self.err((*w.path, "topic"), f"no group subscribes to topic {w.topic!r} (topics: {', '.join(topics)})")
        if w.topic is None and len(topics) != 1:
            raise self.err(w.path, f"missing required key 'topic' (the groups subscribe to {', '.join(topics) or 'no topic'})")
        if w.publishers is not None:
            self.selector(w.publishers)
        if w.inject is not None and w.inject > len(self.names):
            raise self.err((*w.path, "inject"), f"cannot hand a message to {w.inject} distinct nodes out of {len(self.names)}")
        return w.model_copy(update={"topic": w.topic or topics[0]})

    def churn(self, churn: Churn, topics: list[str], workloads: tuple[Workload, ...], duration: float | None) -> Churn:
        timeline = [self.entry(e, topics) for e in churn.timeline]
        repeats = sum(len(e.times()) for e in timeline)
        if repeats > v.MAX_CHURN_ACTIONS:
            raise self.err((*churn.path, "timeline"), f"the timeline acts {repeats} times; at most {v.MAX_CHURN_ACTIONS}")
        steady = self.steady(churn.steady, workloads, duration) if churn.steady is not None else None
        return churn.model_copy(update={"timeline": timeline, "steady": steady})

    def entry(self, e: TimelineEntry, topics: list[str]) -> TimelineEntry:
        self.selector(e.select)
        if e.peers is not None:
            self.selector(e.peers)
        topic = e.topic
        if e.action in ("leave", "join") and topic is None:
            if len(topics) != 1:
                raise self.err(e.path, f"missing required key 'topic' for {e.action} (topics: {', '.join(topics)})")
            topic = topics[0]
        return e.model_copy(update={"topic": topic})

    def steady(self, s: Steady, workloads: tuple[Workload, ...], duration: float | None) -> Steady:
        if s.select is not None:
            self.selector(s.select)
        pool = len(self.names) if s.select is None else self.pool(s.select)
        if v.half_up(s.fraction * pool) < 1:
            raise self.err((*s.path, "fraction"), f"{s.fraction:g} of {pool} nodes rounds to 0: no node would churn")
        if s.until is None and duration is None:
            last = max((t for w in workloads for t in w.times()), default=0.0)
            if last <= s.start:
                raise self.err(
                    s.path, "steady churn needs an end: set 'until' here or the experiment's 'duration' "
                    "(it defaults to the last message's time, and there is no message after 'from')",
                )
        return s.model_copy(update={"downtime": s.downtime or s.session})

    def within(self, duration: float, workloads: tuple[Workload, ...], churn: Churn) -> None:
        for w in workloads:
            times = w.times()
            if times and times[-1] > duration:
                raise self.err(w.path, f"the last message is at t={times[-1]:g}s, after the experiment's duration "
                               f"({duration:g}s); lower messages/interval/start or raise duration")
        for e in churn.timeline:
            times = e.times()
            if times and times[-1] + (e.for_ or 0.0) > duration:
                raise self.err(e.path, f"acts at t={times[-1] + (e.for_ or 0.0):g}s, after the experiment's duration ({duration:g}s)")
        s = churn.steady
        if s is not None and s.until is not None and s.until > duration:
            raise self.err((*s.path, "until"), f"expected a time <= duration ({duration:g}s), got {s.until:g}")

    # -- variants

    def variants(self, doc: ExperimentFile, base: Experiment, written: list[Group]) -> tuple[tuple[str, Experiment], ...]:
        """Each variant: the base experiment with its groups' routers, router
        parameters, name and expectations overridden; nothing else can differ."""
        out: list[tuple[str, Experiment]] = []
        names: dict[str, str] = {}
        for vname, var in (doc.variants or {}).items():
            var = var or Variant()
            vpath: Path_ = ("variants", vname)
            name = var.name or f"{base.name}-{vname}"
            if name in names:
                raise self.err((*vpath, "name") if var.name else vpath,
                               f"variant {vname!r} would be named {name!r} like variant {names[name]!r}; give it another 'name'")
            names[name] = vname
            per_group: dict[str, tuple[VariantGroup, Path_]] = {}
            if var.groups is not None:
                gpath = (*vpath, "groups")
                if base.single_group_form:
                    raise self.err(gpath, "the file declares its one group with 'nodes:'; set 'router' and "
                                   "'router_params' directly in the variant")
                known = [g.name for g in base.groups]
                for gname, layer in var.groups.items():
                    if gname not in known:
                        raise self.err((*gpath, gname), f"no group named {gname!r} (groups: {', '.join(known)})")  # type: ignore[arg-type]
                    per_group[gname] = (layer or VariantGroup(), (*gpath, gname))
            groups = tuple(
                self.variant_group(g, w, [(var, vpath), per_group.get(g.name)])  # type: ignore[arg-type]
                for g, w in zip(base.groups, written)
            )
            self.foreign_fit(doc, groups, base.workloads)
            check_validation_delay(doc.validation_delay, groups, self.err)
            wire = shared_wire(doc.wire, groups, self.err)
            self.ids_fit(doc, wire)
            check_adversaries(groups, self.err)
            expectations = tuple(var.expectations) if var.expectations is not None else base.expectations
            out.append((vname, dataclasses.replace(
                base, name=name, groups=groups, expectations=expectations, variant=vname, variant_set=(), wire=wire,
            )))
        return tuple(out)

    def variant_group(self, g: Group, written: Group, layers: list[tuple[VariantGroup, Path_] | None]) -> Group:
        """The group with the variant's overrides: the variant-wide layer, then
        the group's own. A layer that changes the router discards the parameters
        written for the previous one; otherwise its parameters are merged over them."""
        router = g.router
        params: dict[str, Any] = dict(written.router_params or {})
        origins: dict[str, Path_] = {k: (*g.path, "router_params", k) for k in params}
        params_path: Path_ = (*g.path, "router_params")
        router_path: Path_ = (*g.path, "router")
        touched = False
        for layer in layers:
            if layer is None:
                continue
            part, lpath = layer
            if part.router is not None:
                touched = True
                router_path = (*lpath, "router")
                if part.router != router:
                    router, params, origins = part.router, {}, {}
                    params_path = (*lpath, "router_params")
            if "router_params" in part.given():
                touched = True
                params_path = (*lpath, "router_params")
                params.update(part.router_params or {})
                origins.update({k: (*params_path, k) for k in part.router_params or {}})
        if not touched:
            return g
        full = self.router_params(router, params, params_path, origins)
        if router == "simsub" and len(g.topics) != 1:
            raise self.err(router_path, f"simsub routers have exactly one topic (as the reference actor); group {g.name!r} "
                           f"subscribes to {len(g.topics)}")
        return g.model_copy(update={"router": router, "router_params": full})


