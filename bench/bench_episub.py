"""episub against gossipsub v1.0 on one set-up, in the simulator, with the
figures a multicast tree is judged by. For each variant of an experiment file
(default topologies/scale/episub-vs-gossipsub.yaml), the simulator's own counts:
delivery ratio (deliveries to the nodes up and subscribed at publish time,
publishers excepted), latency p50/p99, payload transmissions and DUPLICATE
events per delivery, control messages; plus, per delivery, stretch: latency
over the direct one-way latency from the publisher (the network's shortest
path: any two nodes can connect, and the regions matrix keeps the triangle
inequality). For episub, read from the engines as each message is delivered:
hops per delivery (the hopcount it came with: the node's depth in that
message's tree), the share delivered as the answer to a GRAFT (tree repair)
rather than by eager push; and at the end, over the live nodes, active-view
and eager degree (gossipsub: mesh degree).

    flock /work/heavy.lock .venv/bin/python bench/bench_episub.py
    flock /work/heavy.lock .venv/bin/python bench/bench_episub.py topologies/x.yaml --variant episub

The runs' traces go to a temporary directory and are discarded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from node.engine.api import Output  # noqa: E402
from node.engine.episub import EpisubRouter  # noqa: E402
from node.trace.vocab import DUPLICATE, RunEvent  # noqa: E402
from node.wire.rpc import Message  # noqa: E402
from orchestrator.experiment.spec import load_experiment  # noqa: E402
from orchestrator.sim.stats import percentile  # noqa: E402
from orchestrator.sim.node import SimNode  # noqa: E402
from orchestrator.sim.simulator import Simulator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class MeasuredSimulator(Simulator):
    """The simulator, recording per delivery what the figures need."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.duplicates = 0
        self.stretch: list[float] = []
        self.hops: list[int] = []
        self.grafted = 0
        self.publisher: dict[bytes, list[str]] = {}

    def _emit(self, node: SimNode, out: Output) -> None:
        self.duplicates += sum(1 for ev in out.trace if ev.type == DUPLICATE)
        super()._emit(node, out)

    def _on_delivered(self, node: SimNode, msg: Message) -> None:
        entry = self._expected.get(msg.id)
        first = entry is not None and node.name in entry[1] and (msg.id, node.name) not in self._delivered
        super()._on_delivered(node, msg)
        if not first:
            return
        direct = min(self.resolved.link(p, node.name).latency_ms for p in self.publisher[msg.id])
        self.stretch.append((self.now - entry[0]) / 1e6 / direct)
        if isinstance(node.engine, EpisubRouter):
            cached = node.engine.overlays[msg.topic].broadcast.cache[msg.id]
            self.hops.append(cached.hops)
            self.grafted += cached.grafted


def run_variant(name: str, resolved: Any) -> dict[str, Any]:
    publishers: dict[bytes, list[str]] = {}

    def log_event(t_ns: int, kind: str, **fields: Any) -> None:
        if kind == RunEvent.PUBLISH:
            publishers[bytes.fromhex(fields["message_id"])] = [fields["node"]] if fields["node"] else fields["via"]

    with tempfile.TemporaryDirectory() as tmp:
        sim = MeasuredSimulator(resolved, Path(tmp) / "traces", log_event)
        sim.publisher = publishers
        wall0, cpu0 = time.perf_counter(), time.process_time()
        stats = sim.run()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    live = [n for n in sim.nodes.values() if n.engine is not None]
    lat = sorted(stats.latencies_ns)
    hops = sorted(sim.hops)
    stretch = sorted(sim.stretch)
    delivered = stats.on_time_deliveries
    row: dict[str, Any] = {
        "variant": name,
        "nodes": len(sim.nodes),
        "messages": stats.messages,
        "delivery ratio": delivered / stats.expected_deliveries if stats.expected_deliveries else None,
        "expected deliveries": stats.expected_deliveries,
        "missed deliveries": stats.expected_deliveries - delivered,
        "latency p50 ms": percentile(lat, 50) / 1e6 if lat else None,
        "latency p99 ms": percentile(lat, 99) / 1e6 if lat else None,
        "stretch p50": percentile(stretch, 50) if stretch else None,  # type: ignore[arg-type]
        "stretch p99": percentile(stretch, 99) if stretch else None,  # type: ignore[arg-type]
        "transmissions per delivery": stats.transmissions / delivered if delivered else None,
        "duplicates per delivery": sim.duplicates / delivered if delivered else None,
        "GRAFT per delivery": stats.graft / delivered if delivered else None,
        "PRUNE per delivery": stats.prune / delivered if delivered else None,
        "IHAVE per delivery": stats.ihave / delivered if delivered else None,
        "RPCs": stats.rpcs,
        "wall s": round(wall, 1),
        "cpu s": round(cpu, 1),
    }
    if hops:
        row.update({
            "hops p50": percentile(hops, 50), "hops p90": percentile(hops, 90), "hops max": hops[-1],
            "delivered by GRAFT (repair)": sim.grafted / delivered,
        })
    degrees = []
    eager = []
    for node in live:
        engine = node.engine
        if isinstance(engine, EpisubRouter):
            for overlay in engine.overlays.values():
                degrees.append(len(overlay.membership.active))
                eager.append(len(overlay.broadcast.eager))
        elif hasattr(engine, "mesh"):
            degrees.extend(len(m) for m in engine.mesh.values())
    if degrees:
        row["active-view (or mesh) degree mean"] = statistics.mean(degrees)
        row["degree min-max"] = f"{min(degrees)}-{max(degrees)}"
    if eager:
        row["eager degree mean"] = statistics.mean(eager)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", default=str(ROOT / "topologies" / "scale" / "episub-vs-gossipsub.yaml"))
    parser.add_argument("--variant", action="append", help="only this variant (repeatable)")
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    experiment = load_experiment(Path(args.file))
    variants = experiment.variants() or [(experiment.name, experiment)]
    rows = []
    for name, exp in variants:
        if args.variant and name not in args.variant:
            continue
        rows.append(run_variant(name, exp.resolve(args.seed)))
        print(f"{name}: done", file=sys.stderr, flush=True)
    print(f"load average before/after: {os.getloadavg()}")
    keys = list(dict.fromkeys(k for row in rows for k in row))
    width = max(len(k) for k in keys)
    for key in keys:
        cells = []
        for row in rows:
            v = row.get(key, "-")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        print(f"{key:<{width}}  " + "  ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
