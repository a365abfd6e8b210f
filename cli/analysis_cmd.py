"""`testbed analyze` and `testbed report`: thin wrappers over analysis/.

analyze exits 0 when every expectation and --assert holds, 1 when one fails
(or, with --strict or the experiment's `strict_traces`, when a trace file is
damaged), 2 on bad input (not a run directory, no traces, a bad expression)
and 3 when Spark cannot run (no Java, no Connect server at --spark-remote).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.tables import fmt
from orchestrator.errors import InputError

console = Console()
err_console = Console(stderr=True)


def summary_table(summary: dict) -> Table:
    t = Table(title=f"run {summary.get('run', '')}", show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    lat = summary.get("latency_ms") or {}
    rows = [
        ("nodes", summary.get("nodes")),
        ("trace events", summary.get("events")),
        ("messages", summary.get("messages")),
        ("expected deliveries", summary.get("expected_deliveries")),
        ("deliveries", summary.get("deliveries")),
        ("delivery ratio", summary.get("delivery_ratio")),
        ("latency p50 / p90 / p99 / max (ms)",
         " / ".join(fmt(lat.get(k)) for k in ("p50", "p90", "p99", "max"))),
        ("duplicates (per message)",
         f"{fmt(summary.get('duplicates'))} ({fmt(summary.get('duplicates_per_message'))})"),
        ("amplification", summary.get("amplification")),
        ("stretch p50 / p99",
         " / ".join(fmt((summary.get("stretch") or {}).get(k)) for k in ("p50", "p99"))),
        ("control publish/deliver/graft/prune/ihave/iwant",
         " / ".join(fmt((summary.get("control") or {}).get(k))
                    for k in ("publish", "deliver", "graft", "prune", "ihave", "iwant"))),
        ("mesh degree mean", summary.get("mesh_degree_mean")),
        ("load gini / max-over-mean",
         f"{fmt(summary.get('load_gini'))} / {fmt(summary.get('load_max_over_mean'))}"),
        ("recovery after churn (max s)", summary.get("recovery_max_s")),
        ("DELIVER events (raw, as go's tracestat)", summary.get("deliver_events")),
        ("RPCs in flight / messages propagating at the end",
         f"{fmt((summary.get('in_flight') or {}).get('rpcs_in_flight_at_end'))} / "
         f"{fmt((summary.get('in_flight') or {}).get('messages_propagating_at_end'))}"),
        ("damaged trace files",
         ", ".join((summary.get("trace_integrity") or {}).get("damaged_nodes") or []) or "none"),
    ]
    for name, value in rows:
        t.add_row(name, value if isinstance(value, str) else fmt(value))
    return t


def results_table(results) -> Table:
    t = Table(title="assertions", show_header=True, header_style="bold")
    t.add_column("")
    t.add_column("assertion")
    t.add_column("actual", justify="right")
    t.add_column("from")
    for r in results:
        t.add_row(
            "[green]PASS[/]" if r.passed else "[bold red]FAIL[/]",
            r.expr,
            fmt(r.actual, 6),
            r.source,
        )
    return t


def analyze(
    run_dir: Path = typer.Argument(..., help="The run directory (traces/, events.jsonl, topology.json, ...)."),
    asserts: list[str] = typer.Option(
        None, "--assert", "-a", help="An assertion '<metric> <op> <number>', e.g. 'delivery_ratio >= 0.999'. Repeatable."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Write the assertions as JUnit XML to this file."),
    spark_master: str | None = typer.Option(
        None, "--spark-master", help="Spark master URL (default $SPARK_MASTER, spark-defaults.conf, else local[*])."
    ),
    spark_remote: str | None = typer.Option(
        None, "--spark-remote",
        help="Spark Connect URL, e.g. sc://host:15002 (default $SPARK_REMOTE, else the `testbed spark start` server "
             "while it is up).",
    ),
    traces: Path | None = typer.Option(None, "--traces", help="Read trace files (.pb, .json, .jsonl) from this directory."),
    strict: bool = typer.Option(
        False, "--strict", help="Exit 1 when a trace file is cut or corrupt (also the experiment's strict_traces)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (and assertion results) as JSON."),
) -> None:
    """Compute the run's metrics with PySpark, write metrics/*.parquet and summary.json, check assertions."""
    from analysis import check_assertions, junit_xml
    from analysis.assertions import validate_assertion
    from analysis.integrity import strict_traces_option
    from analysis.rundir import open_run_dir

    run = open_run_dir(run_dir, traces)  # bad input fails before Spark starts
    cli_asserts = list(asserts or [])
    for expr in cli_asserts + run.expectations():
        validate_assertion(expr)

    started = time.monotonic()
    summary = _analyse(run_dir, spark_master, spark_remote, traces, quiet=as_json or not console.is_terminal)
    elapsed = time.monotonic() - started

    results = check_assertions(summary, run.expectations(), source="expectation")
    results += check_assertions(summary, cli_asserts, source="assert")
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(results, suite=f"testbed.analyze.{summary.get('run', 'run')}", time_s=elapsed))
    _print_results(summary, results, as_json, run.metrics_dir, run.summary_path)
    damaged = warn_about_run(summary)
    failed = [r for r in results if not r.passed]
    for r in failed:
        err_console.print(f"[bold red]assertion failed:[/] {r.expr}: {r.message}")
    if damaged and (strict or strict_traces_option(run)):
        err_console.print("[bold red]strict:[/] damaged trace files; the figures above undercount")
        raise typer.Exit(1)
    if failed:
        raise typer.Exit(1)


