"""What the controller does for the foreign nodes of a real testbed (the
routers orchestrator/routers/kinds.py knows), beside what it does for everyone:
one hook set, `ForeignNodes`, that the controller calls at fixed points of
every run (check, start order, configured, before each batch and each start,
the workload's window, after down, the manifest), whatever routers it runs.

- before the run: refuse a bare image on a backend that cannot run images,
  and fix the workload's start (`workload_t0_ns`) when bare images publish
  by script, since their scripts must be written before they start;
- before each start of a foreign node: write its script (params.json) into
  its node directory, run_dir/nodes/<node>/, compiled for the time it starts
  (orchestrator/routers/interop_script.py) and ending with a waitUntil to the run's
  end (run_end_ns: workload, churn, linger, drain, collection), since a
  contract node exits when its script ends. The pieces of the script are kept there
  too (interop.json), so a restart from another CLI process (`testbed
  churn`) writes the script for its own start, and every script a bare node
  was given is appended to scripts.jsonl for the converter;
- at collect: convert each foreign node's stdout (nodes/<node>/stdout.ndjson,
  which the backend fills) into traces/<node>.pb (node/trace/interop.py).

Bare images publish by script; the controller only logs their publishes
(orchestrator/run/workload.py). The scripted publish is up to 1 s late (waitUntil
counts whole seconds) plus the container's start latency; the converter
records it at the node's own start + waitUntil.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.libp2p.identity import peer_id_from_b58
from node.trace.interop import convert
from node.trace.scores import ScoreFile
from node.atomic import write_atomic
from orchestrator.backends.api import Backend
from orchestrator.shaping.split import ShapingCapabilities
from orchestrator.errors import InputError
from orchestrator.experiment.model import Publish, ResolvedExperiment
from orchestrator.routers.kinds import CONTRACT, kind_of
from orchestrator.routers.interop_script import last_wait, node_script, params_json, publish_instructions, wait_seconds
from orchestrator.routers.nodeconfigs import dials, start_batches
from orchestrator.routers.peers import peer_ids_b58

PARAMS = "params.json"
PIECES = "interop.json"
SCRIPTS = "scripts.jsonl"
STDOUT = "stdout.ndjson"
LEAD_S = 10.0  # the workload starts this long after the bare images are started ...
LEAD_PER_NODE_S = 1.0  # ... plus this per node, when bare images publish by script
START_ALLOWANCE_S = 10.0  # a bare image's own start-up after its container started (measured up to ~10 s under load)
RUN_TAIL_S = 60.0  # after the run's drain: collecting the traces and `down`, which stops the nodes
UNTIL_DOWN_S = 30 * 86_400  # a script's end when the run's end is not fixed in advance (`testbed up`): down comes first


def node_dir(run_dir: Path, node: str) -> Path:
    return run_dir / "nodes" / node


def refuse_images(resolved: ResolvedExperiment, backend: Backend) -> None:
    """A bare image needs a backend that runs container images."""
    if backend.capabilities.images:
        return
    for spec in resolved.nodes:
        if kind_of(spec.router).scripted:
            raise InputError(
                f"{spec.name} runs {{image: {kind_of(spec.router).image}, contract: {CONTRACT}}}: the "
                f"{backend.name} backend cannot run container images; use --backend docker")


def planned_workload_t0(resolved: ResolvedExperiment, now_ns: int) -> int | None:
    """When the workload starts, fixed before the bare images start, if
    there are any: their scripts publish at and end after times on that
    clock (None: when every node is up, as usual)."""
    if not any(kind_of(spec.router).scripted for spec in resolved.nodes):
        return None
    return now_ns + round((LEAD_S + LEAD_PER_NODE_S * len(resolved.nodes)) * 1e9)


def run_end_ns(resolved: ResolvedExperiment, workload_t0_ns: int | None, drain_s: float) -> int | None:
    """The wall-clock time by which a run whose workload starts at the
    planned `workload_t0_ns` is over and its nodes are stopped: the
    workload's end (workload_bounds' latest, the bare images' start taken
    as at most LEAD_PER_NODE_S a node), the drain (`drain_s`), then RUN_TAIL_S for
    collection and `down`. None: no fixed start, the end comes with `down`."""
    if workload_t0_ns is None:
        return None
    starts_s = LEAD_PER_NODE_S * len(resolved.nodes)
    return workload_t0_ns + round((resolved.end_time() + starts_s + 1.0 + START_ALLOWANCE_S + drain_s + RUN_TAIL_S) * 1e9)


def workload_bounds(planned_ns: int | None, slack_ns: int, now_ns: int, end_s: float) -> tuple[int, int, str | None]:
    """(start, end, warning) of the workload on the wall clock. Without
    scripted publishes it starts now. With them it keeps the start their
    scripts were written for, and ends no earlier than their last possible
    publish could have spread: a bare image counts its waits from its own
    start, `slack_ns` after its script was written (until its container's
    start returned) plus its own start-up (allowed START_ALLOWANCE_S), plus
    waitUntil's second. Nodes that came up after that start get a warning."""
    if planned_ns is None:
        return now_ns, now_ns + round(end_s * 1e9), None
    end = planned_ns + slack_ns + round((end_s + 1.0 + START_ALLOWANCE_S) * 1e9)
    if now_ns <= planned_ns:
        return planned_ns, end, None
    return planned_ns, end, (f"the nodes were up {(now_ns - planned_ns) / 1e9:.1f} s after the workload's fixed start: "
                             "bare images' scripted publishes may have gone out before every node was connected")


