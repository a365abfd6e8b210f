"""`testbed validate FILE` and `testbed schema`: check an experiment file the
way every run will load it, and print what it resolves to."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from orchestrator import graphs
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.experiment.spec import Experiment, experiment_json_schema, load_experiment
from orchestrator.links import format_rate


def summary(exp: Experiment, r: ResolvedExperiment) -> dict[str, Any]:
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
        "duration": r.duration, "linger": r.linger, "end": r.end_time(),
        "expectations": [e.text for e in r.expectations],
    }


def _print(s: dict[str, Any], console: Console) -> None:
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
    console.print(f"time      duration {s['duration']:g}s, linger {s['linger']:g}s, ends at t={s['end']:g}s")
    if s["expectations"]:
        console.print(f"expects   {'; '.join(s['expectations'])}")


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        file: Path = typer.Argument(..., help="The experiment file (YAML)."),
        seed: int | None = typer.Option(None, "--seed", help="Resolve with this seed instead of the file's."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Check an experiment file and show what it resolves to (exit 2 if it is wrong)."""
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
        typer.echo(json.dumps(experiment_json_schema(), indent=2))
