"""The `testbed` entry point. Each command lives in its own module under cli/
with a `register(app)` function; this module only assembles them and turns
TestbedError into one clear message and its exit code. Every command module
is imported at start-up, so each imports at module level only what its
options need, and the rest (the experiment model, the simulator, backends,
Spark) when its command runs: `testbed --help` starts in about 0.25 s."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from node.errors import TestbedError
from orchestrator.version import tool_version

COMMAND_MODULES: list[str] = [
    "cli.node_cmd",
    "cli.testbed_cmd",
    "cli.image_cmd",
    "cli.spec_cmd",
    "cli.sim_cmd",
    "cli.analysis_cmd",
    "cli.doctor_cmd",
    "cli.spark_cmd",
    "cli.gc_cmd",
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


def _internal_error(exc: BaseException) -> int:
    """An error no input should cause: one line on stderr, the traceback in a
    log file the user can attach to a bug report; exit 70 (EX_SOFTWARE)."""
    log = Path(tempfile.gettempdir()) / f"testbed-crash-{os.getpid()}.log"
    try:
        log.write_text("".join(traceback.format_exception(exc)))
        where = f" (traceback in {log})"
    except OSError:
        where = ""
    err_console.print(f"[bold red]internal error:[/] {escape(type(exc).__name__)}: {escape(str(exc))}{where}",
                      soft_wrap=True)
    return 70


class Terminated(BaseException):
    """SIGTERM, raised where the CLI is, so it unwinds like Ctrl-C: a
    testbed being started or run is torn down before the CLI exits. Not a
    KeyboardInterrupt, which typer turns into a silent exit 130."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the teardown finish; SIGKILL still works
    raise Terminated


def main() -> None:
    """Run the CLI and exit with the status the command decided. With
    standalone_mode=False click *returns* the code of `typer.Exit(n)` rather
    than raising it, so the return value is the exit status."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False)
    except TestbedError as exc:
        err_console.print("[bold red]error:[/]", escape(str(exc)), soft_wrap=True)
        code = exc.exit_code
    except typer.Exit as exc:
        code = exc.exit_code
    except Terminated:
        err_console.print("terminated")
        code = 128 + signal.SIGTERM
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        code = 130
    except Exception as exc:  # noqa: BLE001 - the one place that turns a bug into a line and a log
        if isinstance(getattr(exc, "exit_code", None), int) and hasattr(exc, "show"):
            exc.show()  # a usage error (typer's vendored click) with its own exit code
            code = exc.exit_code
        else:
            code = _internal_error(exc)
    sys.exit(code if isinstance(code, int) else 0)
