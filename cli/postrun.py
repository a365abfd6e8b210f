"""What `testbed sim` and `testbed run` share around the run itself: planning
the runs of a file (one, or one per variant, each in its own run directory
under a common parent), and afterwards analysing each run, writing its
report.html (plus a side-by-side comparison for variants), checking the
experiment's expectations and exiting 1 when one fails. A machine without Java
keeps its run directories; analysis is skipped with a clear warning, or, when
the experiment has expectations that could not be checked, exits 3."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from orchestrator.errors import BackendUnavailable, InputError
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.experiment.spec import load_experiment, resolved_to_yaml
from orchestrator.rundir import default_run_dir

err = Console(stderr=True)
out = Console()


@dataclass(frozen=True)
class PlannedRun:
    variant: str | None
    resolved: ResolvedExperiment
    resolved_yaml: str
    run_dir: Path


@dataclass(frozen=True)
class Plan:
    runs: list[PlannedRun]
    comparison_dir: Path | None  # where the variants' side-by-side report goes


def plan_runs(file: Path, seed: int | None, out_dir: Path | None, backend: str, variant: str | None) -> Plan:
    """One run per variant of the file (or the file itself); `--variant`
    picks one. With variants, `out_dir` is the parent of `<variant>/` run dirs."""
    if not file.is_file():
        raise InputError(f"{file}: no such experiment file")
    experiment = load_experiment(file)
    variants = experiment.variants()
    if variant is not None:
        chosen = [(name, exp) for name, exp in variants if name == variant]
        if not chosen:
            known = ", ".join(name for name, _ in variants) or "none"
            raise InputError(f"{file}: no variant {variant!r} (variants: {known})")
        variants = chosen
    if not variants:
        resolved = experiment.resolve(seed)
        run_dir = out_dir or default_run_dir(resolved.name, backend)
        return Plan([PlannedRun(None, resolved, resolved_to_yaml(resolved, experiment), run_dir)], None)
    parent = out_dir or default_run_dir(file.stem, backend)
    runs = []
    for name, exp in variants:
        resolved = exp.resolve(seed)
        runs.append(PlannedRun(name, resolved, resolved_to_yaml(resolved, exp), parent / name))
    return Plan(runs, parent if len(runs) > 1 else None)


def warm_up_analysis(spark_master: str | None = None) -> None:
    """Start the analysis' Spark session in the background while the
    experiment runs, unless a Connect server will serve it (issue 14)."""
    from analysis.spark import start_in_background
    from cli.spark_cmd import spark_endpoint

    if spark_endpoint(spark_master, None) is None:
        start_in_background(spark_master)


def finish_runs(plan: Plan, as_json: bool = False, spark_master: str | None = None) -> None:
    """Analyse every run, write the reports, print the expectations; exit 1
    if one failed, or if a trace was damaged and the experiment asks for
    `strict_traces`."""
    from analysis import run_analysis, write_report
    from cli.spark_cmd import spark_endpoint

    remote = spark_endpoint(spark_master, None)
    run_dirs = [r.run_dir for r in plan.runs]
    damaged: list[str] = []
    results: dict[str, list[dict]] = {}
    reports: list[str] = []
    try:
        for run_dir in run_dirs:
            with err.status(f"analysing {run_dir} with Spark", spinner="dots"):
                summary = run_analysis(run_dir, spark_master=spark_master, spark_remote=remote)
                reports.append(str(write_report([run_dir], run_dir / "report.html", spark_master, remote)))
            results[str(run_dir)] = summary.get("expectations", [])
            damaged += (summary.get("trace_integrity") or {}).get("damaged_nodes") or []
        if plan.comparison_dir is not None:
            with err.status("writing the comparison report", spinner="dots"):
                reports.append(str(write_report(run_dirs, plan.comparison_dir / "report.html", spark_master, remote)))
    except BackendUnavailable as exc:
        if any(r.resolved.expectations for r in plan.runs):
            # An expectation that could not be checked must never read as a pass.
            raise BackendUnavailable(f"the expectations could not be checked: {exc}") from exc
        err.print(f"[bold yellow]warning:[/] analysis skipped: {exc}")
        return
    failed = [r for rs in results.values() for r in rs if not r["passed"]]
    if as_json:
        typer.echo(json.dumps({"reports": reports, "expectations": results}))
    else:
        for report in reports:
            out.print(f"report: [bold]{report}[/]")
        for run_dir, rs in results.items():
            for r in rs:
                mark = "[green]PASS[/]" if r["passed"] else "[bold red]FAIL[/]"
                out.print(f"  {mark} {r['expr']}: {r['message']}" + (f"  ({run_dir})" if len(results) > 1 else ""))
    # the experiment model may not define strict_traces yet: read it defensively
    strict = any(getattr(r.resolved, "strict_traces", False) is True for r in plan.runs)
    if damaged:
        err.print(f"[bold yellow]warning:[/] damaged trace files from {', '.join(sorted(set(damaged)))}")
    if failed or (strict and damaged):
        raise typer.Exit(1)
