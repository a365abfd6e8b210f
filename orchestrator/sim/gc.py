"""The cyclic garbage collector's settings for a simulation: the simulator
allocates millions of short-lived objects beside a large, long-lived state."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_gc() -> Iterator[None]:
    """With the default thresholds the cyclic collector rescans the
    simulation's state constantly (a third of the run time at 1,000 nodes).
    Freeze what exists and collect young objects less often. PyPy's
    generational collector has none of these knobs and needs none of this."""
    if sys.implementation.name == "pypy":
        yield
        return
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(200_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
