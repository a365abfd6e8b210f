"""How a message spread: who first received it from whom (docs/metrics.md,
"First-delivery tree").

Every node's first DELIVER_MESSAGE of a message names the peer it came from
(trace.proto's receivedFrom). Those links form a tree rooted at the
message's publishers; a node's hop count is its depth in it. The report draws
the tree of the median and the slowest message, and the fraction of
subscribers reached over time for every message.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

# first_deliveries.parquet's columns, in order
FIRST_DELIVERY_COLUMNS = ["msg", "node", "deliver_ts", "from_peer", "hops"]


def first_delivery_tree(first: pa.Table, publishers: dict[str, list[str]]) -> pd.DataFrame:
    """first_deliveries.parquet from every node's first delivery (`first`:
    msg, node, deliver_ts, from_peer): the same rows with `hops`, the number
    of links from a publisher (a publisher's neighbour is 1 hop away). Null
    where the chain of senders does not reach a publisher (a sender whose
    trace is missing, or one that delivered the message only after passing it
    on, which a router never does)."""
    df = first.select(["msg", "node", "deliver_ts", "from_peer"]).to_pandas()
    hops = [None] * len(df)
    for msg, idx in df.groupby("msg", sort=False).indices.items():
        roots = set(publishers.get(msg) or ())
        sender = {df.at[i, "node"]: df.at[i, "from_peer"] for i in idx}
        depth: dict[str, int | None] = {r: 0 for r in roots}
        for i in idx:
            chain, node = [], df.at[i, "node"]
            while node not in depth and node is not None and node not in chain:
                chain.append(node)
                node = sender.get(node)
            base = depth.get(node) if node is not None else None
            for k, n in enumerate(reversed(chain), 1):
                depth[n] = None if base is None else base + k
            hops[i] = depth[df.at[i, "node"]]
    df["hops"] = pd.array(hops, dtype="Int32")
    return df[FIRST_DELIVERY_COLUMNS]
