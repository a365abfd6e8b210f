"""`testbed spark start|stop|status`: a local Spark Connect server
(analysis/connect.py) so that repeated analyses skip the JVM start; which
Spark an analysis then uses is analysis/endpoint.py's rule."""

from __future__ import annotations

import json
import os
import time

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.records.state import state_dir

console = Console()
err = Console(stderr=True)
spark_app = typer.Typer(help="Run a local Spark Connect server that analyses use while it is up.",
                        no_args_is_help=True)


def _table(server, title: str) -> Table:
    """The server's facts but its URL, which _print_url prints whole."""
    t = Table(title=title, show_header=False)
    t.add_column("")
    t.add_column("")
    for key, value in server.to_dict().items():
        if key == "url":
            continue
        if key == "started_at":
            value = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(value))
        t.add_row(key, str(value))
    return t


def _print_url(server) -> None:
    """The URL and the line that hands it to another shell, each on one
    line however narrow the terminal (a table cell truncates it and a
    wrapped line copies as two: a cut session id fails with
    INVALID_SESSION_UUID_ID)."""
    console.print(f"url: {server.url}", soft_wrap=True, highlight=False, markup=False)
    console.print(f"export SPARK_REMOTE='{server.url}'", soft_wrap=True, highlight=False, markup=False)


@spark_app.command("start")
def start(
    port: int | None = typer.Option(None, "--port", help="Listen on 127.0.0.1:PORT (default: a free port)."),
    spark_master: str | None = typer.Option(
        None, "--spark-master", help="The server's master (default $SPARK_MASTER, spark-defaults.conf, else local[*])."
    ),
    warm: bool = typer.Option(
        True, "--warm-up/--no-warm-up",
        help="Before returning, have a new server analyse a tiny run, so that the first real analysis is warm; "
        "then keep warming it in the background, with the tiny run and then a 1M-event one (about half a minute "
        "of CPU), pausing while an analysis or an experiment runs (`testbed spark status` says when that is done).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the server as JSON."),
) -> None:
    """Start the server (or show the one already up), wait until it listens and warm it up. Analyses through it
    share one server-side session, named in its URL."""
    from analysis.connect import recorded
    from analysis.connect import start as start_server

    started = time.monotonic()
    new = recorded(state_dir()) is None
    with err.status("starting the Spark Connect server", spinner="dots") as status:
        server = start_server(
            state_dir(), port=port, master=spark_master,
            on_wait=lambda s: status.update(f"starting the Spark Connect server ({s:.0f} s)"),
        )
        listening_s = time.monotonic() - started
        warm_up_s = 0.0  # a server already up is not warmed again
        if new and warm:
            status.update("warming up the Spark Connect server (a tiny analysis)")
            if _warm_up(server.url):
                from analysis.warming import detach

                detach(state_dir(), server.url)
            warm_up_s = round(time.monotonic() - started - listening_s, 3)
    if as_json:
        typer.echo(json.dumps({**server.to_dict(), "start_s": round(listening_s, 3), "warm_up_s": warm_up_s}))
    else:
        console.print(_table(server, "Spark Connect server"))
        console.print("`testbed analyze` uses it while it is up; other Spark Connect clients can, with:")
        _print_url(server)


def _warm_up(url: str) -> bool:
    """analysis/warmup.py; a failure leaves the server up and says so (False)."""
    from analysis.warmup import warm_up

    try:
        warm_up(url)
    except Exception as exc:  # noqa: BLE001 - the server works without it; reported, not fatal
        err.print(f"[bold yellow]warning:[/] the warm-up analysis failed ({type(exc).__name__}: {exc}); "
                  "the first analysis will pay the server's warm-up")
        return False
    return True


@spark_app.command("stop")
def stop(as_json: bool = typer.Option(False, "--json", help="Print the result as JSON.")) -> None:
    """Stop the server this state directory started."""
    from analysis.connect import stop as stop_server
    from analysis.warming import stop as stop_warming

    stop_warming(state_dir())
    server = stop_server(state_dir())
    if as_json:
        typer.echo(json.dumps({"stopped": server.to_dict() if server else None}))
    else:
        console.print(f"stopped the server (pid {server.pid})" if server else "no Spark Connect server was running")


@spark_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="Print the status as JSON.")) -> None:
    """Show whether the server is up and its background warm-up done; exit 3 when it is not up."""
    from dataclasses import asdict

    from analysis.connect import recorded, running
    from analysis.warming import read

    server = recorded(state_dir())
    up = running(state_dir()) is not None
    warming = read(state_dir()) if server is not None else None
    if as_json:
        typer.echo(json.dumps({"up": up, "server": server.to_dict() if server else None,
                               "warm_up": asdict(warming) if warming else None}))
    elif server is None:
        console.print("no Spark Connect server is running (start one with `testbed spark start`)")
    else:
        console.print(_table(server, "Spark Connect server: " + ("up" if up else "starting")))
        _print_url(server)
        if warming is not None:
            console.print(_warming_line(warming))
    if not up:
        raise typer.Exit(3)


def _warming_line(warming) -> str:
    phases = [
        f"{phase.runs} {name} analyses (last {phase.last_s:.1f} s, best {phase.best_s:.1f} s)"
        for name, phase in (("small", warming.small), ("large", warming.large)) if phase.runs
    ]
    runs = " and ".join(phases) or "no analyses"
    if not warming.done:
        return f"background warm-up: running ({runs} so far)"
    return f"background warm-up: done after {runs}" + (f" ({warming.error})" if warming.error else "")


def register(app: typer.Typer) -> None:
    app.add_typer(spark_app, name="spark")
