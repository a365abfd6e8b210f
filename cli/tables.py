"""How results look on a terminal, shared by the commands that print them
(sim, run, and the analysis after either): one way to show a number, one
summary table with a column per run, one line per expectation."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rich.table import Table

# The simulator's summary, in the reference simulator's terms: (key, label).
SIM_ROWS: Sequence[tuple[str, str]] = (
    ("nodes", "nodes"), ("messages", "messages"), ("publish", "publish (injections)"),
    ("deliver", "deliver"), ("connect", "connect"), ("pubsub.publish", "pubsub.publish (transmissions)"),
    ("graft", "GRAFT"), ("prune", "PRUNE"), ("ihave", "IHAVE"), ("iwant", "IWANT"),
    ("delivery_ratio", "delivery ratio"), ("latency_p50_ms", "latency p50 (ms)"),
    ("latency_p99_ms", "latency p99 (ms)"), ("events_processed", "events processed"),
    ("simulated_s", "simulated time (s)"), ("wall_s", "wall time (s)"), ("events_per_s", "events per second"),
)


def fmt(value: Any, digits: int = 4) -> str:
    """'-' for missing, yes/no for booleans, `digits` significant digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def runs_table(title: str, rows: Sequence[tuple[str, str]], summaries: Mapping[str, Mapping[str, Any]]) -> Table:
    """One row per (key, label), one column per run (variants side by side)."""
    table = Table(title=title)
    table.add_column("", style="bold")
    for name in summaries:
        table.add_column(name, justify="right")
    for key, label in rows:
        table.add_row(label, *(fmt(summaries[name].get(key), 6) for name in summaries))
    return table


def expectation_lines(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> Iterator[str]:
    """PASS/FAIL per expectation, naming the run when there are several."""
    for run_dir, rs in results.items():
        for r in rs:
            mark = "[green]PASS[/]" if r["passed"] else "[bold red]FAIL[/]"
            yield f"  {mark} {r['expr']}: {r['message']}" + (f"  ({run_dir})" if len(results) > 1 else "")
