"""`testbed sim FILE`: run an experiment on the virtual clock and print its
summary in the reference simulator's terms; then analyse and report like
every other run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from cli.postrun import finish_runs, plan_runs, print_outcome
from cli.tables import SIM_ROWS, runs_table
from orchestrator.progress import Reporter, RichReporter

console = Console()


def sim(
    file: Annotated[Path, typer.Argument(help="Experiment file (YAML).")],
    seed: Annotated[int | None, typer.Option(help="Override the experiment's seed.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Run directory (default runs/<name>-<time>-sim); with variants, the parent of one per variant.",
    )] = None,
    variant: Annotated[str | None, typer.Option(help="Run only this variant of the file.")] = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Analyse the traces and write report.html.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")] = False,
    trace_sample: Annotated[float | None, typer.Option(
        help="Trace only this fraction of the nodes (a seeded sample, 0 < F < 1), plus exact per-node event "
             "counts for all of them (counters.csv); default: every node's full trace.",
    )] = None,
    pypy: Annotated[bool, typer.Option(
        "--pypy", help="Simulate on PyPy, in the gossip-testbed/pypy image (`testbed image build --pypy`): "
                       "the same traces, byte for byte, in about half the time at scale.",
    )] = False,
) -> None:
    """Simulate an experiment on a virtual clock (deterministic for a seed)."""
    from orchestrator.errors import InputError
    from orchestrator.routers.kinds import refuse_in_simulator
    from orchestrator.sim.trace_level import TraceLevel
    from orchestrator.sim.run import run_simulation

    try:
        level = TraceLevel(trace_sample)
    except ValueError as exc:
        raise InputError(f"--trace-sample: {exc}") from None

    plan = plan_runs(file, seed, out, "sim", variant)
    for run in plan.runs:
        refuse_in_simulator(run.resolved.nodes)
    reporter = Reporter() if as_json else RichReporter(Console(stderr=True))
    simulate = run_simulation
    if pypy:
        from orchestrator.pypy.run import run_simulation_on_pypy  # the image and Docker's SDK: only with --pypy

        simulate = run_simulation_on_pypy
    summaries: dict[str, dict] = {}
    for run in plan.runs:
        result = simulate(run.resolved, run.resolved_yaml, run.run_dir, reporter, level)
        summaries[run.variant or run.resolved.name] = result.summary
    outcome = finish_runs(plan) if report else None
    if as_json:
        runs = [
            {"variant": run.variant, "run_dir": str(run.run_dir), "summary": summaries[run.variant or run.resolved.name]}
            for run in plan.runs
        ]
        typer.echo(json.dumps({"runs": runs, **(outcome.to_json() if outcome else {})}, indent=1))
    else:
        console.print(runs_table("simulation summary", SIM_ROWS, summaries))
        for run in plan.runs:
            console.print(f"run directory: [bold]{run.run_dir}[/]")
        if outcome is not None:
            print_outcome(outcome)
    if outcome is not None:
        outcome.exit()


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
