"""Running one call over many items a few at a time, for the backends and the
controller: start, stop, inspect or ask 250 nodes without 250 threads, and
without waiting for each answer before the next question.

One rule for every such fan-out: at most `at_most` calls at once, results in
the items' order; a call that raises (Ctrl-C included) cancels the calls not
yet started and its exception is raised once the running ones end.
`errors_by_item` is the variant where one item's failure does not stop the
others. A single item is called in the caller's thread. Long-lived executors
(the controller's churn pool) are not fan-outs and keep their own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


def fan_out(fn: Callable[[T], R], items: Sequence[T], at_most: int) -> list[R]:
    """fn(item) for every item, at most `at_most` at once; the results in the items' order."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(at_most, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def errors_by_item(fn: Callable[[K], object], items: Sequence[K], at_most: int) -> dict[K, Exception]:
    """`fan_out` where an Exception of one item is kept, not raised: item ->
    its exception, for the items whose call raised one."""
    def caught(item: K) -> Exception | None:
        try:
            fn(item)
        except Exception as exc:  # noqa: BLE001 - reported by item, the others go on
            return exc
        return None

    return {item: exc for item, exc in zip(items, fan_out(caught, items, at_most), strict=True) if exc is not None}
