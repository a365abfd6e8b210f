"""The simulator's sample trace level (docs/simulator.md, "Trace levels"):
a seeded sample of nodes traced in full, exact per-node counts for all.

A sampled run is checked against the full run of the same file and seed,
through the independent count of tests/trace_census.py: the sample's traces
are the full run's files byte for byte, the analysis' (sampled) figures are
the census of the sampled traces, and counters.csv and the `exact` figures
are the census of the full traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import trace_census
from tests.cli_helpers import run_cli
from tests.spark_fixtures import requires_java, spark  # noqa: F401

TESTBED = Path(sys.executable).with_name("testbed")

# 40 gossipsub nodes, a fifth of them churning: restarts make counts that only a
# full run's traces can confirm
EXPERIMENT = """
name: trace-sample
seed: 7
nodes: {count: 40, router: gossipsub, topics: [t]}
overlay: {type: random, degree: 6}
links: {latency: {model: uniform, min_ms: 10, max_ms: 80}}
workload: {messages: 12, interval: 500ms, size: 64, publishers: {nodes: [n0, n1]}}
churn:
  steady: {fraction: 0.2, action: kill, session: {distribution: exponential, mean: 4s},
           downtime: {distribution: exponential, mean: 1s}}
duration: 8s
linger: 2s
"""


@requires_java
@pytest.mark.spark
def test_a_sampled_run_is_the_full_run_seen_through_its_sample(spark, tmp_path):  # noqa: F811
    exp = tmp_path / "trace-sample.yaml"
    exp.write_text(EXPERIMENT)
    full, sampled = tmp_path / "full", tmp_path / "sampled"
    assert run_cli("sim", str(exp), "--out", str(full)) == 0
    assert run_cli("sim", str(exp), "--out", str(sampled), "--trace-sample", "0.25") == 0

    traced = set(json.loads((sampled / "manifest.json").read_text())["trace"]["traced"])
    assert {"n0", "n1"} <= traced and len(traced) <= 12  # 10 drawn, and the publishers
    assert sorted(p.name for p in (sampled / "traces").iterdir()) == sorted(f"{n}.pb" for n in traced)
    for name in traced:
        assert (sampled / "traces" / f"{name}.pb").read_bytes() == (full / "traces" / f"{name}.pb").read_bytes()

    summary = json.loads((sampled / "summary.json").read_text())
    assert summary["trace_level"]["level"] == "sample"
    assert summary["trace_level"]["traced_nodes"] == len(traced)
    trace_census.assert_agrees(sampled, trace_census.count(sampled), summary)

    whole = trace_census.count(full)
    trace_census.assert_counters_agree(sampled, whole)
    exact = summary["exact"]
    assert exact["nodes"] == 40
    assert sum(exact["events"].values()) == whole.records
    assert (exact["expected_deliveries"], exact["deliveries"]) == (whole.expected_deliveries, whole.deliveries)
    assert summary["exact_delivery_ratio"] == pytest.approx(whole.delivery_ratio, abs=1e-6)
    assert summary["exact_latency_p50_ms"] == pytest.approx(whole.latency(0.5), abs=1e-3)
    assert summary["exact_latency_p99_ms"] == pytest.approx(whole.latency(0.99), abs=1e-3)
    assert json.loads((full / "summary.json").read_text())["trace_level"] == {"level": "full"}


def test_the_sample_is_seeded_and_its_counts_are_the_full_runs_without_spark(tmp_path):
    """Without the analysis (no Java needed): the same seed draws the same
    sample, a different one another, and counters.csv is the census of
    the full traces."""
    exp = tmp_path / "trace-sample.yaml"
    exp.write_text(EXPERIMENT)
    runs = {name: tmp_path / name for name in ("full", "a", "b", "other-seed")}
    assert run_cli("sim", str(exp), "--out", str(runs["full"]), "--no-report") == 0
    for name, extra in (("a", ()), ("b", ()), ("other-seed", ("--seed", "8"))):
        assert run_cli("sim", str(exp), "--out", str(runs[name]), "--no-report", "--trace-sample", "0.25", *extra) == 0

    def traced(name: str) -> list[str]:
        return json.loads((runs[name] / "manifest.json").read_text())["trace"]["traced"]

    assert traced("a") == traced("b") != traced("other-seed")
    trace_census.assert_counters_agree(runs["a"], trace_census.count(runs["full"]))


@pytest.mark.parametrize("fraction", ["0", "1", "-0.5", "abc"])
def test_a_trace_sample_outside_0_1_is_refused_with_exit_2(fraction, tmp_path):
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [str(TESTBED), "sim", str(root / "topologies" / "quick.yaml"), "--out", str(tmp_path / "run"),
         "--trace-sample", fraction],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 2, done.stderr
    assert "--trace-sample" in done.stderr
    assert not (tmp_path / "run").exists()