def write_pieces(resolved: ResolvedExperiment, run_dir: Path, workload_t0_ns: int | None, with_workload: bool,
                 nodes: list[str], drain_s: float) -> None:
    """The script pieces (interop.json) of the foreign ones of `nodes`: the
    instructions every start runs and, for a bare image with a workload,
    its publishes."""
    dialled = dials(resolved)
    peer_id = peer_ids_b58(resolved)
    for spec in map(resolved.node, nodes):
        if not kind_of(spec.router).foreign:
            continue
        publishes = [
            {"at": p.at, "seq": p.seq, "size": p.size, "topic": p.topic}
            for p in resolved.publishes if p.publisher == spec.name
        ] if with_workload and kind_of(spec.router).scripted else []
        pieces = {"router": spec.router, "peer_id": peer_id[spec.name], "base": node_script(resolved, spec.name, dialled),
                  "publishes": publishes, "workload_t0_ns": workload_t0_ns,
                  "end_ns": run_end_ns(resolved, workload_t0_ns, drain_s) if with_workload else None}
        d = node_dir(run_dir, spec.name)
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / PIECES, json.dumps(pieces, indent=1))


def before_start(run_dir: Path, node: str, now_ns: int) -> None:
    """Write a foreign node's params.json for a start now (nothing for ours):
    its publishes still due, then a waitUntil to the run's end, so a node
    that exits when its script ends (as test-plans' do) lives as long as the run."""
    d = node_dir(run_dir, node)
    if not (d / PIECES).is_file():
        return
    pieces = json.loads((d / PIECES).read_text())
    script = list(pieces["base"])
    t0 = pieces.get("workload_t0_ns")
    if pieces["publishes"] and t0 is not None:
        start_s = (now_ns - t0) / 1e9
        script += publish_instructions([_publish(p) for p in pieces["publishes"] if p["at"] > start_s], start_s)
    end_ns = pieces.get("end_ns")
    script.append(last_wait(script, UNTIL_DOWN_S if end_ns is None else wait_seconds(end_ns / 1e9, now_ns / 1e9)))
    write_atomic(d / PARAMS, params_json(script))
    if kind_of(pieces["router"]).scripted:
        with open(d / SCRIPTS, "a") as f:
            f.write(json.dumps(script) + "\n")


def _publish(p: Mapping[str, Any]) -> Publish:
    return Publish(seq=p["seq"], at=p["at"], topic=p["topic"], size=p["size"], publisher=None, via=())


