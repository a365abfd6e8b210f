"""The `testbed` entry point. Each command lives in its own module under cli/
with a `register(app)` function; this module only assembles them and turns
TestbedError into one clear message and its exit code."""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

import typer
from rich.console import Console

from orchestrator.errors import TestbedError

COMMAND_MODULES: list[str] = [
]

app = typer.Typer(
    name="testbed",
    help="Run gossipsub-family routers in containers, processes or a virtual clock; shape links, churn, analyse traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


def tool_version() -> str:
    try:
        return version("gossip-testbed")
    except PackageNotFoundError:
        return "0+unknown"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"testbed {tool_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _version_flag: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """gossip-testbed: how does a pubsub router behave on a real network?"""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    try:
        app(standalone_mode=False)
    except TestbedError as exc:
        err_console.print(f"[bold red]error:[/] {exc}")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click's usage errors carry their own exit code
        code = getattr(exc, "exit_code", None)
        if code is None:
            raise
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err_console.print(f"[bold red]error:[/] {exc}")
        sys.exit(code)