def _analyse(run_dir: Path, spark_master: str | None, spark_remote: str | None, traces: Path | None,
             quiet: bool) -> dict:
    """The run's summary, computed on the endpoint the options name, with a
    progress bar on a terminal."""
    from analysis import run_analysis
    from analysis.endpoint import analysis_endpoint
    from orchestrator.records.state import state_dir

    with analysis_endpoint(state_dir(), spark_master, spark_remote) as remote, Progress(
        SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=err_console, transient=True, disable=quiet,
    ) as progress:
        task = progress.add_task("analysing", total=None)

        def on_progress(stage: str, frac: float | None) -> None:
            if frac is None:
                progress.update(task, description=stage, total=None)
            else:
                progress.update(task, description=stage, total=1.0, completed=frac)

        return run_analysis(run_dir, spark_master=spark_master, traces=traces, progress=on_progress,
                            spark_remote=remote)


def _print_results(summary: dict, results: list, as_json: bool, metrics_dir: Path, summary_path: Path) -> None:
    """Exactly one JSON document with --json, else the summary and assertion tables."""
    if as_json:
        out = dict(summary)
        out["assertions"] = [r.to_dict() for r in results]
        typer.echo(json.dumps(out, indent=2, default=str))
        return
    console.print(summary_table(summary))
    if results:
        console.print(results_table(results))
    console.print(f"metrics in {metrics_dir}, summary in {summary_path}")


def warn_about_run(summary: dict) -> bool:
    """Print on stderr what makes the figures less than whole (damaged traces,
    missing run files, messages still in flight at the end); True when a
    trace file was damaged."""
    integrity = summary.get("trace_integrity") or {}
    damaged = list(integrity.get("damaged_nodes") or [])
    if damaged:
        err_console.print(
            f"[bold yellow]warning:[/] damaged trace files ({integrity.get('truncated', 0)} cut, "
            f"{integrity.get('corrupt', 0)} corrupt, {integrity.get('bytes_skipped', 0)} bytes skipped) "
            f"from {', '.join(damaged)}"
        )
    for missing in summary.get("missing_files") or []:
        err_console.print(f"[bold yellow]warning:[/] no {missing['file']}: {missing['affects']}")
    in_flight = summary.get("in_flight") or {}
    if in_flight.get("messages_propagating_at_end"):
        err_console.print(
            f"[bold yellow]warning:[/] the traces ended with {in_flight.get('rpcs_in_flight_at_end', 0)} RPCs in flight and "
            f"{in_flight.get('messages_propagating_at_end', 0)} messages still propagating"
        )
    return bool(damaged)


def report(
    run_dirs: list[Path] = typer.Argument(..., help="One run directory, or several to compare side by side."),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="The HTML file (default RUN_DIR/report.html, or ./report.html for several runs)."
    ),
    spark_master: str | None = typer.Option(None, "--spark-master", help="Spark master for runs not analysed yet."),
    spark_remote: str | None = typer.Option(None, "--spark-remote", help="Spark Connect URL for runs not analysed yet."),
) -> None:
    """Write one self-contained HTML report (inline SVG charts, works offline) for one or several runs."""
    from analysis import write_report
    from analysis.endpoint import analysis_endpoint
    from orchestrator.records.state import state_dir

    if not run_dirs:
        raise InputError("give at least one run directory")
    if output is None:
        output = run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html")
    with analysis_endpoint(state_dir(), spark_master, spark_remote) as remote:
        path = write_report(run_dirs, output, spark_master=spark_master, spark_remote=remote)
    console.print(f"report written to {path}")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
    app.command("report")(report)
