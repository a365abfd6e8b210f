"""`testbed sim FILE`: run an experiment on the virtual clock and print its
summary in the reference simulator's terms; then analyse and report like
every other run."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.postrun import finish_run
from orchestrator.experiment.spec import load_experiment, resolved_to_yaml
from orchestrator.rundir import default_run_dir
from orchestrator.sim_run import run_simulation

console = Console()

_ROWS = [
    ("nodes", "nodes"), ("messages", "messages"), ("publish", "publish (injections)"),
    ("deliver", "deliver"), ("connect", "connect"), ("pubsub.publish", "pubsub.publish (transmissions)"),
    ("graft", "GRAFT"), ("prune", "PRUNE"), ("ihave", "IHAVE"), ("iwant", "IWANT"),
    ("delivery_ratio", "delivery ratio"), ("latency_p50_ms", "latency p50 (ms)"),
    ("latency_p99_ms", "latency p99 (ms)"), ("events_processed", "events processed"),
    ("simulated_s", "simulated time (s)"), ("wall_s", "wall time (s)"), ("events_per_s", "events per second"),
]


def summary_table(summary: dict) -> Table:
    table = Table(title="simulation summary", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for key, label in _ROWS:
        value = summary.get(key)
        table.add_row(label, "-" if value is None else str(value))
    return table


def sim(
    file: Path = typer.Argument(..., help="Experiment file (YAML)."),
    seed: int | None = typer.Option(None, help="Override the experiment's seed."),
    out: Path | None = typer.Option(None, help="Run directory (default runs/<name>-<time>-sim)."),
    report: bool = typer.Option(True, "--report/--no-report", help="Analyse the traces and write report.html."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Simulate an experiment on a virtual clock (deterministic for a seed)."""
    experiment = load_experiment(file)
    resolved = experiment.resolve(seed)
    run_dir = out or default_run_dir(resolved.name, "sim")
    with Progress(
        TextColumn("[bold]simulating[/] {task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True, disable=as_json,
    ) as progress:
        task = progress.add_task(f"{resolved.name}: {len(resolved.nodes)} nodes", total=1.0)
        result = run_simulation(
            resolved, resolved_to_yaml(resolved, experiment), run_dir,
            progress=lambda t, end: progress.update(task, completed=t / end),
        )
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "summary": result.summary}, indent=1))
    else:
        console.print(summary_table(result.summary))
        console.print(f"run directory: [bold]{result.run_dir}[/]")
    if report:
        finish_run(result.run_dir, as_json=as_json)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
