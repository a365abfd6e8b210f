"""Running the `testbed` command line inside the test process (faster than a
subprocess, and what it prints is captured by capsys)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


def assert_validate_refuses(path: Path, line: int, field: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`testbed validate PATH` exits 2 with one error naming the file, the
    line and the field, and saying `words`."""
    code = run_cli("validate", str(path))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert f"{path}:{line}: {field}:" in err, err
    assert words in err, err
