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

from cli.postrun import finish_runs, plan_runs
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


def summary_table(summaries: dict[str, dict]) -> Table:
    """One column per run (variants side by side)."""
    table = Table(title="simulation summary")
    table.add_column("", style="bold")
    for name in summaries:
        table.add_column(name, justify="right")
    for key, label in _ROWS:
        cells = [summaries[name].get(key) for name in summaries]
        table.add_row(label, *("-" if v is None else str(v) for v in cells))
    return table


def sim(
    file: Path = typer.Argument(..., help="Experiment file (YAML)."),
    seed: int | None = typer.Option(None, help="Override the experiment's seed."),
    out: Path | None = typer.Option(
        None, help="Run directory (default runs/<name>-<time>-sim); with variants, the parent of one per variant."
    ),
    variant: str | None = typer.Option(None, help="Run only this variant of the file."),
    report: bool = typer.Option(True, "--report/--no-report", help="Analyse the traces and write report.html."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Simulate an experiment on a virtual clock (deterministic for a seed)."""
    plan = plan_runs(file, seed, out, "sim", variant)
    summaries: dict[str, dict] = {}
    with Progress(
        TextColumn("[bold]simulating[/] {task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True, disable=as_json,
    ) as progress:
        for run in plan.runs:
            task = progress.add_task(f"{run.resolved.name}: {len(run.resolved.nodes)} nodes", total=1.0)
            result = run_simulation(
                run.resolved, run.resolved_yaml, run.run_dir,
                progress=lambda t, end, task=task: progress.update(task, completed=t / end),
            )
            summaries[run.variant or run.resolved.name] = result.summary
    if as_json:
        typer.echo(json.dumps({
            "runs": [
                {"variant": run.variant, "run_dir": str(run.run_dir), "summary": summaries[run.variant or run.resolved.name]}
                for run in plan.runs
            ],
        }, indent=1))
    else:
        console.print(summary_table(summaries))
        for run in plan.runs:
            console.print(f"run directory: [bold]{run.run_dir}[/]")
    if report:
        finish_runs(plan, as_json=as_json)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
