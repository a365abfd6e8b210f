"""Running the `testbed` command line inside the test process (faster than a
subprocess, and what it prints is captured by capsys)."""

from __future__ import annotations

import sys

import cli.main


def run_cli(*argv: str) -> int:
    """`testbed ARGV...` as the console script runs it; its exit code."""
    old = sys.argv
    sys.argv = ["testbed", *argv]
    try:
        cli.main.main()
    except SystemExit as exc:
        return 0 if exc.code is None else int(exc.code)
    finally:
        sys.argv = old
    return 0
