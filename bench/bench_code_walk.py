"""How far a newcomer walks through the code to follow one `testbed run FILE`.

Runs the CLI in this process under a profiler hook and records, on the main
thread, every call from one project file into another (cli/, orchestrator/,
analysis/, node/). Each distinct caller -> callee pair counts once, at its
first occurrence, so loops do not inflate the figures. The walk is the order
in which those first calls reach their files; a *return* is a step into a
file the walk has already been in and left. Also prints how many project
modules the run loaded.

    .venv/bin/python bench/bench_code_walk.py topologies/quick.yaml --backend process
    .venv/bin/python bench/bench_code_walk.py FILE --scope orchestrator   # only orchestrator/ files
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("cli", "orchestrator", "analysis", "node")


def project_file(filename: str, scope: tuple[str, ...]) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return rel.as_posix() if rel.parts and rel.parts[0] in scope else None


def walk(argv: list[str], scope: tuple[str, ...]) -> dict[str, object]:
    from cli.main import main  # noqa: PLC0415  (imported after the hook's helpers, before the run)

    main_thread = threading.main_thread()
    seen_edges: set[tuple[str, str, str, str]] = set()
    steps: list[str] = []

    def hook(frame, event, _arg):  # noqa: ANN001, ANN202
        if event != "call" or threading.current_thread() is not main_thread:
            return
        callee = project_file(frame.f_code.co_filename, scope)
        caller_frame = frame.f_back
        if callee is None or caller_frame is None:
            return
        caller = project_file(caller_frame.f_code.co_filename, scope)
        if caller is None or caller == callee:
            return
        edge = (caller, caller_frame.f_code.co_name, callee, frame.f_code.co_name)
        if edge not in seen_edges:
            seen_edges.add(edge)
            steps.append(callee)

    sys.setprofile(hook)
    try:
        sys.argv = ["testbed", *argv]
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the figures are this script's only stdout
                main()
        except SystemExit as exit_:
            code = exit_.code
        else:
            code = 0
    finally:
        sys.setprofile(None)
    visited: list[str] = []
    returns = 0
    for previous, step in zip([None, *steps], steps):
        if step == previous:
            continue
        if step in visited:
            returns += 1
        else:
            visited.append(step)
    loaded = sorted(name for name in sys.modules if name.split(".")[0] in PROJECT)
    return {"exit": code, "modules_loaded": len(loaded), "files_visited": len(visited),
            "steps": len(steps), "returns": returns, "files": visited}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--backend", default="process")
    parser.add_argument("--scope", default="cli,orchestrator", help="top-level packages to follow (comma-separated)")
    args = parser.parse_args()
    scope = tuple(args.scope.split(","))
    result = walk(["run", args.file, "--backend", args.backend, "--no-report"], scope)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
