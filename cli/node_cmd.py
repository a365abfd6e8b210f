"""`testbed node --config FILE`: the router daemon (the same as
`python -m node --config FILE`), as the backends start it; `testbed node
--contract PARAMS [--config FILE]`: the same router under test-plans'
gossipsub-interop contract (`python -m node.interop.contract`)."""

from __future__ import annotations

from pathlib import Path

import typer


def node(
    config: Path | None = typer.Option(None, "--config", help="The node's JSON configuration (NodeConfig)."),
    contract: Path | None = typer.Option(
        None, "--contract", help="Run under libp2p test-plans' gossipsub-interop contract with this params file "
                                 "(the script); --config is then optional (docs/foreign-routers.md)."),
) -> None:
    """Run one router daemon until SIGTERM or a control `shutdown`."""
    if contract is not None:
        from node.interop.contract import main as interop_main  # noqa: PLC0415

        code = interop_main(["--params", str(contract), *(["--config", str(config)] if config else [])])
    elif config is None:
        raise typer.BadParameter("give --config (or --contract PARAMS)", param_hint="--config")
    else:
        from node.__main__ import run_from_file  # noqa: PLC0415 - keep the CLI's start fast

        code = run_from_file(config)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("node")(node)
