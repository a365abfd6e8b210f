"""`testbed node --config FILE`: the router daemon (the same as
`python -m node --config FILE`), as the backends start it."""

from __future__ import annotations

from pathlib import Path

import typer


def node(config: Path = typer.Option(..., "--config", help="The node's JSON configuration (NodeConfig).")) -> None:
    """Run one router daemon until SIGTERM or a control `shutdown`."""
    from node.__main__ import run_from_file  # noqa: PLC0415 - keep the CLI's start fast

    code = run_from_file(config)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("node")(node)
