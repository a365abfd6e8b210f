"""`testbed gc`: find every gossip-testbed object on the Docker engine,
whatever state directory made it, list it, and remove it after a yes.

`testbed down --all` only removes what its own state directory made (so a
test suite never touches a real testbed). A testbed whose state directory is
gone, or was another user's, is only reachable by its labels: this is that
path. It is deliberately loud: a listing first, then a prompt unless --yes;
--testbed and --state-dir narrow it, --dry-run only lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.errors import InputError
from orchestrator.progress import RichReporter

if TYPE_CHECKING:
    from orchestrator.dockerapi.teardown import Resource

console = Console()
err = Console(stderr=True)


def gc(
    testbed: str | None = typer.Option(None, "--testbed", help="Only this testbed's objects."),
    state_dir: Path | None = typer.Option(
        None, "--state-dir", help="Only objects made with this TESTBED_STATE_DIR (default: any)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be removed; remove nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking."),
    as_json: bool = typer.Option(False, "--json", help="Print the listing (and what was removed) as JSON."),
) -> None:
    """Remove every gossip-testbed container, network and volume on the
    Docker engine (and service, secret and overlay in its swarm), and the
    host's own bridges, delay lines and iptables rules, from any state
    directory; lists them and asks first."""
    from orchestrator.backends.docker.teardown import find, teardown  # noqa: PLC0415
    from orchestrator.dockerapi.teardown import Scope, TeardownReport, summary  # noqa: PLC0415
    from orchestrator.dockerapi.client import docker_client  # noqa: PLC0415
    from orchestrator.backends.swarm.teardown import listed as swarm_listed  # noqa: PLC0415
    from orchestrator.backends.swarm.teardown import remove as swarm_remove  # noqa: PLC0415
    from orchestrator.records.state import check_name  # noqa: PLC0415

    if testbed is not None:
        check_name(testbed)
    if as_json and not (yes or dry_run):
        raise InputError("--json prints one document and cannot prompt: add --yes or --dry-run")
    scope = Scope(testbed, str(state_dir.resolve()) if state_dir is not None else None)
    client = docker_client()
    try:
        # Swarm objects first: their task containers and overlay carry the
        # same labels, and only removing their services removes them.
        in_swarm = swarm_listed(scope)
        seen = {r.id for r in in_swarm}
        resources = in_swarm + [r for r in find(client, scope).resources() if r.id not in seen]
        if not as_json:
            _print_listing(resources, scope.describe())
        if not resources or dry_run:
            if as_json:
                typer.echo(json.dumps({"scope": scope.describe(), "found": [r.as_dict() for r in resources],
                                       "removed": [], "left": [], "dry_run": dry_run}, indent=1))
            return
        if not yes and not typer.confirm(f"remove {summary(resources)}?", default=False, err=True):
            err.print("nothing removed")
            raise typer.Exit(1)
        first = swarm_remove(scope)
        rest = teardown(client, scope, reporter=None if as_json else RichReporter(err))
        report = TeardownReport(first.removed + rest.removed, first.left + rest.left)
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps({"scope": scope.describe(), "found": [r.as_dict() for r in resources],
                               "removed": list(report.removed), "left": [lf.line() for lf in report.left],
                               "dry_run": False}, indent=1))
    else:
        for line in report.removed:
            console.print(line)
    report.raise_if_incomplete()


def _print_listing(resources: list[Resource], scope: str) -> None:
    if not resources:
        console.print(f"no gossip-testbed objects on this Docker engine ({scope})")
        return
    table = Table(title=f"gossip-testbed objects ({scope})")
    for col in ("kind", "name", "testbed", "state directory"):
        table.add_column(col)
    for r in resources:
        table.add_row(r.kind, r.name, r.testbed, r.state or "-")
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("gc")(gc)
