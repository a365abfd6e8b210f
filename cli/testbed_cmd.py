"""Testbed lifecycle commands, containerlab-style verbs:

    testbed up FILE        start a testbed and leave it running (meshed, no workload)
    testbed status [NAME]  what is up; per node: state, peers, mesh, messages, lag
    testbed publish NAME   publish messages through a node
    testbed churn NAME ACTION SELECTOR
    testbed down [NAME | --all]
    testbed run FILE       up + workload + churn + collection + down, then analysis

Thin: everything happens in orchestrator.run.controller and orchestrator.run.runs;
which churn verb applies to which node is the lifecycle table's call
(orchestrator/experiment/lifecycle.py). Bad input is one clear error and exit 2 before
anything starts; every --json prints exactly one JSON document.
"""

from __future__ import annotations

import enum
import json
import random
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.postrun import Plan, finish_runs, plan_runs, print_outcome, warm_up_analysis
from orchestrator.backends.registry import BACKENDS, default_backend
from orchestrator.errors import InputError
from orchestrator.experiment.lifecycle import Verb, why_not
from orchestrator.progress import Reporter, RichReporter

console = Console()
err = Console(stderr=True)

# The registry's backends (built-in and TESTBED_BACKENDS) as choices.
BackendName = enum.Enum("BackendName", {name: name for name in BACKENDS}, type=str)  # type: ignore[misc]

