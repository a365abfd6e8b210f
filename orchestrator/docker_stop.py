"""Stopping many containers with one grace period for all of them.

Why: `docker stop` waits for its container to exit (up to the grace) before
it returns, so 250 of them, 16 at a time, queue behind each other's drain:
16 batches of a router's whole shutdown. Here every container gets SIGTERM
at once (the kill API returns as soon as the signal is sent), all of them
drain together, and whatever is still running when the one grace period
ends gets SIGKILL: `docker stop`'s semantics, one grace for all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

POLL_S = 0.2
WORKERS = 16  # concurrent signal calls: each returns at once, so a few are enough


def _running(client: Any, flt: dict[str, str], ids: set[str]) -> set[str]:
    """Which of `ids` still run (paused counts: the freezer holds it): one
    listing of the testbed's containers (`flt`), not a call per container."""
    listed = client.api.containers(filters=flt) if ids else []
    return {c["Id"] for c in listed if c["Id"] in ids and c.get("State") in ("running", "paused", "restarting")}


def _signal(client: Any, cid: str, sig: str) -> str | None:
    import docker.errors  # noqa: PLC0415

    try:
        client.api.kill(cid, signal=sig)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        return None if "is not running" in text else text
    return None


def stop_all(client: Any, flt: dict[str, str], containers: dict[str, str], grace_s: float,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
             ) -> dict[str, str]:
    """Stop `containers` (node -> container id, all listed by the label
    filter `flt`): SIGTERM to all, wait up to
    `grace_s` for all of them, SIGKILL the rest and wait for those. Returns
    node -> why for each container that could not be stopped."""
    by_id = {cid: node for node, cid in containers.items()}
    paused = [c["Id"] for c in client.api.containers(filters={**flt, "status": "paused"}) if c["Id"] in by_id]
    for cid in paused:  # a frozen process cannot take its SIGTERM
        client.api.unpause(cid)
    errors = _fan_out(client, sorted(by_id), "SIGTERM")
    deadline = clock() + grace_s
    left = _running(client, flt, set(by_id))
    while left and clock() < deadline:
        sleep(POLL_S)
        left = _running(client, flt, left)
    if left:
        errors.update(_fan_out(client, sorted(left), "SIGKILL"))
        deadline = clock() + grace_s
        while left and clock() < deadline:
            sleep(POLL_S)
            left = _running(client, flt, left)
    out = {by_id[cid]: why for cid, why in errors.items()}
    out.update({by_id[cid]: f"still running {2 * grace_s:g} s after SIGTERM and SIGKILL" for cid in left})
    return out


def _fan_out(client: Any, ids: Sequence[str], sig: str) -> dict[str, str]:
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(lambda cid: _signal(client, cid, sig), ids))
    return {cid: why for cid, why in zip(ids, results, strict=True) if why is not None}
