"""The analysis' figures against an independent count of the raw traces
(tests/trace_census.py), on every path the events take into Spark:

- one trace file, one chunk, in memory;
- 100 nodes in memory (one chunk per node's file), cold, through the CLI;
- in this process at a warm session: in memory, and Parquet written in this
  process (a run above IN_MEMORY_MAX_EVENTS);
- a run above the multi-process threshold (decoded by a pool, Parquet),
  with kills and restarts, so that restarted nodes DELIVER again;
- a node's trace cut mid-record (killed mid-write);
- a running `testbed spark start` server (tests/test_analysis_spark_connect.py).

Issue 38: a 100-node run's analysis kept one Arrow chunk of 101 (469 of
30,993 events) and reported delivery 0.01; the small fixtures never took
that path. The last test puts that defect back and checks that the analysis
refuses to report (exit 3) rather than report figures from part of the data.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import trace_census
from tests.cli_helpers import run_cli
from tests.spark_fixtures import requires_java, spark  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ROOT / "topologies"
TESTBED = Path(sys.executable).with_name("testbed")

RESTARTS = textwrap.dedent("""\
    name: restarts-20
    seed: 3
    nodes: {count: 20, router: gossipsub, topics: [t]}
    overlay: {type: random, degree: 4}
    links:
      latency: {model: uniform, min_ms: 10, max_ms: 60}
    workload:
      messages: 40
      interval: 200ms
      size: 64
      publishers: {nodes: [n0, n1]}
    churn:
      timeline:
        - {at: 2s, action: kill, select: [n5, n6], for: 1500ms}
        - {at: 4500ms, action: kill, select: [n7], for: 1s}
    linger: 3s
    """)

pytestmark = [requires_java, pytest.mark.spark]


def simulate(file: Path, out: Path) -> Path:
    assert run_cli("sim", str(file), "--out", str(out), "--no-report") == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Simulated runs, each analysed by the tests below from a copy."""
    base = tmp_path_factory.mktemp("differential")
    restarts = base / "restarts.yaml"
    restarts.write_text(RESTARTS)
    return {
        "smoke": simulate(TOPOLOGIES / "ci-smoke.yaml", base / "smoke"),
        "simsub-100": simulate(TOPOLOGIES / "simsub-100.yaml", base / "simsub-100"),
        "restarts": simulate(restarts, base / "restarts"),
        "churn-30": simulate(TOPOLOGIES / "churn-30.yaml", base / "churn-30"),
    }


def fresh(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / run.name
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns("metrics", "summary.json", "report.html"))
    return dst


@pytest.fixture
def paths(monkeypatch) -> list[str]:
    """Which way each analysis handed the events to Spark."""
    import analysis.metrics as metrics

    taken: list[str] = []
    real = metrics.events_frame

    def spy(spark_session, ingested):
        taken.append("memory" if ingested.table is not None else "parquet")
        return real(spark_session, ingested)

    monkeypatch.setattr(metrics, "events_frame", spy)
    return taken


def analyse(run: Path, traces: Path | None = None) -> dict:
    from analysis import run_analysis

    return run_analysis(run, traces=traces)


def test_one_trace_file_in_one_chunk(runs, spark, tmp_path, paths):  # noqa: F811
    """Every node's events in one file (as a collector may hand them over):
    one table of one chunk, in memory."""
    run = fresh(runs["smoke"], tmp_path)
    merged = tmp_path / "merged"
    merged.mkdir()
    with (merged / "all.pb").open("wb") as out:
        for f in sorted((run / "traces").glob("*.pb")):
            out.write(f.read_bytes())
    summary = analyse(run, traces=merged)
    assert paths == ["memory"] and summary["trace_files"] == 1
    census = trace_census.count(run, merged)
    assert census.records > 0 and len(census.nodes_with_records) == 8
    trace_census.assert_agrees(run, census, summary)


