"""What `testbed sim` and `testbed run` share around the run itself: planning
the runs of a file (one, or one per variant, each in its own run directory
under a common parent), and afterwards analysing each run, writing its
report.html (plus a side-by-side comparison for variants) and collecting the
experiment's expectations into an `Outcome`. The command prints the outcome
(one JSON document with --json) and then exits as it says: 1 when an
expectation failed; on a machine without Java the run directories stay,
analysis is skipped with a clear warning, or exit 3 when the experiment has
expectations that could not be checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from cli.tables import expectation_lines
from orchestrator.errors import BackendUnavailable, InputError

if TYPE_CHECKING:
    from orchestrator.experiment.model import ResolvedExperiment

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
    from orchestrator.experiment.spec import load_experiment, resolved_to_yaml
    from orchestrator.records.rundir import default_run_dir

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
    from analysis.endpoint import spark_endpoint
    from orchestrator.records.state import state_dir

    if spark_endpoint(state_dir(), spark_master, None) is None:
        start_in_background(spark_master)


@dataclass(frozen=True)
class Outcome:
    """What the analysis after `sim` or `run` found: the reports written,
    each run's expectations, or why the analysis was skipped."""

    reports: list[str]
    expectations: dict[str, list[dict[str, Any]]]
    skipped: str | None = None  # why the analysis could not run
    unchecked: bool = False  # ... while the experiment had expectations
    damaged: tuple[str, ...] = ()  # nodes whose trace file is cut or corrupt
    strict: bool = False  # the experiment's strict_traces: damage fails the run

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for rs in self.expectations.values() for r in rs if not r["passed"]]

    def to_json(self) -> dict[str, Any]:
        return {"reports": self.reports, "expectations": self.expectations, "analysis_skipped": self.skipped,
                "damaged_traces": list(self.damaged)}

    def exit(self) -> None:
        """Exit 3 when expectations could not be checked (never a pass), 1
        when one failed or, under strict_traces, a trace is damaged; return
        when all is well."""
        if self.unchecked:
            raise BackendUnavailable(f"the expectations could not be checked: {self.skipped}")
        if self.failed or (self.strict and self.damaged):
            raise typer.Exit(1)


def finish_runs(plan: Plan, spark_master: str | None = None) -> Outcome:
    """Analyse every run and write the reports (plus a comparison for
    variants); prints nothing but progress on stderr."""
    from analysis import run_analysis, write_report  # noqa: PLC0415 - Spark only when a run is analysed
    from analysis.endpoint import analysis_endpoint  # noqa: PLC0415
    from orchestrator.records.state import state_dir  # noqa: PLC0415

    run_dirs = [r.run_dir for r in plan.runs]
    damaged: list[str] = []
    results: dict[str, list[dict[str, Any]]] = {}
    reports: list[str] = []
    try:
        with analysis_endpoint(state_dir(), spark_master, None) as remote:
            for run_dir in run_dirs:
                with err.status(f"analysing {run_dir} with Spark", spinner="dots"):
                    summary = run_analysis(run_dir, spark_master=spark_master, spark_remote=remote)
                    reports.append(str(write_report([run_dir], run_dir / "report.html", spark_master, remote)))
                results[str(run_dir)] = summary.get("expectations", [])
                damaged += (summary.get("trace_integrity") or {}).get("damaged_nodes") or []
            if plan.comparison_dir is not None:
                with err.status("writing the comparison report", spinner="dots"):
                    comparison = write_report(run_dirs, plan.comparison_dir / "report.html", spark_master, remote)
                    reports.append(str(comparison))
    except BackendUnavailable as exc:
        return Outcome(reports, results, str(exc), unchecked=any(r.resolved.expectations for r in plan.runs))
    strict = any(r.resolved.strict_traces for r in plan.runs)
    return Outcome(reports, results, damaged=tuple(sorted(set(damaged))), strict=strict)


def print_outcome(outcome: Outcome) -> None:
    if outcome.skipped is not None:
        if not outcome.unchecked:
            err.print(f"[bold yellow]warning:[/] analysis skipped: {outcome.skipped}")
        return
    for report in outcome.reports:
        out.print(f"report: [bold]{report}[/]")
    for line in expectation_lines(outcome.expectations):
        out.print(line)
    if outcome.damaged:
        err.print(f"[bold yellow]warning:[/] damaged trace files from {', '.join(outcome.damaged)}")
