"""The `testbed` entry point. Each command lives in its own module under cli/
with a `register(app)` function; this module only assembles them and turns
TestbedError into one clear message and its exit code."""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.errors import TestbedError
from orchestrator.version import tool_version

COMMAND_MODULES: list[str] = [
    "cli.node_cmd",
    "cli.testbed_cmd",
    "cli.image_cmd",
    "cli.spec_cmd",
    "cli.sim_cmd",
    "cli.analysis_cmd",
]

app = typer.Typer(
    name="testbed",
    help="Run gossipsub-family routers in containers, processes or a virtual clock; shape links, churn, analyse traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


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
        err_console.print("[bold red]error:[/]", escape(str(exc)), soft_wrap=True)
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
            err_console.print("[bold red]error:[/]", escape(str(exc)), soft_wrap=True)
        sys.exit(code)
