"""The one progress protocol for long work (starting nodes, the workload,
simulating, building the image): a `phase` with an optional total that
yields an `advance(n)` callback, and a `note` for a line worth showing.
Silent by default; the CLI passes a rich one (bars on stderr, a check mark
per finished phase), or the silent one under --json."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


class Reporter:
    """Progress that shows nothing."""

    @contextlib.contextmanager
    def phase(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        yield lambda n=1: None

    def note(self, message: str) -> None:
        pass


class RichReporter(Reporter):
    def __init__(self, console: Any) -> None:
        self.console = console

    @contextlib.contextmanager
    def phase(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        from rich.progress import (  # noqa: PLC0415
            BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
        )

        columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress(*columns, console=self.console, transient=True) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)
        self.console.print(f"[green]✓[/] {description}")

    def note(self, message: str) -> None:
        self.console.print(message)
