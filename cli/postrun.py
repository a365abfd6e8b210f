"""What every run command (`testbed sim`, `testbed run`) does once the run
directory is complete: analyse it, write report.html, check the experiment's
expectations and exit 1 when one fails. A machine without Java still keeps its
run directory; analysis is skipped with a clear warning."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from orchestrator.errors import BackendUnavailable

err = Console(stderr=True)
out = Console()


def finish_run(run_dir: Path, as_json: bool = False, spark_master: str | None = None) -> None:
    from analysis import run_analysis, write_report

    try:
        with err.status("analysing traces with Spark", spinner="dots"):
            summary = run_analysis(run_dir, spark_master=spark_master)
            report = write_report([run_dir], run_dir / "report.html", spark_master=spark_master)
    except BackendUnavailable as exc:
        err.print(f"[bold yellow]warning:[/] analysis skipped: {exc}")
        return
    results = summary.get("expectations", [])
    failed = [r for r in results if not r["passed"]]
    if as_json:
        typer.echo(json.dumps({"run_dir": str(run_dir), "report": str(report), "expectations": results}))
    else:
        out.print(f"report: [bold]{report}[/]")
        for r in results:
            mark = "[green]PASS[/]" if r["passed"] else "[bold red]FAIL[/]"
            out.print(f"  {mark} {r['expr']}: {r['message']}")
    if failed:
        raise typer.Exit(1)
