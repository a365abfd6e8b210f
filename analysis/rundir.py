"""Reading a run directory (docs/architecture.md, "Run directory"): the files
the analysis needs besides the traces, each optional except the traces, so
that a directory of go-libp2p-pubsub traces alone can still be analysed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from analysis.ingest import JSON_SUFFIXES, PB_SUFFIXES, trace_files
from node.errors import InputError


# files of a run directory that are not traces, though their suffix says JSON
RUN_FILES = frozenset({"manifest.json", "topology.json", "summary.json", "events.jsonl", "router-cpu.json"})


@dataclass
class RunDir:
    path: Path
    trace_dir: Path
    traces: list[Path]
    manifest: dict[str, Any] = field(default_factory=dict)
    topology: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    has_events: bool = False
    experiment: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.experiment.get("name") or self.path.name)

    def expectations(self) -> list[str]:
        """The experiment's expectations as `<metric> <op> <number>` strings;
        the resolved file may hold them as strings or as {metric, op, value}."""
        out = []
        for item in self.experiment.get("expectations") or []:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, dict):
                if item.get("text"):
                    out.append(str(item["text"]))
                elif {"metric", "op", "value"} <= set(item):
                    out.append(f"{item['metric']} {item['op']} {item['value']}")
        return out

    def topology_nodes(self) -> list[dict[str, Any]]:
        return list((self.topology or {}).get("nodes") or [])

    def topology_edges(self) -> list[dict[str, Any]]:
        return list((self.topology or {}).get("edges") or [])

    def network_paths(self) -> dict[str, dict[str, float]] | None:
        """The network's shortest paths from each publisher, when its routers
        are not held to the overlay (docs/metrics.md, "Lower bound"); None
        otherwise."""
        paths = (self.topology or {}).get("network_paths_ms")
        return {str(src): {str(n): float(d) for n, d in dist.items()} for src, dist in paths.items()} if paths else None

    def traced_sample(self) -> frozenset[str] | None:
        """The nodes a sampled simulator run traced (the manifest's `trace`,
        docs/simulator.md "Trace levels"), or None: every node was traced."""
        trace = self.manifest.get("trace") or {}
        return frozenset(trace.get("traced") or ()) if trace.get("level") == "sample" else None


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable JSON: {exc}") from None


def load_events(path: Path) -> list[dict[str, Any]]:
    events = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{lineno}: not a JSON object: {exc}") from None
            if not isinstance(ev, dict) or "t_ns" not in ev or "kind" not in ev:
                raise InputError(f"{path}:{lineno}: an event needs t_ns and kind")
            events.append(ev)
    events.sort(key=lambda e: e["t_ns"])
    return events


def open_run_dir(path: str | Path, traces: str | Path | None = None) -> RunDir:
    """The run directory at `path`; `traces` overrides where the trace files
    are (default RUN_DIR/traces, else trace files directly in RUN_DIR)."""
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"{root}: not a run directory (no such directory)")
    if traces is not None:
        trace_dir = Path(traces)
        if not trace_dir.is_dir():
            raise InputError(f"{trace_dir}: no such trace directory")
    elif (root / "traces").is_dir():
        trace_dir = root / "traces"
    else:
        trace_dir = root
    files = [p for p in trace_files(trace_dir) if p.name not in RUN_FILES]
    if not files:
        raise InputError(
            f"{root}: not a run directory with traces: no {'/'.join(PB_SUFFIXES + JSON_SUFFIXES)} "
            f"files in {trace_dir}"
        )
    run = RunDir(root, trace_dir, files)
    if (root / "manifest.json").is_file():
        run.manifest = _load_json(root / "manifest.json") or {}
    if (root / "topology.json").is_file():
        run.topology = _load_json(root / "topology.json")
    if (root / "events.jsonl").is_file():
        run.events = load_events(root / "events.jsonl")
        run.has_events = True
    exp = root / "experiment.resolved.yaml"
    if exp.is_file():
        try:
            run.experiment = yaml.safe_load(exp.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise InputError(f"{exp}: not readable YAML: {exc}") from None
        if not isinstance(run.experiment, dict):
            raise InputError(f"{exp}: expected a mapping")
    return run