def convert_outputs(run_dir: Path, nodes: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """stdout.ndjson -> traces/<node>.pb for every foreign node; returns each
    one's conversion figures and the warnings for the report."""
    figures: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    for node in nodes:
        d = node_dir(run_dir, node)
        if not (d / PIECES).is_file():
            continue
        pieces = json.loads((d / PIECES).read_text())
        out = d / STDOUT
        lines = out.read_text(errors="replace").splitlines() if out.is_file() else []
        scripts = [json.loads(s) for s in (d / SCRIPTS).read_text().splitlines()] if (d / SCRIPTS).is_file() else []
        trace = run_dir / "traces" / f"{node}.pb"
        if trace.is_symlink():
            trace.unlink()
        result = convert(lines, trace, peer_id_from_b58(pieces["peer_id"]), scripts)
        figures[node] = result.to_dict()
        _write_scores(run_dir / "scores" / f"{node}.csv", result.scores)
        if not lines:
            warnings.append(f"{node} ({kind_of(pieces['router']).implementation}) printed nothing on stdout: no trace")
        if result.garbage:
            warnings.append(f"{node}: {result.garbage} stdout line(s) were not contract NDJSON and were ignored "
                            f"(first: {result.garbage_samples[0]!r})")
    return figures, warnings


def _write_scores(path: Path, scores: list[tuple[int, list[tuple[bytes, float]]]]) -> None:
    """A foreign node's "Peer Scores" lines -> its score file (totals only),
    written anew from the whole stdout at each conversion; a node that
    printed none leaves whatever is there alone."""
    if not scores:
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    out = ScoreFile(path)
    for time_ns, rows in scores:
        out.write_totals(time_ns, rows)
    out.close()


def link_shaping(router: str, caps: ShapingCapabilities, proxy: bool) -> str:
    """How a node's links are shaped: the kernel's tc, or the host's delay
    line, for every container alike; our user-space shaper only inside our
    routers; a foreign node's own sending by the shaping proxy where the
    backend has one (orchestrator/shaping/proxy.py), else unshaped where the kernel cannot
    (its peers' shapers still delay what they send to it)."""
    if caps.kernel_delay:
        return "host delay line (NFQUEUE)" if caps.path == "delayline+htb" else "kernel tc"
    if not kind_of(router).foreign:
        return "our user-space shaper"
    return "shaping proxy (user space, per destination)" if proxy else "unshaped"


def unshaped_warning(resolved: ResolvedExperiment, caps: ShapingCapabilities, proxy: bool) -> str | None:
    """The honest word when foreign nodes' links ask for what nobody shapes."""
    if caps.kernel_delay or proxy:
        return None
    foreign = {s.name for s in resolved.nodes if kind_of(s.router).foreign}
    shaped = [f"{a}-{b}" for a, b in resolved.edges if {a, b} & foreign and _shaped(resolved.link(a, b))]
    if not shaped:
        return None
    return (f"{len(shaped)} link(s) of foreign nodes ask for latency/jitter/loss, but {caps.path} shaping runs only "
            f"inside our routers: what foreign nodes send is unshaped (e.g. {', '.join(shaped[:3])})")


def _shaped(link: Any) -> bool:
    return bool(link.latency_ms or link.jitter_ms or link.loss)


def node_facts(resolved_nodes: Mapping[str, str], caps: ShapingCapabilities, proxy: bool) -> dict[str, dict[str, Any]]:
    """manifest.json's per-node implementation and link shaping (name -> router)."""
    return {n: {"implementation": kind_of(r).implementation, "links_shaped_by": link_shaping(r, caps, proxy),
                "trace_events": kind_of(r).trace_events} for n, r in resolved_nodes.items()}


@dataclass
class ForeignNodes:
    """The hooks a run calls for its foreign nodes, at fixed points; each is
    a no-op for a run of our routers only. `resolved`: the experiment as
    written (None for a controller attached from the state store, which only
    starts nodes again and collects); `drain_s`: how long the run's end-of-run
    drain may take, which the scripts' waits must outlast."""

    run_dir: Path
    resolved: ResolvedExperiment | None = None
    drain_s: float = 0.0

    def check(self, backend: Backend) -> None:
        """Before anything starts: refuse what this backend cannot run."""
        if self.resolved is not None:
            refuse_images(self.resolved, backend)

    def start_order(self) -> tuple[list[str], list[str]]:
        """(the nodes with a control endpoint, the scripted ones): started in this order."""
        assert self.resolved is not None
        return start_batches(self.resolved)

    def configured(self, caps: ShapingCapabilities, proxy: bool) -> str | None:
        """Once the backend's shaping is known: the warning for foreign links nobody shapes."""
        assert self.resolved is not None
        return unshaped_warning(self.resolved, caps, proxy)

    def plan_workload(self, now_ns: int) -> int | None:
        """Before the scripted nodes start: the workload's fixed start, if their scripts need one."""
        assert self.resolved is not None
        return planned_workload_t0(self.resolved, now_ns)

    def before_batch(self, workload_t0_ns: int | None, with_workload: bool, batch: list[str]) -> None:
        assert self.resolved is not None
        write_pieces(self.resolved, self.run_dir, workload_t0_ns, with_workload, batch, self.drain_s)

    def before_start(self, node: str, now_ns: int) -> None:
        before_start(self.run_dir, node, now_ns)

    def after_down(self, nodes: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Once the backend collected: every foreign node's trace, converted."""
        return convert_outputs(self.run_dir, nodes)

    def workload_window(self, planned_ns: int | None, slack_ns: int, now_ns: int,
                        end_s: float) -> tuple[int, int, str | None]:
        """When the workload starts and ends (workload_bounds)."""
        return workload_bounds(planned_ns, slack_ns, now_ns, end_s)

    def node_facts(self, routers: Mapping[str, str], caps: ShapingCapabilities,
                   proxy: bool) -> dict[str, dict[str, Any]]:
        """manifest.json's per-node implementation, link shaping and trace events."""
        return node_facts(routers, caps, proxy)
