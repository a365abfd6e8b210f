"""`testbed validate FILE` and `testbed schema`: check an experiment file the
way every run will load it, and print what it resolves to (and, for a file
with `variants:`, each variant's routers and that they share the set-up)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dataclasses

import typer
from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from orchestrator.experiment.model import ResolvedExperiment
    from orchestrator.experiment.spec import Experiment


def summary(exp: Experiment, r: ResolvedExperiment) -> dict[str, Any]:
    from orchestrator.experiment import graphs

    names = [n.name for n in r.nodes]
    deg = graphs.degrees(names, r.edges)
    groups = []
    for g in exp.groups:
        members = [n for n in r.nodes if n.group == g.name]
        groups.append({
            "name": g.name, "router": g.router, "nodes": len(members),
            "first": members[0].name, "last": members[-1].name, "topics": list(g.topics),
            "regions": list(g.regions), "uplink_bps": members[0].uplink_bps,
        })
    latencies = [p.latency_ms for p in r.links.values()]
    return {
        "name": r.name, "file": r.source, "seed": r.seed, "digest": r.digest(),
        "groups": groups,
        "nodes": len(r.nodes),
        "overlay": {
            "type": exp.overlay.type, "edges": len(r.edges),
            "degree_min": min(deg.values(), default=0), "degree_max": max(deg.values(), default=0),
            "degree_mean": round(2 * len(r.edges) / len(names), 2) if names else 0,
            "components": graphs.components(names, r.edges),
        },
        "links": {
            "model": exp.links.latency.model,
            "latency_ms_min": min(latencies, default=None), "latency_ms_max": max(latencies, default=None),
            "jitter_ms": exp.links.jitter_ms, "loss": exp.links.loss,
        },
        "messages": len(r.publishes),
        "injected": sum(1 for p in r.publishes if p.publisher is None),
        "churn_actions": len(r.churn),
        "churn_by_action": dict(sorted(Counter(c.action for c in r.churn).items())),
        "duration": r.duration, "linger": r.linger, "linger_auto": r.linger_auto, "end": r.end_time(),
        "time_dilation": r.time_dilation,
        "wire": {"security": r.security, "authenticity": r.authenticity, "message_id": r.message_id},
        "expectations": [e.text for e in r.expectations],
        "variants": variant_summaries(exp, r),
    }


def _non_default_params(router: str, params: Any) -> dict[str, Any]:
    from orchestrator.routers.kinds import kind_of

    kind = kind_of(router).engine
    defaults = dataclasses.asdict(kind.make_params({}))
    return {k: v for k, v in params.items() if defaults.get(k) != v}


def setup_key(r: ResolvedExperiment) -> tuple:
    """Everything resolved except the name, the routers, their parameters and
    the expectations: equal keys mean an identical set-up."""
    nodes = tuple(
        (n.name, n.group, n.topics, n.seed, n.region, n.uplink_bps, n.memory, n.cpus) for n in r.nodes
    )
    return (
        r.seed, nodes, r.edges, tuple(sorted(r.links.items())), r.default_link, r.publishes, r.churn,
        r.duration, r.linger, tuple(sorted(r.resources.items())),
    )


def variant_summaries(exp: Experiment, base: ResolvedExperiment) -> list[dict[str, Any]]:
    """One entry per variant, resolved with the base's seed."""
    out = []
    key = setup_key(base)
    for vname, vexp in exp.variants():
        vr = vexp.resolve(base.seed)
        out.append({
            "variant": vname, "name": vr.name, "digest": vr.digest(),
            "groups": [
                {"name": g.name, "router": g.router, "router_params": dict(g.router_params),
                 "non_default_params": _non_default_params(g.router, g.router_params)}
                for g in vexp.groups
            ],
            "expectations": [e.text for e in vr.expectations],
            "same_setup": setup_key(vr) == key,
        })
    return out


