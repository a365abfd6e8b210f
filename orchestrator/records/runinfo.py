"""Writers for the generic files of a run directory (docs/architecture.md):
experiment.resolved.yaml, topology.json, manifest.json and events.jsonl.

Shared by the simulator and the real backends, so every run directory has the
same layout whatever produced it. `RunWriter.event` appends one JSON line and
flushes it at once: events.jsonl is the run's log and must survive a crash of
the orchestrator. Its times are on the experiment's clock (`clock`), as the
routers' traces are: the wall clock's, unless the run is time-dilated
(node/dilation.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import threading
from pathlib import Path
from typing import IO, Any

from node.atomic import write_atomic
from node.dilation import DilatedClock
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.experiment.network_paths import dials_anywhere, network_paths
from orchestrator.routers.kinds import kind_of
from orchestrator.routers.peers import peer_ids_b58

RESOLVED_YAML = "experiment.resolved.yaml"
TOPOLOGY_JSON = "topology.json"
MANIFEST_JSON = "manifest.json"
EVENTS_JSONL = "events.jsonl"


def topology_dict(resolved: ResolvedExperiment) -> dict[str, Any]:
    """Nodes (with `peer_id`, the libp2p peer id their traces carry, as
    base58 text, `adversary`: a sybil's behaviours, null for an honest
    node, and `host`: the first node of its pack when identities share a
    host, `identities_per_host`) and overlay edges with their link parameters; where a router dials
    on send, the network's shortest paths from each publisher
    (orchestrator/experiment/network_paths.py)."""
    peer_ids = peer_ids_b58(resolved)
    nodes = [
        {
            "name": n.name, "peer_id": peer_ids[n.name], "group": n.group, "router": n.router,
            "topics": list(n.topics), "region": n.region, "uplink_bps": n.uplink_bps,
            "implementation": kind_of(n.router).implementation, "trace_events": kind_of(n.router).trace_events,
            "adversary": dataclasses.asdict(n.adversary) if n.adversary is not None else None,
            **({"connect_at": n.connect_at} if n.connect_at is not None else {}),
            **({"host": n.host} if n.host is not None else {}),
        }
        for n in resolved.nodes
    ]
    edges = []
    for a, b in resolved.edges:
        link = resolved.link(a, b)
        edges.append({
            "a": a, "b": b, "latency_ms": link.latency_ms, "jitter_ms": link.jitter_ms, "loss": link.loss,
        })
    if dials_anywhere(resolved):
        return {"nodes": nodes, "edges": edges, "network_paths_ms": network_paths(resolved)}
    return {"nodes": nodes, "edges": edges}


def host_facts() -> dict[str, Any]:
    """What the manifest says about the machine the run ran on."""
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }


class RunWriter:
    """Writes one run directory. Thread-safe for `event` (the controller's
    churn and workload may log from helper threads)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._events: IO[str] | None = None
        self._lock = threading.Lock()
        self.clock = DilatedClock()  # the experiment's; the controller sets a dilated run's

    def event(self, t_ns: int, kind: str, **fields: Any) -> None:
        """One line at wall time `t_ns`, logged on the experiment's clock."""
        line = json.dumps({"t_ns": self.clock.virtual_ns(int(t_ns)), "kind": kind, **fields}, sort_keys=False)
        with self._lock:
            if self._events is None:
                self._events = open(self.run_dir / EVENTS_JSONL, "a")
            self._events.write(line + "\n")
            self._events.flush()

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_atomic(self.run_dir / MANIFEST_JSON, json.dumps(manifest, indent=1, default=str) + "\n")

    def write_topology(self, resolved: ResolvedExperiment) -> None:
        write_atomic(self.run_dir / TOPOLOGY_JSON, json.dumps(topology_dict(resolved), indent=1) + "\n")

    def write_resolved(self, resolved_yaml_text: str) -> None:
        write_atomic(self.run_dir / RESOLVED_YAML, resolved_yaml_text)

    def close(self) -> None:
        with self._lock:
            if self._events is not None:
                self._events.close()
                self._events = None

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
