"""Validation benchmark: how long `testbed validate` takes on a large
experiment file, and its peak memory. The file is an explicit overlay
(`- [nA, nB]` per line) on 20,000 nodes, grown to the size asked (default
5 MB; issue #9 asks for < 5 s). Times the console script end to end (the
interpreter's start-up included) and, in-process, each stage: reading the YAML
(libyaml's event parser, or PyYAML's where libyaml is missing), validating
the model, the whole-file checks, and resolving. CPU seconds are given next to
wall seconds: on a shared, overloaded host the CPU figure is the one to compare.

    .venv/bin/python bench/bench_validate.py              # 5 MB
    .venv/bin/python bench/bench_validate.py --mb 8       # just under the 8 MiB cap
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_file(path: Path, megabytes: float, nodes: int) -> int:
    rng = random.Random(1)
    lines = ["name: bench-validate", f"nodes: {{count: {nodes}, router: floodsub}}",
             "overlay:", "  type: explicit", "  edges:"]
    size = sum(len(x) + 1 for x in lines)
    edges = 0
    while size < megabytes * 1e6:
        a, b = rng.sample(range(nodes), 2)
        line = f"    - [n{a}, n{b}]"
        lines.append(line)
        size += len(line) + 1
        edges += 1
    path.write_text("\n".join(lines) + "\n")
    return edges


def stages(path: Path) -> dict[str, float]:
    import yaml

    from orchestrator.experiment.check import _Checker
    from orchestrator.experiment.document import read_document
    from orchestrator.experiment.yamlsrc import load_yaml

    out: dict[str, float] = {}
    t = time.process_time()
    raw, source = load_yaml(path)
    out["read_yaml_cpu_s"] = time.process_time() - t
    t = time.process_time()
    doc = read_document(raw, source)
    out["validate_model_cpu_s"] = time.process_time() - t
    t = time.process_time()
    exp = _Checker(source).experiment(doc, default_name=path.stem)
    out["check_cpu_s"] = time.process_time() - t
    t = time.process_time()
    exp.resolve()
    out["resolve_cpu_s"] = time.process_time() - t
    out["libyaml"] = bool(getattr(yaml, "__with_libyaml__", False))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=5.0, help="file size in MB (default 5)")
    parser.add_argument("--nodes", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.yaml"
        edges = write_file(path, args.mb, args.nodes)
        testbed = Path(sys.executable).with_name("testbed")
        t = time.perf_counter()
        proc = subprocess.run([testbed, "validate", "--json", str(path)], capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            sys.exit(f"testbed validate exited {proc.returncode}: {proc.stderr.strip()}")
        child = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = {
            "file_bytes": path.stat().st_size, "nodes": args.nodes, "edges": edges,
            "testbed_validate_wall_s": round(wall, 2), "testbed_validate_cpu_s": round(child.ru_utime + child.ru_stime, 2),
            "testbed_validate_peak_mib": round(child.ru_maxrss / 1024),
            **{k: (round(x, 2) if isinstance(x, float) else x) for k, x in stages(path).items()},
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
