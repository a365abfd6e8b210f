"""Room in the host's neighbour table (orchestrator/host/neighbours.py), on
hand-made /proc files: the limits are raised to cover a testbed and never
lowered, and the refusals are summed over every CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.host import neighbours

ARP_CACHE = """\
entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast periodic_gc_runs forced_gc_runs unresolved_discards table_fulls
00000064 0000109b 00000f68 00000004   0013ddbd 00012798 000006d7   00000000         00000000         0000008c         00014110       00000000            00013d92
00000064 00000010 00000008 00000000   00000100 00000080 00000000   00000000         00000000         00000001         00000002       00000000            0000000e
"""


@pytest.fixture
def proc(tmp_path, monkeypatch) -> Path:
    (tmp_path / "arp_cache").write_text(ARP_CACHE)
    for name, value in (("gc_thresh2", 512), ("gc_thresh3", 1024)):
        (tmp_path / name).write_text(f"{value}\n")
    monkeypatch.setattr(neighbours, "STATS", tmp_path / "arp_cache")
    monkeypatch.setattr(neighbours, "THRESHOLDS", tmp_path)
    monkeypatch.setattr(neighbours.os, "geteuid", lambda: 0)
    return tmp_path


def test_the_table_size_is_read_once_and_refusals_summed_over_cpus(proc):
    assert neighbours.table_entries() == 100
    assert neighbours.overflows() == 0x13d92 + 0xe


def test_the_limits_are_raised_to_cover_the_testbed_and_never_lowered(proc):
    note = neighbours.ensure_room(250)
    want = 100 + neighbours.PER_CONTAINER * 250
    assert (proc / "gc_thresh3").read_text() == f"{want}\n"
    assert (proc / "gc_thresh2").read_text() == f"{want * 3 // 4}\n"
    assert note is not None and f"gc_thresh3 1024 -> {want}" in note
    assert neighbours.ensure_room(10) is None  # already room: nothing written
    assert (proc / "gc_thresh3").read_text() == f"{want}\n"


def test_without_root_nothing_is_changed(proc, monkeypatch):
    monkeypatch.setattr(neighbours.os, "geteuid", lambda: 1000)
    assert neighbours.ensure_room(250) is None
    assert (proc / "gc_thresh3").read_text() == "1024\n"
