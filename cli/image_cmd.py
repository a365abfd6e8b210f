"""`testbed image build|ls|distribute|push`: the router image the Docker and
swarm backends run. `testbed up` builds it on first use; `build` builds it
ahead of time (and shows how long a build from nothing takes here);
`distribute` and `push` bring it to the other nodes of a swarm
(docs/swarm.md)."""

from __future__ import annotations

import json
import time

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.routers.kinds import ADAPTERS, OURS, kind_of
from orchestrator.images.router import BASES, build_image, ensure_image, list_images
from orchestrator.progress import Reporter, RichReporter

console = Console()
image_app = typer.Typer(help="Build, list and distribute the router image for the Docker and swarm backends.", no_args_is_help=True)


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
    pypy: bool = typer.Option(
        False, "--pypy", help="Build the simulator's PyPy image (`testbed sim --pypy`) instead of a router image.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Build a router image, or the simulator's PyPy image (a no-op when nothing changed)."""
    if base not in BASES:
        raise typer.BadParameter(f"choose one of {', '.join(BASES)}", param_hint="--base")
    if router != OURS and router not in ADAPTERS:
        raise typer.BadParameter(f"choose one of {', '.join([OURS, *ADAPTERS])} (a bare contract image is built "
                                 "with docker build, docs/foreign-routers.md)", param_hint="--router")
    if pypy and router != OURS:
        raise typer.BadParameter("--pypy builds the simulator's image, not a router's: drop --router",
                                 param_hint="--pypy")
    started = time.monotonic()
    reporter = Reporter() if as_json else RichReporter(Console(stderr=True))
    if pypy or router != OURS:
        what = "simulator's PyPy" if pypy else router
        with reporter.phase(f"building the {what} image"):
            tag = _pypy_tag(reporter) if pypy else _foreign_tag(router, reporter)
        if as_json:
            typer.echo(json.dumps({"router": None if pypy else router, "tag": tag,
                                   "seconds": round(time.monotonic() - started, 3)}))
        else:
            console.print(f"ready: [bold]{tag}[/] ({time.monotonic() - started:.1f}s)")
        return
    with reporter.phase(f"building the {router} image"):
        info = build_image(base=base, reporter=reporter)
    if as_json:
        typer.echo(json.dumps(info.to_dict(), indent=1))
        return
    verb = "built" if info.built else "up to date:"
    console.print(f"{verb} [bold]{info.tag}[/] on {info.base} "
                  f"({info.size_bytes / 1e6:.0f} MB, {time.monotonic() - started:.1f}s)")


def _foreign_tag(router: str, reporter: Reporter) -> str:
    from orchestrator.dockerapi.client import docker_client  # noqa: PLC0415

    client = docker_client(timeout=600)
    try:
        return kind_of(router).build_image(client, reporter)
    finally:
        client.close()


def _pypy_tag(reporter: Reporter) -> str:
    from orchestrator.dockerapi.client import docker_client  # noqa: PLC0415
    from orchestrator.pypy.image import build_pypy_image  # noqa: PLC0415

    client = docker_client(timeout=600)
    try:
        return build_pypy_image(client, reporter)
    finally:
        client.close()


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


@image_app.command("distribute")
def distribute_cmd(
    engine: list[str] = typer.Option(
        [], "--engine", help="An engine URL to load the image into (tcp://host:2376, ssh://user@host); "
                             "repeatable. Default: every TESTBED_SWARM_ENGINES entry."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """docker save | docker load the router image into other swarm nodes' engines."""
    from orchestrator.dockerapi.client import docker_client  # noqa: PLC0415
    from orchestrator.errors import BackendUnavailable  # noqa: PLC0415
    from orchestrator.backends.swarm.image import distribute  # noqa: PLC0415

    reporter = Reporter() if as_json else RichReporter(Console(stderr=True))
    tag = ensure_image(reporter=reporter)
    client = docker_client()
    try:
        with reporter.phase(f"loading {tag} into {len(engine) or 'the configured'} engine(s)"):
            results = distribute(tag, client, engine)
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps([r.__dict__ for r in results], indent=1))
    else:
        for r in results:
            console.print(f"{'ok' if r.ok else 'FAILED'}  {r.engine}  {r.image}  {r.detail}")
    failed = [r.engine for r in results if not r.ok]
    if failed:
        raise BackendUnavailable(f"the image did not reach {', '.join(failed)}")


@image_app.command("push")
def push_cmd(
    registry: str = typer.Argument(..., help="HOST[:PORT][/PATH] of a registry every swarm node can pull from."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Tag the router image under REGISTRY and push it; run the swarm
    backend with TESTBED_SWARM_IMAGE set to the printed reference."""
    from orchestrator.dockerapi.client import docker_client  # noqa: PLC0415
    from orchestrator.backends.swarm.image import push  # noqa: PLC0415

    reporter = Reporter() if as_json else RichReporter(Console(stderr=True))
    tag = ensure_image(reporter=reporter)
    client = docker_client()
    try:
        with reporter.phase(f"pushing {tag} to {registry}"):
            ref = push(tag, registry, client)
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps({"image": tag, "pushed": ref, "env": f"TESTBED_SWARM_IMAGE={ref}"}, indent=1))
    else:
        console.print(f"pushed {ref}; run with TESTBED_SWARM_IMAGE={ref}")


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
