"""experiment.resolved.yaml: the experiment written back with every default
filled in (router parameters, node-name prefixes, latency model, the computed
duration, the steady-churn end) and the seed of the run. Loading that file and
resolving it gives the same `ResolvedExperiment` (same `digest()`), on the same
version of the testbed: the concrete choices are re-derived from the seed, not
listed, so the file stays readable for a thousand nodes. The header comment
records the digest to check against.

A variant (spec.Experiment.variants()) is written as an experiment of its own:
its name, its routers and parameters, its expectations, and no `variants:` key.
"""

from __future__ import annotations

from typing import Any

import yaml

from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.experiment.spec import Experiment, Group, Selector, TimelineEntry, Workload, load_experiment
from orchestrator.links import format_rate


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def _group(g: Group, single: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not single or g.name != "default":
        out["name"] = g.name
    out["count"] = g.count
    out["router"] = g.router
    out["router_params"] = dict(g.router_params)
    out["topics"] = list(g.topics)
    out["prefix"] = g.prefix
    if g.regions:
        out["region"] = g.regions[0] if len(g.regions) == 1 else list(g.regions)
    if g.uplink_bps is not None:
        out["uplink"] = format_rate(g.uplink_bps)
    res = {}
    if g.memory is not None:
        res["memory"] = g.memory
    if g.cpus is not None:
        res["cpus"] = g.cpus
    if res:
        out["resources"] = res
    return out


def _selector(s: Selector) -> dict[str, Any]:
    return s.to_dict()


def _workload(w: Workload) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": w.topic, "messages": w.messages, "interval": _num(w.interval), "size": w.size,
        "start": _num(w.start),
    }
    if w.publishers is not None:
        out["publishers"] = _selector(w.publishers)
    if w.inject is not None:
        out["inject"] = w.inject
    else:
        out["order"] = w.order
    return out


def _entry(e: TimelineEntry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if e.at is not None:
        out["at"] = _num(e.at)
    else:
        out["every"] = _num(e.every)  # type: ignore[arg-type]
        out["from"] = _num(e.start)  # type: ignore[arg-type]
        out["until"] = _num(e.until)  # type: ignore[arg-type]
    out["action"] = e.action
    out["select"] = _selector(e.select)
    if e.topic is not None:
        out["topic"] = e.topic
    if e.peers is not None:
        out["peers"] = _selector(e.peers)
    if e.for_ is not None:
        out["for"] = _num(e.for_)
    return out


def experiment_to_dict(
    exp: Experiment, seed: int | None = None, duration: float | None = None, steady_until: float | None = None,
) -> dict[str, Any]:
    """The experiment as plain data in the file format, defaults filled in."""
    d: dict[str, Any] = {"name": exp.name}
    if exp.description:
        d["description"] = exp.description
    d["seed"] = exp.seed if seed is None else seed
    if exp.resources:
        d["resources"] = dict(exp.resources)
    if exp.single_group_form:
        d["nodes"] = _group(exp.groups[0], True)
    else:
        d["groups"] = [_group(g, False) for g in exp.groups]
    ov = exp.overlay
    overlay: dict[str, Any] = {"type": ov.type}
    if ov.type in ("random", "random_regular"):
        overlay["degree"] = ov.degree
        overlay["connected"] = ov.connected
    elif ov.type == "explicit":
        overlay["edges"] = [list(e) for e in ov.edges]
    d["overlay"] = overlay
    lat = exp.links.latency
    latency: dict[str, Any] = {"model": lat.model}
    if lat.model == "constant":
        latency["ms"] = _num(lat.ms)  # type: ignore[arg-type]
    elif lat.model == "uniform":
        latency["min_ms"] = _num(lat.min_ms)  # type: ignore[arg-type]
        latency["max_ms"] = _num(lat.max_ms)  # type: ignore[arg-type]
    else:
        matrix: dict[str, dict[str, Any]] = {}
        for (a, b), v in sorted(lat.matrix.items()):
            matrix.setdefault(a, {})[b] = _num(v)
        latency["matrix"] = matrix
    links: dict[str, Any] = {"latency": latency, "jitter_ms": _num(exp.links.jitter_ms), "loss": _num(exp.links.loss)}
    if exp.links.uplink_bps is not None:
        links["uplink"] = format_rate(exp.links.uplink_bps)
    d["links"] = links
    if exp.workloads:
        ws = [_workload(w) for w in exp.workloads]
        d["workload"] = ws[0] if len(ws) == 1 else ws
    churn: dict[str, Any] = {}
    if exp.churn.timeline:
        churn["timeline"] = [_entry(e) for e in exp.churn.timeline]
    s = exp.churn.steady
    if s is not None:
        steady: dict[str, Any] = {"fraction": s.fraction, "action": s.action}
        if s.select is not None:
            steady["select"] = _selector(s.select)
        steady["session"] = s.session.to_dict()
        steady["downtime"] = s.downtime.to_dict()
        steady["from"] = _num(s.start)
        until = s.until if s.until is not None else steady_until
        if until is not None:
            steady["until"] = _num(until)
        churn["steady"] = steady
    if churn:
        d["churn"] = churn
    if exp.expectations:
        d["expectations"] = [e.text for e in exp.expectations]
    dur = exp.duration if duration is None else duration
    if dur is not None:
        d["duration"] = _num(dur)
    d["linger"] = _num(exp.linger)
    d["wire"] = {"security": exp.security, "authenticity": exp.authenticity, "message_id": exp.message_id}
    return d


class _Dumper(yaml.SafeDumper):
    pass


def _short_scalar(x: Any) -> bool:
    return not isinstance(x, (dict, list)) and not (isinstance(x, str) and " " in x)


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(_short_scalar(x) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    flow = len(data) <= 3 and all(_short_scalar(v) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)


def dump_dict(d: dict[str, Any]) -> str:
    return yaml.dump(d, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True)


def resolved_to_yaml(resolved: ResolvedExperiment, experiment: Experiment | None = None) -> str:
    """experiment.resolved.yaml for `resolved`. Without `experiment`, the
    source file (resolved.source) is loaded again."""

    exp = experiment if experiment is not None else _experiment_of(resolved)
    steady_until = None
    if exp.churn.steady is not None and exp.churn.steady.until is None:
        last = max((p.at for p in resolved.publishes), default=0.0)
        steady_until = exp.duration if exp.duration is not None else last
    d = experiment_to_dict(exp, seed=resolved.seed, duration=resolved.duration, steady_until=steady_until)
    header = [
        f"# {resolved.name}: resolved from {resolved.source} with seed {resolved.seed}.",
        "# Every default is filled in; loading this file and resolving it with its seed",
        f"# gives the same experiment (digest {resolved.digest()}).",
        f"# {len(resolved.nodes)} nodes, {len(resolved.edges)} overlay edges, {len(resolved.publishes)} messages, "
        f"{len(resolved.churn)} churn actions; the run ends at t={resolved.end_time():g}s.",
        "# Per-node engine seeds are sha256('<seed>/node/<name>')[:8] >> 1; see docs/experiment-files.md.",
    ]
    if exp.variant is not None:
        header.insert(1, f"# Variant {exp.variant!r} of that file: its set-up with these routers; the other variants share it.")
    return "\n".join(header) + "\n" + dump_dict(d)


def _experiment_of(resolved: ResolvedExperiment) -> Experiment:
    """The experiment `resolved` came from: its source file, or the variant of
    it that carries its name."""
    from pathlib import Path

    exp = load_experiment(Path(resolved.source))
    if exp.name != resolved.name:
        for _, variant in exp.variants():
            if variant.name == resolved.name:
                return variant
    return exp
