"""experiment.resolved.yaml: the experiment written back in the file format
with every default filled in (router parameters, node-name prefixes, latency
model, topics, the computed duration, the steady-churn end) and the seed of
the run. Each section dumps itself from the model (parts.Part.dump), so the
dump follows the format. Loading that file and resolving it gives the same
`ResolvedExperiment` (same `digest()`), on the same version of the testbed:
the concrete choices are re-derived from the seed, not listed, so the file
stays readable for a thousand nodes. The header comment records the digest.

A variant (Experiment.variants()) is written as an experiment of its own:
its name, its routers and parameters, its expectations, and no `variants:` key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.experiment.check import load_experiment
from orchestrator.experiment.experiment import Experiment
from orchestrator.experiment.model import ResolvedExperiment


def experiment_to_dict(exp: Experiment, resolved: ResolvedExperiment) -> dict[str, Any]:
    """The experiment as plain data in the file format, defaults filled in."""
    d: dict[str, Any] = {"name": exp.name}
    if exp.description:
        d["description"] = exp.description
    d["seed"] = resolved.seed
    if exp.resources is not None:
        d["resources"] = exp.resources.dump()
    groups = [g.dump() for g in exp.groups]
    if exp.single_group_form:
        if groups[0]["name"] == "default":
            del groups[0]["name"]
        d["nodes"] = groups[0]
    else:
        d["groups"] = groups
    d["overlay"] = exp.overlay.dump()
    d["links"] = exp.links.dump()
    if exp.workloads:
        workloads = [w.dump() for w in exp.workloads]
        d["workload"] = workloads[0] if len(workloads) == 1 else workloads
    churn = exp.churn.dump()
    if not churn.get("timeline"):
        churn.pop("timeline", None)
    steady = churn.get("steady")
    if steady is not None and "until" not in steady:
        last = max((p.at for p in resolved.publishes), default=0.0)
        steady["until"] = exp.duration if exp.duration is not None else last
    if churn:
        d["churn"] = churn
    if exp.expectations:
        d["expectations"] = [e.text for e in exp.expectations]
    d["duration"] = resolved.duration
    d["linger"] = "auto" if exp.linger_auto else exp.linger
    if exp.strict_traces:
        d["strict_traces"] = True
    if exp.time_dilation != 1.0:
        d["time_dilation"] = exp.time_dilation
    d["wire"] = exp.wire.dump()
    if exp.validation_delay:
        d["validation_delay"] = dict(exp.validation_delay)
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
    return "\n".join(header) + "\n" + dump_dict(experiment_to_dict(exp, resolved))


def _experiment_of(resolved: ResolvedExperiment) -> Experiment:
    """The experiment `resolved` came from: its source file, or the variant of
    it that carries its name."""
    exp = load_experiment(Path(resolved.source))
    if exp.name != resolved.name:
        for _, variant in exp.variants():
            if variant.name == resolved.name:
                return variant
    return exp