def test_a_hundred_nodes_cold_through_the_cli(runs, tmp_path):
    """The issue's own reproduction: `testbed sim topologies/simsub-100.yaml`
    exits 0 (its expectation holds) with every one of its 1,000 DELIVER
    events counted, on a new JVM."""
    out = tmp_path / "simsub-100"
    done = subprocess.run([str(TESTBED), "sim", str(TOPOLOGIES / "simsub-100.yaml"), "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["deliver_events"] == 1000 and summary["delivery_ratio"] == 1
    trace_census.assert_agrees(out, trace_census.count(out), summary)


def test_a_hundred_nodes_in_memory_at_a_warm_session(runs, spark, tmp_path, paths):  # noqa: F811
    run = fresh(runs["simsub-100"], tmp_path)
    analyse(run)
    assert paths == ["memory"]
    trace_census.assert_agrees(run, trace_census.count(run))


def test_restarted_nodes_deliver_again_in_memory_and_from_parquet(runs, spark, tmp_path, paths,  # noqa: F811
                                                                 monkeypatch):
    """Restarted nodes lost their seen-cache and DELIVER some messages again:
    deliveries count each (node, message) once, both ways into Spark."""
    import analysis.ingest as ingest

    census = trace_census.count(runs["restarts"])
    assert census.repeated_delivers > 0 and census.unexpected_deliveries > 0
    in_memory = fresh(runs["restarts"], tmp_path / "a")
    analyse(in_memory)
    trace_census.assert_agrees(in_memory, census)
    monkeypatch.setattr(ingest, "IN_MEMORY_MAX_EVENTS", census.records - 1)
    parquet = fresh(runs["restarts"], tmp_path / "b")
    analyse(parquet)
    trace_census.assert_agrees(parquet, census)
    assert paths == ["memory", "parquet"]


def test_above_the_pool_threshold_with_churn(runs, spark, tmp_path, paths):  # noqa: F811
    """churn-30 at its full size: more trace bytes than one process decodes
    and more events than are handed over in memory, with 30 nodes killed
    and restarted throughout."""
    import analysis.ingest as ingest

    run = fresh(runs["churn-30"], tmp_path)
    trace_bytes = sum(f.stat().st_size for f in (run / "traces").iterdir())
    assert trace_bytes > ingest.POOL_THRESHOLD_BYTES
    census = trace_census.count(run)
    assert census.records > ingest.IN_MEMORY_MAX_EVENTS and census.repeated_delivers > 0
    analyse(run)
    assert paths == ["parquet"]
    trace_census.assert_agrees(run, census)


def test_a_trace_cut_mid_record(runs, spark, tmp_path, paths):  # noqa: F811
    """A node killed while writing: its last record is cut short. The
    analysis counts every whole record, as the census does, and says the
    file was cut."""
    run = fresh(runs["restarts"], tmp_path)
    victim = run / "traces" / "n9.pb"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) - 7])
    summary = analyse(run)
    census = trace_census.count(run)
    assert census.records == trace_census.count(runs["restarts"]).records - 1
    assert summary["trace_integrity"]["damaged_nodes"] == ["n9"]
    trace_census.assert_agrees(run, census, summary)


LOSE_EMPTY_BATCHES = textwrap.dedent("""\
    # Puts issue 38's defect back: the trace tables handed to Spark in
    # chunks as they were decoded, empty ones included.
    import pyarrow as pa
    import analysis.ingest as ingest
    ingest.in_memory_table = lambda tables: pa.concat_tables(tables) if tables else ingest.rows_table([])
    """)


def test_lost_events_fail_with_exit_3_naming_both_counts(runs, tmp_path):
    """With the chunking defect put back (a sitecustomize on PYTHONPATH, so
    the installed console script runs it), `testbed analyze` of the
    100-node run refuses to report: exit 3, both counts named, no summary
    written."""
    run = fresh(runs["simsub-100"], tmp_path)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(LOSE_EMPTY_BATCHES)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{hook}:{ROOT}"}
    done = subprocess.run([str(TESTBED), "analyze", str(run)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    records = trace_census.count(run).records
    assert f"ingest decoded {records} trace records" in done.stderr
    assert "no figures are reported from partial data" in done.stderr
    assert not (run / "summary.json").exists()
