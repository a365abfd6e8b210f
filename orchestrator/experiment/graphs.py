"""Overlay graphs: who dials whom when the experiment starts.

Every function takes node names in the experiment's canonical order and a
seeded `random.Random`, never iterates a set to make a choice, and returns
undirected edges as sorted `(a, b)` pairs with `a < b` (string order, the
order `ResolvedExperiment.link` uses).

- `n_connect`: the reference simulator's N-connect (simsub's `connect`): each
  node dials `degree` distinct peers chosen at random; the overlay is the
  union of those dials, so degrees are >= `degree` (about 2*degree on average).
- `random_regular`: every node has exactly `d` neighbours (Steger-Wormald
  pairing with restarts; for d > (n-1)/2 the complement of a regular graph).
- `full`: every pair.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

Edge = tuple[str, str]


def edge(a: str, b: str) -> Edge:
    return (a, b) if a < b else (b, a)


class _Others(Sequence[str]):
    """`names` without the one at `skip`, as a view: `rng.sample` draws the
    same peers from it as from a copied list, without an O(n) copy per node."""

    def __init__(self, names: Sequence[str], skip: int) -> None:
        self.names, self.skip = names, skip

    def __len__(self) -> int:
        return len(self.names) - 1

    def __getitem__(self, j: int) -> str:  # type: ignore[override]
        if not 0 <= j < len(self):
            raise IndexError(j)
        return self.names[j + (j >= self.skip)]


def n_connect(names: Sequence[str], degree: int, rng: random.Random) -> list[Edge]:
    if degree >= len(names):
        raise ValueError(f"degree {degree} needs at least {degree + 1} nodes, have {len(names)}")
    edges: set[Edge] = set()
    for i, a in enumerate(names):
        for b in rng.sample(_Others(names, i), degree):
            edges.add(edge(a, b))
    return sorted(edges)


def random_regular(names: Sequence[str], d: int, rng: random.Random) -> list[Edge]:
    n = len(names)
    if d >= n:
        raise ValueError(f"degree {d} needs at least {d + 1} nodes, have {n}")
    if (n * d) % 2:
        raise ValueError(f"no {d}-regular graph on {n} nodes: n*d = {n * d} is odd")
    if d == 0:
        return []
    if d > (n - 1) / 2:
        sparse = set(random_regular(names, n - 1 - d, rng))
        return [e for e in full(names) if e not in sparse]
    index = list(range(n))
    for _attempt in range(1000):
        pairs = _pairing(index, d, rng)
        if pairs is not None:
            return sorted(edge(names[i], names[j]) for i, j in pairs)
    raise ValueError(f"could not draw a {d}-regular graph on {n} nodes")


def _pairing(index: list[int], d: int, rng: random.Random) -> set[tuple[int, int]] | None:
    """One Steger-Wormald attempt: pair free stubs at random, keeping only
    pairs that make neither a loop nor a double edge; None when stuck."""
    edges: set[tuple[int, int]] = set()
    stubs = [i for i in index for _ in range(d)]
    while stubs:
        left: dict[int, int] = {}
        rng.shuffle(stubs)
        it = iter(stubs)
        for u, v in zip(it, it):
            if u > v:
                u, v = v, u
            if u != v and (u, v) not in edges:
                edges.add((u, v))
            else:
                left[u] = left.get(u, 0) + 1
                left[v] = left.get(v, 0) + 1
        if not left:
            return edges
        # Stuck when no two distinct remaining nodes can still be joined.
        remaining = sorted(left)
        if not any(
            (u, v) not in edges
            for k, u in enumerate(remaining) for v in remaining[k + 1:]
        ):
            return None
        stubs = [i for i in remaining for _ in range(left[i])]
    return edges


def full(names: Sequence[str]) -> list[Edge]:
    return sorted(edge(a, b) for i, a in enumerate(names) for b in names[i + 1:])


def components(names: Sequence[str], edges: Iterable[Edge]) -> int:
    """The number of connected components (isolated nodes count)."""
    parent = {n: n for n in names}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    return len({find(n) for n in names})


def degrees(names: Sequence[str], edges: Iterable[Edge]) -> dict[str, int]:
    out = dict.fromkeys(names, 0)
    for a, b in edges:
        out[a] += 1
        out[b] += 1
    return out