BackendOption = Annotated[
    BackendName | None,
    typer.Option(help="Where the routers run (default: docker when a daemon is reachable, else process). Docker: "
                      "each testbed on a bridge of its own as root, else a Docker network; "
                      "TESTBED_DOCKER_NETWORK=own-bridge|docker-network chooses.",
                 case_sensitive=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")]
SeedOption = Annotated[int | None, typer.Option(help="Override the experiment's seed.")]


def _load(file: Path, seed: int | None, variant: str | None, out: Path | None, backend: str):
    """The single run `up` starts: a file with variants needs --variant."""
    plan = _plan(file, seed, out, backend, variant)
    if len(plan.runs) > 1:
        names = ", ".join(r.variant for r in plan.runs if r.variant)
        raise InputError(f"{file}: has variants ({names}); choose one with --variant")
    return plan.runs[0]


def _plan(file: Path, seed: int | None, out: Path | None, backend: str, variant: str | None) -> Plan:
    """The runs of a file on a real backend, refusing routers it cannot run."""
    from orchestrator.routers.kinds import refuse_outside_simulator  # noqa: PLC0415

    plan = plan_runs(file, seed, out, backend, variant)
    for run in plan.runs:
        refuse_outside_simulator(run.resolved.nodes, backend)
    return plan


def _backend(requested: BackendName | None, quiet: bool) -> str:
    if requested is not None:
        return requested.value
    name, why = default_backend()
    if not quiet:
        err.print(f"[dim]{why}[/]")
    return name


def _reporter(quiet: bool) -> Reporter:
    return Reporter() if quiet else RichReporter(err)


def _echo_json(doc: Any) -> None:
    typer.echo(json.dumps(doc, indent=1, default=str))


# up / run

def up(
    file: Annotated[Path, typer.Argument(help="Experiment file (YAML).")],
    backend: BackendOption = None,
    name: Annotated[str | None, typer.Option(help="Testbed name (default: the experiment's name).")] = None,
    seed: SeedOption = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default runs/<name>-<time>-<backend>).")] = None,
    variant: Annotated[str | None, typer.Option(help="Which variant of the file to start (files with variants).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Start a testbed and leave it running: nodes up and meshed, no workload."""
    from orchestrator.run.controller import Controller  # noqa: PLC0415
    from orchestrator.run.runs import down_testbed  # noqa: PLC0415

    backend_name = _backend(backend, as_json)
    planned = _load(file, seed, variant, out, backend_name)
    ctl = Controller.create(
        planned.resolved, planned.resolved_yaml, backend_name, name, planned.run_dir, reporter=_reporter(as_json)
    )
    try:
        ctl.up()
    except BaseException:
        err.print(f"[red]up failed; tearing {ctl.testbed} down[/]")
        down_testbed(ctl.testbed, ctl.store)
        raise
    rows = _node_rows(ctl)
    if as_json:
        _echo_json({"testbed": ctl.testbed, "backend": backend_name, "run_dir": str(ctl.run_dir), "nodes": rows})
        return
    console.print(_node_table(ctl.testbed, rows))
    console.print(f"testbed [bold]{ctl.testbed}[/] is up ({backend_name}); run directory: [bold]{ctl.run_dir}[/]")
    console.print(f"next: testbed publish {ctl.testbed} | testbed churn {ctl.testbed} kill 1 | testbed down {ctl.testbed}")


def run(
    file: Annotated[Path, typer.Argument(help="Experiment file (YAML).")],
    backend: BackendOption = None,
    seed: SeedOption = None,
    out: Annotated[Path | None, typer.Option(
        help="Run directory (default runs/<name>-<time>-<backend>); with variants, the parent of one per variant.",
    )] = None,
    variant: Annotated[str | None, typer.Option(help="Run only this variant of the file.")] = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Analyse the traces and write report.html.")] = True,
    as_json: JsonOption = False,
) -> None:
    """Run an experiment end to end and report; exit 1 when an expectation fails.

    Up, workload and churn, trace collection, down, then analysis, report.html
    and the experiment's expectations. A file with variants runs each of them,
    one after the other.
    """
    from analysis.endpoint import experiment_running  # noqa: PLC0415
    from orchestrator.records.state import state_dir  # noqa: PLC0415
    from orchestrator.run.runs import run_experiment  # noqa: PLC0415

    backend_name = _backend(backend, as_json)
    plan = _plan(file, seed, out, backend_name, variant)
    if report:
        warm_up_analysis()
    results = []
    for planned in plan.runs:
        with experiment_running(state_dir()):
            ctl = run_experiment(
                planned.resolved, planned.resolved_yaml, backend_name, planned.run_dir, reporter=_reporter(as_json)
            )
        results.append({"variant": planned.variant, "run_dir": str(ctl.run_dir), "warnings": ctl.warnings})
        if not as_json:
            for warning in ctl.warnings:
                err.print(f"[yellow]warning:[/] {warning}")
            console.print(f"run directory: [bold]{ctl.run_dir}[/]")
    outcome = finish_runs(plan) if report else None
    if as_json:
        _echo_json({"backend": backend_name, "runs": results, **(outcome.to_json() if outcome else {})})
    elif outcome is not None:
        print_outcome(outcome)
    if outcome is not None:
        outcome.exit()


# status

def _node_rows(ctl) -> list[dict[str, Any]]:
    statuses = ctl.node_statuses()
    rows = []
    for name, st in ctl.nodes.items():
        s = statuses.get(name)
        state = st.shown_state()
        if state == "up" and s is None:
            state = "unreachable" if ctl.backend.is_running(name) else "dead"
        rows.append({
            "node": name, "state": state, "router": st.router,
            "peers": len(s["peers"]) if s else None,
            "mesh": {t: len(p) for t, p in s["mesh"].items()} if s else {},
            # adapters may omit lag and some counters; a bare image has neither (its peers' view)
            "delivered": (s.get("counters") or {}).get("delivered") if s else None,
            "published": (s.get("counters") or {}).get("published") if s else None,
            "dropped": (s.get("counters") or {}).get("dropped") if s else None,
            "lag_p99_ms": (s.get("lag") or {}).get("p99_ms") if s else None,
        })
    return rows


def _node_table(testbed: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"testbed {testbed}")
    for col, justify in (("node", "left"), ("state", "left"), ("router", "left"), ("peers", "right"),
                         ("mesh", "left"), ("delivered", "right"), ("published", "right"),
                         ("dropped", "right"), ("lag p99 ms", "right")):
        table.add_column(col, justify=justify)
    colors = {"up": "green", "down": "red", "dead": "red", "paused": "yellow", "isolated": "yellow",
              "partitioned": "yellow", "unreachable": "red"}

    def show(v: Any) -> str:
        return "-" if v is None else str(v)

    for r in rows:
        mesh = " ".join(f"{t}:{n}" for t, n in r["mesh"].items()) or "-"
        table.add_row(
            r["node"], f"[{colors.get(r['state'], 'white')}]{r['state']}[/]", r["router"], show(r["peers"]), mesh,
            show(r["delivered"]), show(r["published"]), show(r["dropped"]), show(r["lag_p99_ms"]),
        )
    return table


def _libp2p_address(cfg: Any) -> dict[str, Any]:
    """How a libp2p host on this machine dials a node: its peer id and
    multiaddrs (the address it listens on, on the loopback range or the
    testbed's Docker network)."""
    from orchestrator.routers.peers import multiaddr  # noqa: PLC0415

    if cfg is None:
        return {"peer_id": None, "multiaddrs": []}
    peer_id = cfg.identity.peer_id_b58
    return {"peer_id": peer_id, "multiaddrs": [multiaddr(cfg.listen_host, cfg.listen_port, peer_id)]}


def status(
    name: Annotated[str | None, typer.Argument(help="A testbed (default: list every testbed).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Show running testbeds, or the nodes of one."""
    from orchestrator.run.controller import Controller  # noqa: PLC0415
    from orchestrator.records.state import StateStore  # noqa: PLC0415

    store = StateStore()
    if name is None:
        beds = []
        for bed in store.names():
            rec = store.load(bed) or {}
            beds.append({
                "testbed": bed, "backend": rec.get("backend"), "status": rec.get("status", "unknown"),
                "nodes": len(rec.get("nodes") or {}), "run_dir": rec.get("run_dir"), "created_at": rec.get("created_at"),
            })
        if as_json:
            _echo_json(beds)
            return
        if not beds:
            console.print("no testbeds are up")
            return
        table = Table(title="testbeds")
        for col in ("testbed", "backend", "status", "nodes", "created", "run directory"):
            table.add_column(col)
        for b in beds:
            table.add_row(b["testbed"], str(b["backend"]), b["status"], str(b["nodes"]), str(b["created_at"]), str(b["run_dir"]))
        console.print(table)
        return
    ctl = Controller.attach(name, store)
    rows = _node_rows(ctl)
    rec = ctl.record
    if as_json:
        for row in rows:
            row.update(name=row["node"], **_libp2p_address(ctl.configs.get(row["node"])))
        _echo_json({"testbed": name, "backend": rec.get("backend"), "status": rec.get("status"),
                    "run_dir": rec.get("run_dir"), "nodes": rows})
        return
    console.print(_node_table(name, rows))
    console.print(f"{rec.get('backend')} backend, {rec.get('status')}; run directory: {rec.get('run_dir')}")


# publish / churn

def publish(
    name: Annotated[str, typer.Argument(help="The testbed.")],
    node: Annotated[str | None, typer.Option(help="Publishing node (default: the first node that is up).")] = None,
    topic: Annotated[str | None, typer.Option(help="Topic (default: the node's first topic).")] = None,
    size: Annotated[int, typer.Option(min=0, max=16 << 20, help="Payload bytes.")] = 256,
    count: Annotated[int, typer.Option(min=1, help="How many messages.")] = 1,
    interval: Annotated[float, typer.Option(min=0.0, help=(
        "Seconds between messages, on the experiment's clock (k times longer on the wall clock when the "
        "testbed's experiment has time_dilation: k)."))] = 0.0,
    as_json: JsonOption = False,
) -> None:
    """Publish messages through one node of a running testbed (logged to events.jsonl)."""
    import time  # noqa: PLC0415

    from orchestrator.run.controller import Controller  # noqa: PLC0415
    from orchestrator.experiment.model import Publish  # noqa: PLC0415

    from orchestrator.routers.kinds import CONTRACT, kind_of  # noqa: PLC0415

    ctl = Controller.attach(name)
    if node is None:
        node = next((n for n, st in ctl.nodes.items() if st.reachable and not kind_of(st.router).scripted), None)
        if node is None:
            raise InputError(f"testbed {name}: no node that takes live publishes is up")
    elif node not in ctl.nodes:
        raise InputError(f"testbed {name} has no node {node!r}")
    elif kind_of(ctl.nodes[node].router).scripted:
        raise InputError(f"{node} is a bare {CONTRACT} image ({ctl.nodes[node].router}): it has no control endpoint "
                         "and publishes only what its script says; publish through another node")
    if topic is None:
        topics = sorted(ctl.nodes[node].topics)
        if not topics:
            raise InputError(f"{node} subscribes to no topic; give --topic")
        topic = topics[0]
    mids = []
    for i in range(count):
        mid = ctl.publish(Publish(i, 0.0, topic, size, node, (node,)))
        if mid is None:
            raise InputError(f"{node} did not publish ({'; '.join(ctl.warnings)})")
        mids.append(mid)
        if interval and i + 1 < count:
            time.sleep(ctl.writer.clock.wall_s(interval))
    ctl.writer.close()
    if as_json:
        _echo_json({"node": node, "topic": topic, "message_ids": mids})
    else:
        for mid in mids:
            console.print(f"{node} published {mid} on {topic}")


def select_nodes(selector: str, candidates: list[str], known: list[str], rng: random.Random) -> list[str]:
    """`n1,n3` (names), `3` (a count) or `10%` (a share of the candidates),
    the latter two drawn at random from `candidates`."""
    selector = selector.strip()
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)%", selector):
        share = float(m.group(1))
        if not 0 < share <= 100:
            raise InputError(f"selector {selector!r}: a percentage must be in (0, 100]")
        k = max(1, round(len(candidates) * share / 100))
    elif selector.isdigit():
        k = int(selector)
        if k < 1:
            raise InputError(f"selector {selector!r}: select at least one node")
    else:
        names = [n.strip() for n in selector.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if not names or unknown:
            raise InputError(f"selector {selector!r}: unknown node(s) {', '.join(unknown) or '(none given)'}")
        return names
    if k > len(candidates):
        raise InputError(f"selector {selector!r}: only {len(candidates)} node(s) can take this action")
    return sorted(rng.sample(sorted(candidates), k))


def churn(
    name: Annotated[str, typer.Argument(help="The testbed.")],
    action: Annotated[Verb, typer.Argument(help="The churn verb.")],
    selector: Annotated[str, typer.Argument(help="Node names (n1,n2), a count (3) or a percentage (10%).")],
    topic: Annotated[str | None, typer.Option(help="Topic for leave/join.")] = None,
    peers: Annotated[str | None, typer.Option(
        help="For disconnect/reconnect: only from these peers (comma-separated).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for choosing nodes by count or percentage.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Apply one churn action to a running testbed now (logged to events.jsonl)."""
    from orchestrator.run.controller import Controller  # noqa: PLC0415
    from orchestrator.experiment.model import ChurnAction  # noqa: PLC0415

    if action in (Verb.LEAVE, Verb.JOIN) and not topic:
        raise InputError(f"{action.value} needs --topic")
    ctl = Controller.attach(name)
    peer_list = tuple(p.strip() for p in peers.split(",") if p.strip()) if peers else ()
    unknown = [p for p in peer_list if p not in ctl.nodes]
    if unknown:
        raise InputError(f"--peers: unknown node(s) {', '.join(unknown)}")
    candidates = [n for n, s in ctl.nodes.items() if why_not(s.life, action, topic, peer_list) is None]
    nodes = select_nodes(selector, candidates, list(ctl.nodes), random.Random(seed))
    for node in nodes:
        why = why_not(ctl.nodes[node].life, action, topic, peer_list)
        if why is not None:
            raise InputError(f"cannot {action.value} {node}: {why}")
    ctl.churn(ChurnAction(0.0, action.value, tuple(nodes), topic, peer_list, source="cli"))
    ctl.drain_churn()
    ctl.writer.close()
    if as_json:
        _echo_json({"testbed": name, "action": action.value, "nodes": nodes, "warnings": ctl.warnings})
    else:
        console.print(f"{action.value}: {', '.join(nodes)}")
        for w in ctl.warnings:
            err.print(f"[yellow]warning:[/] {w}")


# down

def down(
    name: Annotated[str | None, typer.Argument(help="The testbed to remove.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Remove every testbed (and anything a killed CLI left).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Stop a testbed and remove everything it created; traces stay.

    Graceful: traces flushed, manifest written. Idempotent; cleans up after a
    killed CLI too. Exits 1 naming what it could not remove (a stuck or absent
    Docker daemon included); the testbed stays recorded, so `down` retries.
    """
    from orchestrator.run.runs import down_all, down_testbed  # noqa: PLC0415
    from orchestrator.errors import TeardownIncomplete  # noqa: PLC0415
    from orchestrator.records.state import check_name  # noqa: PLC0415

    if (name is None) == (not all_):
        raise InputError("give a testbed NAME or --all (not both)")
    reporter = _reporter(as_json)
    try:
        lines = down_all(reporter=reporter) if all_ else down_testbed(check_name(name), reporter=reporter)
    except TeardownIncomplete as exc:
        if as_json:
            _echo_json({"removed": exc.removed, "left": exc.left})
        raise
    if as_json:
        _echo_json({"removed": lines})
        return
    for line in lines:
        console.print(line)
    console.print(f"down: {'every testbed' if all_ else name}")


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("status")(status)
    app.command("publish")(publish)
    app.command("churn")(churn)
    app.command("down")(down)
    app.command("run")(run)
