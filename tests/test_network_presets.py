"""`links: {preset: test-plans}`: libp2p/test-plans' gossipsub-interop network
(orchestrator/experiment/network_presets.py). Its regions and bandwidth
classes are drawn per node by their weights (seeded), a group's own region
or uplink overrides the draw, the file round-trips through
experiment.resolved.yaml, and the latency figures are applied one-way, as
Shadow applies its graph's edge latencies: a message crosses a Europe - NA
east pair in 70 ms (their figure), not 35 ms (half of a round trip)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

from node.trace.vocab import TraceType
from node.trace.file import read_trace
from orchestrator.experiment.network_presets import TEST_PLANS
from orchestrator.experiment.spec import load_experiment, parse_experiment, resolved_to_yaml
from tests.test_simulator import simulate

TESTBED = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "testbed")

MANY = """\
name: presetted
seed: 4
groups:
  - {name: a, count: 2000, router: gossipsub}
  - {name: eu, count: 2, router: gossipsub, region: europe, uplink: 10mbit}
overlay: {type: random, degree: 2}
links: {preset: test-plans}
workload: {messages: 1, size: 100}
"""


def test_regions_and_classes_are_drawn_by_their_weights():
    exp = parse_experiment(MANY, "many.yaml")
    nodes = exp.resolve().nodes
    drawn = [n for n in nodes if n.group == "a"]
    regions = Counter(n.region for n in drawn)
    total = sum(w for _, w in TEST_PLANS.regions)
    for region, weight in TEST_PLANS.regions:  # within 4 points of the weight's share, out of 2000 draws
        assert abs(regions[region] / len(drawn) - weight / total) < 0.04, (region, regions)
    uplinks = Counter(n.uplink_bps for n in drawn)
    assert set(uplinks) == {1024_000_000, 50_000_000}
    assert abs(uplinks[1024_000_000] / len(drawn) - 0.2) < 0.04, uplinks
    assert {(n.region, n.uplink_bps) for n in nodes if n.group == "eu"} == {("europe", 10_000_000)}
    again = parse_experiment(resolved_to_yaml(exp.resolve(), exp), "again.yaml").resolve()
    assert again.digest() == exp.resolve().digest()


def test_every_pair_of_regions_has_their_figure():
    r = parse_experiment(MANY, "many.yaml").resolve()
    by_region = {}
    for n in r.nodes:
        by_region.setdefault(n.region, n.name)
    assert r.link(by_region["europe"], by_region["na_east"]).latency_ms == 70.0
    assert r.link(by_region["australia"], by_region["south_africa"]).latency_ms == 220.0
    assert r.link(by_region["south_america"], by_region["south_africa"]).latency_ms == 192.5  # 195 one way, 190 back
    assert len(TEST_PLANS.latency_ms) == 8 * 9 // 2


def test_latency_and_uplink_are_the_presets_own(tmp_path):
    for extra in ("latency: 20", "uplink: 10mbit"):
        path = tmp_path / "x.yaml"
        path.write_text(MANY.replace("links: {preset: test-plans}", f"links: {{preset: test-plans, {extra}}}"))
        proc = subprocess.run([TESTBED, "validate", str(path)], capture_output=True, text=True, timeout=120)
        key = extra.split(":")[0]
        assert proc.returncode == 2 and f"x.yaml:7: links.{key}: preset test-plans gives every link's {key}" \
            in proc.stderr, proc.stderr


def test_the_figures_are_one_way(tmp_path):
    text = """\
name: one-way
seed: 1
groups:
  - {name: eu, count: 1, router: gossipsub, region: europe, uplink: 1gbit}
  - {name: us, count: 1, router: gossipsub, region: na_east, uplink: 1gbit}
overlay: {type: full}
links: {preset: test-plans}
workload: {messages: 3, interval: 1s, start: 2s, size: 100, publishers: {nodes: [eu-0]}}
"""
    simulate(text, tmp_path / "run")
    published = {e.publishMessage.messageID: e.timestamp for e in read_trace(tmp_path / "run" / "traces" / "eu-0.pb")
                 if e.type == TraceType.PUBLISH_MESSAGE}
    delivered = {e.deliverMessage.messageID: e.timestamp for e in read_trace(tmp_path / "run" / "traces" / "us-0.pb")
                 if e.type == TraceType.DELIVER_MESSAGE}
    assert len(published) == 3 and set(delivered) == set(published)
    for mid, t in published.items():
        ms = (delivered[mid] - t) / 1e6
        assert 70.0 <= ms < 71.0, ms  # 70 ms one way, plus < 1 ms of serialization at 1 Gbit/s
