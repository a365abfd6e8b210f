"""The analysis never reports figures from part of the data: every event that
ingest decoded from the traces must be in the events Spark computes over,
whatever path took them there (a table in memory, Parquet files, a Connect
server). Issue 38 was a 100-node run whose analysis kept 469 of 30,993 events
and reported delivery 0.01 with nothing to say so.

The check costs no Spark job of its own: the first action of the job
(metrics.event_counts) already counts events per node, type and link, so its
sums are Spark's view of the events, compared here with ingest's, in total
and per node."""

from __future__ import annotations

import pandas as pd

from node.errors import IncompleteData

SHOWN = 5  # nodes named in the error; the rest are counted


def check_complete(decoded_total: int, decoded_per_node: dict[str, int], counts: pd.DataFrame) -> None:
    """Raise IncompleteData unless `counts` (event_counts' rows: node,
    events) holds exactly the events decoded, in total and for every node
    with records."""
    in_spark = int(counts["events"].sum()) if len(counts) else 0
    per_node = counts.groupby("node", dropna=False)["events"].sum() if len(counts) else pd.Series(dtype="int64")
    spark_of = {node: int(n) for node, n in per_node.items()}
    wrong = sorted(
        (node, n, spark_of.get(node, 0)) for node, n in decoded_per_node.items() if spark_of.get(node, 0) != n
    )
    if in_spark == decoded_total and not wrong:
        return
    lines = [f"the analysis lost events: ingest decoded {decoded_total} trace records but Spark's events hold "
             f"{in_spark}; no figures are reported from partial data"]
    if wrong:
        shown = ", ".join(f"{node}: {got} of {want}" for node, want, got in wrong[:SHOWN])
        more = f" and {len(wrong) - SHOWN} more" if len(wrong) > SHOWN else ""
        lines.append(f"nodes whose events are not all there: {shown}{more}")
    raise IncompleteData("\n".join(lines))
