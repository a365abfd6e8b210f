"""What compiling the simulator's hot path with mypyc buys, measured rather
than guessed (issue 37: a million nodes needs three to four times today's
event rate). The tree is not compiled: this bench builds a compiled copy of
HEAD and a plain copy in a temporary directory and runs this tree's
bench_sim.py in both, one size at a time, interpreted first, printing the
rates and whether the traces are byte-identical.

The copy needs three edits mypyc asks for, made here so the tree stays as
it is: the classes interpreted code subclasses (the routers, their
parameters, the caches, the simulator) are marked
`allow_interpreted_subclasses`, the compiled modules' `@frozen` classes
(node/wire/frozen.py) are plain frozen dataclasses again, which mypyc builds
natively, and SimNode.engine is typed Any (mypyc would check the Router
protocol's optional methods at every call). mypy comes from PyPI into a directory of
its own, never into the venv.

    .venv/bin/python bench/bench_sim_mypyc.py --nodes 2000 10000
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_sim import print_rows  # noqa: E402

MYPY = "mypy==1.13.0"
COMPILED = ("node/engine/api.py", "node/engine/caches.py", "node/engine/pubsub.py", "node/engine/gossipsub.py",
            "node/wire/rpc.py", "orchestrator/sim/simulator.py")
SUBCLASSED = {"node/engine/api.py": ("OutputBuilder",), "node/engine/caches.py": ("SeenCache", "MessageCache"),
              "node/engine/pubsub.py": ("PubSubRouter",), "node/engine/gossipsub.py": ("GossipSubParams", "GossipSubRouter"),
              "orchestrator/sim/simulator.py": ("Simulator",)}
MYPY_INI = "[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n[mypy-node.proto.*]\nfollow_imports = skip\n"


def edit(tree: Path) -> None:
    """The two edits mypyc needs; each must apply, or the bench stops."""
    for rel, classes in SUBCLASSED.items():
        path = tree / rel
        text = path.read_text()
        for name in classes:
            text, n = re.subn(rf"^((?:@dataclass[^\n]*\n)?class {name}\b)",
                              r"@mypyc_attr(allow_interpreted_subclasses=True)\n\1", text, count=1, flags=re.M)
            if n != 1:
                raise SystemExit(f"{rel}: class {name} not found; the bench's edits are out of date")
        text = text.replace("from __future__ import annotations\n",
                            "from __future__ import annotations\n\nfrom mypy_extensions import mypyc_attr\n", 1)
        path.write_text(text)
    for rel in ("node/engine/api.py", "node/wire/rpc.py"):  # the compiled modules with @frozen classes
        path = tree / rel
        text, n = re.subn(r"^@frozen$", "@dataclass(frozen=True, slots=True)", path.read_text(), flags=re.M)
        if n == 0 or "from node.wire.frozen import frozen\n" not in text:
            raise SystemExit(f"{rel}: no @frozen class; the bench's edits are out of date")
        path.write_text(text.replace("from node.wire.frozen import frozen\n", "from dataclasses import dataclass\n"))
    node = tree / "orchestrator/sim/node.py"
    text, n = re.subn(r"^    engine: Router \| None = None$", "    engine: Any = None", node.read_text(), flags=re.M)
    if n != 1 or "from typing import Any" not in text:
        raise SystemExit("orchestrator/sim/node.py: SimNode.engine not found; the bench's edits are out of date")
    node.write_text(text)


def copy_of_head(tree: Path) -> Path:
    """HEAD's files, with this tree's bench_sim.py: the same harness on both sides."""
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shutil.copy(ROOT / "bench/bench_sim.py", tree / "bench/bench_sim.py")
    return tree


def build(work: Path) -> tuple[Path, Path]:
    """(the compiled copy of HEAD, mypy's directory, which also holds mypy_extensions)."""
    mypy = work / "mypy"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(mypy), MYPY, "setuptools"],
                   check=True)
    tree = copy_of_head(work / "compiled")
    edit(tree)
    (tree / "mypy.ini").write_text(MYPY_INI)
    subprocess.run([sys.executable, "-m", "mypyc", "--config-file", "mypy.ini", *COMPILED], cwd=tree, check=True,
                   env={"PYTHONPATH": str(mypy), "PATH": "/usr/bin:/bin"}, capture_output=True)
    return tree, mypy


def bench(tree: Path, nodes: int, args: argparse.Namespace, extra_path: str = "") -> dict:
    cmd = [sys.executable, str(tree / "bench/bench_sim.py"), "--file", str(tree / args.file), "--nodes", str(nodes),
           "--trace-sample", str(args.trace_sample), "--trace-hash", "--json"]
    env = {"PATH": "/usr/bin:/bin", **({"PYTHONPATH": extra_path} if extra_path else {})}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="*", default=[2000, 10000])
    parser.add_argument("--file", default="topologies/scale/gossipsub-100k.yaml")
    parser.add_argument("--trace-sample", type=float, default=0.01)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        compiled, mypy = build(Path(tmp))
        interpreted = copy_of_head(Path(tmp) / "interpreted")
        for n in args.nodes:
            plain = bench(interpreted, n, args)
            fast = bench(compiled, n, args, extra_path=str(mypy))  # mypy_extensions, for the decorator
            rows.append({"nodes": n, "events": plain["events"],
                         "interpreted_events_per_s": plain["events_per_s"], "compiled_events_per_s": fast["events_per_s"],
                         "speed_up": round(fast["events_per_s"] / plain["events_per_s"], 2),
                         "interpreted_peak_rss_mb": plain["peak_rss_mb"], "compiled_peak_rss_mb": fast["peak_rss_mb"],
                         "traces_identical": plain["trace_sha256"] == fast["trace_sha256"] and plain["events"] == fast["events"]})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print_rows(f"simulator, interpreted and compiled with {MYPY}: {args.file}, sample {args.trace_sample}", rows)


if __name__ == "__main__":
    main()
