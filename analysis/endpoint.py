"""Which Spark an analysis uses, the one rule for every command: an explicit
Spark Connect URL, else $SPARK_REMOTE, else (unless a classic master is
asked for) the server `testbed spark start` left running in the CLI's state
directory `state`; and, while an analysis or an experiment runs, that
server's background warm-up holds off (analysis/warming.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from analysis.connect import running
from analysis.warming import analysing


def spark_endpoint(state: Path, spark_master: str | None, spark_remote: str | None) -> str | None:
    """The Connect URL an analysis uses, or None for a classic session:
    --spark-remote, else $SPARK_REMOTE, else (unless --spark-master asks for
    a classic session) the server `testbed spark start` left running."""
    if spark_remote:
        return spark_remote
    if spark_master:
        return None
    if os.environ.get("SPARK_REMOTE"):
        return os.environ["SPARK_REMOTE"]
    server = running(state)
    return server.url if server is not None else None


@contextmanager
def analysis_endpoint(state: Path, spark_master: str | None, spark_remote: str | None) -> Iterator[str | None]:
    """`spark_endpoint`'s URL for the duration of an analysis; while it is
    the server `testbed spark start` left running, that server's background
    warm-up starts no run of its own (analysis/warming.py)."""
    url = spark_endpoint(state, spark_master, spark_remote)
    server = running(state) if url is not None else None
    with analysing(state) if server is not None and server.url == url else nullcontext():
        yield url


@contextmanager
def experiment_running(state: Path) -> Iterator[None]:
    """Held while an experiment runs on this host: the background warm-up of
    the server `testbed spark start` left running starts no run of its own
    meanwhile (its large phase is half a minute of CPU the routers would
    lose, and their figures with it)."""
    with analysing(state) if running(state) is not None else nullcontext():
        yield
