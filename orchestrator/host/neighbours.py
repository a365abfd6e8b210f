"""Room in the host's neighbour (ARP) table for a testbed's containers.

Why: the kernel keeps one IPv4 neighbour table for every network namespace
(arp_tbl), so each container's entries for the peers it talks to count
against the host's `net.ipv4.neigh.default.gc_thresh3`, 1024 by default. 250
routers with about 12 peers each need about 3,000: past the limit the kernel
refuses new entries ("neighbor table overflow" in the kernel log), a
container cannot resolve a peer's address and its frames to it are dropped.
In a 250-container run this left 9 routers with no message at all and others
tens of seconds late, 80,000 refusals counted in /proc/net/stat/arp_cache.

So the docker backend, as root, raises the limits to cover the testbed before
its containers start (never lowers them: another testbed may need them), and
counts the refusals during the run: any is a fidelity warning in the manifest.
"""

from __future__ import annotations

import os
from pathlib import Path

PER_CONTAINER = 48  # neighbour entries a container may hold: its peers, churn and reconnects
THRESHOLDS = Path("/proc/sys/net/ipv4/neigh/default")
STATS = Path("/proc/net/stat/arp_cache")


def ensure_room(containers: int) -> str | None:
    """Raise gc_thresh2/3 so that `containers` containers fit beside what
    the table holds now; a note saying what changed, or None (no change, or
    no root: then `overflows` tells afterwards)."""
    want3 = table_entries() + PER_CONTAINER * containers
    current3 = int((THRESHOLDS / "gc_thresh3").read_text())
    if want3 <= current3 or os.geteuid() != 0:
        return None
    current2 = int((THRESHOLDS / "gc_thresh2").read_text())
    want2 = max(current2, want3 * 3 // 4)
    (THRESHOLDS / "gc_thresh2").write_text(f"{want2}\n")
    (THRESHOLDS / "gc_thresh3").write_text(f"{want3}\n")
    return (f"host neighbour table: net.ipv4.neigh.default.gc_thresh3 {current3} -> {want3}, gc_thresh2 "
            f"{current2} -> {want2} (every container's ARP entries count against it)")


def _column(name: str) -> list[int]:
    """One column of /proc/net/stat/arp_cache: a line per CPU."""
    header, *rows = STATS.read_text().splitlines()
    at = header.split().index(name)
    return [int(row.split()[at], 16) for row in rows]


def table_entries() -> int:
    return _column("entries")[0]  # the table's size, repeated on every CPU's line


def overflows() -> int:
    """Times since boot the kernel refused a new entry because the table was full (all CPUs)."""
    return sum(_column("table_fulls"))
