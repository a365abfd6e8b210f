"""`python -m node --config FILE`: run one router daemon (as `testbed node`)."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node", description="Run one gossip-testbed router daemon.")
    parser.add_argument("--config", required=True, type=Path, help="the node's JSON configuration (NodeConfig)")
    args = parser.parse_args(argv)
    return run_from_file(args.config)


def run_from_file(path: Path) -> int:
    # What the imports allocate lives as long as the process: no collection
    # while they run (about 8% of their CPU, which 250 containers pay at once).
    gc.disable()
    from node.config import NodeConfig  # noqa: PLC0415
    from node.runtime.daemon import run_node  # noqa: PLC0415

    gc.enable()

    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        cfg = NodeConfig.load(path)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"error: cannot load node config {path}: {exc}", file=sys.stderr)
        return 2
    try:
        return run_node(cfg)
    except OSError as exc:  # typically: address already in use
        print(f"error: {cfg.name}: {exc}", file=sys.stderr)
        return 1


def exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's finalization, which tears
    down every module and object one by one: about 10 of the 24 ms of CPU a
    router's exit cost (bench/bench_router_cpu.py), which 250 containers
    stopped at once pay together on two cores. What the router keeps is on
    disk by then (Node.run closed the trace and wrote the lag file); only
    logging and the standard streams may still hold bytes."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
