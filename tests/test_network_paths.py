"""The lower bound of a router that dials on send (episub) is the network's
shortest path over every pair's link, not the overlay's: topology.json
carries it from each publisher, and the analysis' lower bound reads it."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from analysis.deliveries import lower_bounds
from analysis.rundir import RunDir
from orchestrator.experiment.spec import parse_experiment
from orchestrator.records.runinfo import topology_dict

# Europe-Asia direct is 200 ms one way; through America it is 40 + 75 = 115.
FILE = """\
name: paths
seed: 1
groups:
  - {{name: src, count: 1, router: {router}, topics: [t], region: europe}}
  - {{name: us, count: 2, router: {router}, topics: [t], region: america}}
  - {{name: asia, count: 2, router: {router}, topics: [t], region: asia}}
overlay: {{type: random, degree: 2}}
links:
  latency:
    model: regions
    matrix:
      europe: {{europe: 5, america: 40, asia: 200}}
      america: {{america: 8, asia: 75}}
      asia: {{asia: 6}}
workload: {{messages: 2, interval: 1s, publishers: {{group: src}}}}
"""


def resolved(router: str):
    return parse_experiment(textwrap.dedent(FILE.format(router=router)), "paths.yaml").resolve()


def test_episub_topology_has_the_networks_shortest_paths_from_each_publisher():
    topo = topology_dict(resolved("episub"))
    paths = topo["network_paths_ms"]
    assert sorted(paths) == ["src-0"]
    src = paths["src-0"]
    assert src["src-0"] == 0.0
    assert src["us-0"] == src["us-1"] == 40.0
    assert src["asia-0"] == src["asia-1"] == 115.0  # through America, not the 200 ms direct link
    # the overlay's own edges still describe the contacts
    assert {(e["a"], e["b"]) for e in topo["edges"]} and all(math.isfinite(d) for d in src.values())


def test_a_router_held_to_the_overlay_has_no_network_paths():
    assert "network_paths_ms" not in topology_dict(resolved("gossipsub"))


def test_the_analysis_lower_bound_reads_the_network_paths(tmp_path: Path):
    run = RunDir(tmp_path, tmp_path, [], topology=topology_dict(resolved("episub")))
    dist = run.network_paths()
    assert dist is not None
    bound = lower_bounds(pd.Series(["m", "m"]), pd.Series(["asia-1", "us-0"]), {"m": ["src-0"]}, dist)
    assert bound.tolist() == pytest.approx([115.0, 40.0])
    assert RunDir(tmp_path, tmp_path, [], topology={"nodes": [], "edges": []}).network_paths() is None
