"""`testbed image build|ls`: the router image the Docker backend runs. `testbed
up` builds it on first use; this command builds it ahead of time (and shows how
long a build from nothing takes here)."""

from __future__ import annotations

import json
import time

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.foreign import ADAPTERS, OURS, build_foreign_image
from orchestrator.image import BASES, build_image, list_images
from orchestrator.progress import Reporter, RichReporter

console = Console()
image_app = typer.Typer(help="Build and list the router image for the Docker backend.", no_args_is_help=True)


@image_app.command("build")
def build(
    base: str = typer.Option(
        "auto", "--base",
        help="auto (python:3.11-slim if present or pullable, else a debootstrapped Debian bookworm), "
             "debootstrap, or python:3.11-slim.",
    ),
    router: str = typer.Option(
        OURS, "--router",
        help=f"Whose image: {OURS} (our routers) or a foreign adapter ({', '.join(ADAPTERS)}).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Build a router image (a no-op when nothing changed)."""
    if base not in BASES:
        raise typer.BadParameter(f"choose one of {', '.join(BASES)}", param_hint="--base")
    if router != OURS and router not in ADAPTERS:
        raise typer.BadParameter(f"choose one of {', '.join([OURS, *ADAPTERS])} (a bare contract image is built "
                                 "with docker build, docs/foreign-routers.md)", param_hint="--router")
    started = time.monotonic()
    reporter = Reporter() if as_json else RichReporter(Console(stderr=True))
    with reporter.phase(f"building the {router} image"):
        if router == OURS:
            info = build_image(base=base, reporter=reporter)
        else:
            info = build_foreign_image(router, base=base, reporter=reporter)
    if as_json:
        typer.echo(json.dumps(info.to_dict(), indent=1))
        return
    verb = "built" if info.built else "up to date:"
    console.print(f"{verb} [bold]{info.tag}[/] on {info.base} "
                  f"({info.size_bytes / 1e6:.0f} MB, {time.monotonic() - started:.1f}s)")


@image_app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json", help="Print the images as JSON.")) -> None:
    """List the images the testbed built (label gossip-testbed=1)."""
    rows = list_images()
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    table = Table(title="gossip-testbed images")
    for column in ("tags", "id", "created", "size"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(", ".join(row["tags"]), row["id"], row["created"][:19], f"{row['size_bytes'] / 1e6:.0f} MB")
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
