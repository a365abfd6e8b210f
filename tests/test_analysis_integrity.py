"""Damaged traces and missing run files are counted and reported, never
silently averaged in (issue 9): real trace files from a sim run
(tests/fixtures/analysis_before/quick) are cut mid-record and overwritten
with random bytes; the counts, the report's banner and `--strict`'s exit
status are checked, the last through the installed console script."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import analysis
from analysis.ingest import decode_file
from tests.spark_fixtures import requires_java, worked_example
from tests.spark_fixtures import spark  # noqa: F401

QUICK = Path(__file__).parent / "fixtures" / "analysis_before" / "quick"
TESTBED = Path(sys.executable).parent / "testbed"


def cli(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    return subprocess.run([str(TESTBED), *argv], capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL)


def copy_quick(tmp_path: Path) -> Path:
    """The quick run without its expectations: here only the traces' state
    may decide the exit status."""
    run = tmp_path / "quick"
    shutil.copytree(QUICK, run, ignore=shutil.ignore_patterns("*.before.json"))
    exp = run / "experiment.resolved.yaml"
    doc = yaml.safe_load(exp.read_text())
    doc.pop("expectations", None)
    exp.write_text(yaml.safe_dump(doc))
    return run


def records(path: Path) -> int:
    return decode_file(path, path.with_suffix(".parquet"), path.stem).records


def damage(run: Path) -> None:
    """Cut n3 mid-record, replace n5 by random bytes, splice garbage into
    n9, cut n7 (killed by the run's churn) mid-record."""
    traces = run / "traces"
    for n in ("n3", "n7"):
        data = (traces / f"{n}.pb").read_bytes()
        (traces / f"{n}.pb").write_bytes(data[:-5])
    size = (traces / "n5.pb").stat().st_size
    (traces / "n5.pb").write_bytes(random.Random(5).randbytes(size))
    data = (traces / "n9.pb").read_bytes()
    (traces / "n9.pb").write_bytes(data[:1500] + random.Random(9).randbytes(200) + data[1500:])


def test_decode_counts_cut_corrupt_and_random_files(tmp_path):
    src = QUICK / "traces" / "n3.pb"
    data = src.read_bytes()
    whole = records(shutil.copy(src, tmp_path / "whole.pb"))
    assert whole > 100
    cases = {
        "cut.pb": data[:-5],
        "spliced.pb": data[:1000] + b"\xff" * 64 + data[1000:],
        "random.pb": random.Random(1).randbytes(len(data)),
        "empty.pb": b"",
    }
    got = {}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        got[name] = decode_file(tmp_path / name, tmp_path / f"{name}.parquet", "n3")
    cut = got["cut.pb"]
    assert (cut.records, cut.truncated, cut.corrupt) == (whole - 1, True, 0)
    assert 0 < cut.bytes_skipped < 200
    spliced = got["spliced.pb"]
    assert spliced.corrupt == 1 and not spliced.truncated
    assert whole - 2 <= spliced.records <= whole - 1  # the record the splice split is lost, the rest read
    assert spliced.bytes_skipped >= 64
    rnd = got["random.pb"]
    assert (rnd.records, rnd.corrupt, rnd.bytes_skipped) == (0, 1, len(data))
    empty = got["empty.pb"]
    assert (empty.records, empty.damaged) == (0, False)


def test_json_trace_with_a_bad_line_and_a_cut_last_line(tmp_path):
    b = worked_example(tmp_path / "run")
    root = b.write(fmt="json")
    path = root / "traces" / "A.json"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:-1], lines[-1][:-7]]))
    rep = decode_file(path, tmp_path / "a.parquet", "A")
    assert rep.records == len(lines) - 1
    assert rep.corrupt == 1 and rep.truncated
    assert rep.bytes_skipped == len("{not json") + 1 + len(lines[-1]) - 7


@requires_java
@pytest.mark.spark
def test_damaged_run_is_reported_and_strict_exits_1(tmp_path):
    run = copy_quick(tmp_path)
    damage(run)

    lenient = cli("analyze", str(run), "--json")
    assert lenient.returncode == 0, lenient.stderr
    summary = json.loads(lenient.stdout)
    ti = summary["trace_integrity"]
    assert ti["files"] == 16
    assert ti["truncated"] == 2 and ti["corrupt"] == 2
    assert ti["damaged_nodes"] == ["n3", "n5", "n9"]  # n5's bytes hold no record: named by its file
    assert ti["cut_by_kill"] == ["n7"]
    assert ti["bytes_skipped"] >= (run / "traces" / "n5.pb").stat().st_size + 200
    assert "damaged trace files" in lenient.stderr and "n5" in lenient.stderr

    strict = cli("analyze", str(run), "--strict")
    assert strict.returncode == 1, strict.stderr
    assert "strict" in strict.stderr

    report = cli("report", str(run))
    assert report.returncode == 0, report.stderr
    html = (run / "report.html").read_text()
    assert "Damaged traces:" in html
    assert "n3, n5, n9" in html


@requires_java
@pytest.mark.spark
def test_strict_traces_option_of_the_experiment(tmp_path, spark):  # noqa: F811
    run = copy_quick(tmp_path)
    data = (run / "traces" / "n3.pb").read_bytes()
    (run / "traces" / "n3.pb").write_bytes(data[:-5])
    from cli.main import app

    assert CliRunner().invoke(app, ["analyze", str(run)]).exit_code == 0
    exp = run / "experiment.resolved.yaml"
    exp.write_text(exp.read_text() + "strict_traces: true\n")
    assert CliRunner().invoke(app, ["analyze", str(run)]).exit_code == 1


@requires_java
@pytest.mark.spark
def test_missing_run_files_are_named_with_what_they_cost(tmp_path, spark):  # noqa: F811
    b = worked_example(tmp_path / "run")
    b.manifest = None
    root = b.write(with_events=False, with_topology=False)
    s = analysis.run_analysis(root)
    missing = {m["file"]: m["affects"] for m in s["missing_files"]}
    assert set(missing) == {"manifest.json", "topology.json", "events.jsonl"}
    assert "lower bound" in missing["topology.json"]
    assert "churn" in missing["events.jsonl"]
    assert s["lower_bound_available"] is False
    out = analysis.write_report([root], root / "report.html")
    html = out.read_text()
    for name in missing:
        assert f"No {name}:" in html
    whole = worked_example(tmp_path / "whole").write()
    assert analysis.run_analysis(whole)["missing_files"] == []
