"""The sybil share of honest meshes (analysis/mesh_sybils.py), on meshes
written by hand: sampled at whole seconds, sybils' own meshes left out, the
figures over the workload window only."""

from __future__ import annotations

import pytest

from analysis.mesh_sybils import mesh_sybil_samples, mesh_sybil_summary

NS = 1_000_000_000
T0 = 100 * NS


def test_shares_per_second_and_over_the_workload_window() -> None:
    changes = {
        # the victim h0: two sybils from the start, an honest peer from 2 s, s1 pruned at 3 s
        ("h0", "t", "s0"): [(T0, 0, 1)],
        ("h0", "t", "s1"): [(T0, 1, 1), (T0 + 3 * NS, 5, 0)],
        ("h0", "t", "h1"): [(T0 + 2 * NS, 2, 1)],
        ("h1", "t", "h0"): [(T0 + 2 * NS, 0, 1)],  # honest h1: no sybil in its mesh
        ("s0", "t", "h0"): [(T0, 0, 1)],  # a sybil's own mesh does not count
    }
    samples = mesh_sybil_samples(changes, {"s0", "s1"}, T0, T0 + 4 * NS)
    h0 = samples[samples["node"] == "h0"]
    assert h0[["t_s", "mesh", "sybils"]].values.tolist() == [[0, 2, 2], [1, 2, 2], [2, 3, 2], [3, 2, 1], [4, 2, 1]]
    assert set(samples["node"]) == {"h0", "h1"}
    s = mesh_sybil_summary(samples, {"s0", "s1"}, {"h0"}, first_publish_ns=T0 + NS, t0=T0, teardown=T0 + 4 * NS)
    # window: samples at 1, 2, 3 s; h1 has a mesh from 2 s
    assert s["victim_mesh_sybil_fraction_max"] == 1.0
    assert s["victim_mesh_sybil_fraction_mean"] == pytest.approx((1 + 2 / 3 + 1 / 2) / 3)
    assert s["victim_mesh_sybil_fraction_end"] == pytest.approx(0.5)
    assert s["victim_mesh_all_sybil_share"] == pytest.approx(1 / 3)
    assert s["mesh_sybil_fraction_mean"] == pytest.approx((1 + 2 / 3 + 1 / 2 + 0 + 0) / 5)
    assert s["mesh_sybil_fraction_end"] == pytest.approx((0.5 + 0) / 2)


def test_no_sybils_no_figures() -> None:
    samples = mesh_sybil_samples({("h0", "t", "h1"): [(T0, 0, 1)]}, set(), T0, T0 + NS)
    assert samples.empty
    s = mesh_sybil_summary(samples, set(), set(), T0, T0, T0 + NS)
    assert set(s.values()) == {None}
