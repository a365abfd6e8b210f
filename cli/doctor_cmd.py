"""`testbed doctor`: one table of what this host offers and what each missing
piece costs; exit 0 when the default backend can run the demo, 1 otherwise.
The probes and verdicts live in orchestrator/doctor; this is the wiring."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.doctor import Report, assess, gather

STYLE = {"ok": "green", "limited": "yellow", "missing": "red", "skipped": "dim"}


def doctor(
    spark: bool = typer.Option(False, "--spark", help="Also start Spark once and report how long it took (seconds)."),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as one JSON document."),
) -> None:
    """What this host can do: Docker, kernel shaping, Java/Spark, KVM, cargo,
    py-libp2p, and how many routers it can carry."""
    spark_start = None
    if spark:
        from analysis.spark import start_seconds  # noqa: PLC0415 - pyspark is imported only when asked

        spark_start = start_seconds
    err = Console(stderr=True)
    with err.status("starting Spark and probing this host" if spark else "probing this host", spinner="dots"):
        report = assess(gather(spark_start=spark_start))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=1))
    else:
        _print(report)
    raise typer.Exit(0 if report.demo_ok else 1)


def _print(report: Report) -> None:
    console = Console()
    table = Table(title="testbed doctor: what this host offers")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("found; without it; fix", overflow="fold")
    for check in report.checks:
        style = STYLE.get(check.status, "")
        status = f"[{style}]{check.status}[/]" + (" [bold red]demo[/]" if check.blocks_demo else "")
        text = escape(check.found)
        if check.status != "ok" and check.cost:
            text += f"\n[dim]without it:[/] {escape(check.cost)}"
        if check.status != "ok" and check.fix:
            text += f"\n[dim]fix:[/] [bold]{escape(check.fix)}[/]"
        table.add_row(check.name, status, text)
    console.print(table)
    if report.budget is not None:
        console.print(f"router budget: about [bold]{report.budget.routers}[/] routers at rest "
                      f"({report.budget.by_memory} by memory, {report.budget.by_cpu} by CPU: README, testbed doctor)")
    if report.demo_ok:
        console.print(f"[green]the demo can run[/] on the {report.default_backend} backend: "
                      "testbed run topologies/quick.yaml")
        return
    console.print(f"[bold red]the demo cannot run[/] on the {report.default_backend} backend:")
    for check in report.problems:
        console.print(f"  {check.name}: {escape(check.found)}; fix: [bold]{escape(check.fix)}[/]")


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