def _print(s: dict[str, Any], console: Console) -> None:
    from orchestrator.experiment.links import format_rate

    console.print(f"[bold]{s['name']}[/] ({s['file']}): valid; seed {s['seed']}, digest {s['digest']}")
    table = Table(show_header=True, header_style="bold")
    for col in ("group", "router", "nodes", "names", "topics", "region", "uplink"):
        table.add_column(col, no_wrap=col in ("names", "uplink"))
    for g in s["groups"]:
        table.add_row(
            g["name"], g["router"], str(g["nodes"]), f"{g['first']}..{g['last']}", ", ".join(g["topics"]),
            ", ".join(g["regions"]) or "-", format_rate(g["uplink_bps"]) if g["uplink_bps"] else "-",
        )
    console.print(table)
    ov, ln = s["overlay"], s["links"]
    console.print(
        f"overlay   {ov['type']}: {ov['edges']} edges, degree {ov['degree_min']}..{ov['degree_max']} "
        f"(mean {ov['degree_mean']}), {ov['components']} component(s)"
    )
    lat = "-" if ln["latency_ms_min"] is None else f"{ln['latency_ms_min']:g}..{ln['latency_ms_max']:g} ms on overlay edges"
    console.print(f"links     {ln['model']}: {lat}, jitter {ln['jitter_ms']:g} ms, loss {ln['loss']:g}")
    inj = f" ({s['injected']} injected)" if s["injected"] else ""
    console.print(f"workload  {s['messages']} messages{inj}")
    by = ", ".join(f"{k} {v}" for k, v in s["churn_by_action"].items()) or "none"
    console.print(f"churn     {s['churn_actions']} actions: {by}")
    linger = f"auto (at most {s['linger']:g}s)" if s["linger_auto"] else f"{s['linger']:g}s"
    console.print(f"time      duration {s['duration']:g}s, linger {linger}, ends at t={s['end']:g}s"
                  + (f"; time dilation x{k:g}: {s['end'] * k:g}s on the wall clock of a real backend"
                     if (k := s["time_dilation"]) != 1.0 else ""))
    wire = s["wire"]
    console.print(f"wire      {wire['security']}, {wire['authenticity']} authenticity, message ids {wire['message_id']}")
    if s["expectations"]:
        console.print(f"expects   {'; '.join(s['expectations'])}")
    if s["variants"]:
        shared = all(v["same_setup"] for v in s["variants"])
        console.print(
            f"variants  {len(s['variants'])}, each run on its own; "
            + ("they share the set-up above (overlay, links, workload, churn, node seeds)"
               if shared else "[bold red]their set-ups differ[/]")
        )
        vt = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD)
        for col in ("variant", "routers", "expects", "experiment (run name)"):
            vt.add_column(col, no_wrap=col != "experiment (run name)", overflow="fold")
        for v in s["variants"]:
            routers = []
            for g in v["groups"]:
                params = ", ".join(f"{k}={val}" for k, val in g["non_default_params"].items())
                text = g["router"] + (f" ({params})" if params else "")
                routers.append(text if len(v["groups"]) == 1 else f"{g['name']}: {text}")
            expects = "same" if v["expectations"] == s["expectations"] else "; ".join(v["expectations"]) or "none"
            vt.add_row(v["variant"], "\n".join(routers), expects, v["name"])
        console.print(vt)


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        file: Path = typer.Argument(..., help="The experiment file (YAML)."),
        seed: int | None = typer.Option(None, "--seed", help="Resolve with this seed instead of the file's."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Check an experiment file and show what it resolves to (exit 2 if it is wrong)."""
        from orchestrator.experiment.spec import load_experiment

        exp = load_experiment(file)
        resolved = exp.resolve(seed)
        s = summary(exp, resolved)
        if as_json:
            typer.echo(json.dumps(s, indent=2))
        else:
            _print(s, Console())

    @app.command()
    def schema() -> None:
        """Print the JSON Schema of experiment files."""
        from orchestrator.experiment.spec import experiment_json_schema

        typer.echo(json.dumps(experiment_json_schema(), indent=2))
