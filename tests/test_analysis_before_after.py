"""The analysis computes today exactly what it computed before its rework
(issue 14): two committed sim runs (tests/fixtures/analysis_before) are
analysed again and every figure of summary.json and every row of every
metrics table must equal what main's code wrote then. Figures added since
are allowed; changed or missing ones are not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import analysis
import analysis.ingest
import analysis.metrics
from tests.spark_fixtures import requires_java
from tests.spark_fixtures import spark  # noqa: F401

FIXTURES = Path(__file__).parent / "fixtures" / "analysis_before"
# wall time and the expectation messages' wording are not results
VOLATILE = {"analysis_wall_s"}


def _same(a, b, where: str) -> None:
    if isinstance(b, dict):
        assert isinstance(a, dict), where
        for k, v in b.items():
            assert k in a, f"{where}.{k} is missing"
            _same(a[k], v, f"{where}.{k}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _records(path: Path, columns: list[str]) -> list[dict]:
    df = pd.read_parquet(path)
    assert set(columns) <= set(df.columns), f"{path.name}: columns {set(columns) - set(df.columns)} missing"
    recs = json.loads(df[columns].to_json(orient="records"))
    return sorted(recs, key=lambda r: json.dumps(r, sort_keys=True))


@requires_java
@pytest.mark.spark
@pytest.mark.parametrize("name", ["quick", "ci"])
@pytest.mark.parametrize("handled_as", ["small", "large"])
def test_summary_and_tables_unchanged(tmp_path, spark, name, handled_as, monkeypatch):  # noqa: F811
    """Tiny runs go to Spark as the decoded table and interpret Spark's
    expressions; larger ones are scanned from Parquet files and compile
    them: both give main's figures."""
    if handled_as == "large":
        monkeypatch.setattr(analysis.metrics, "INTERPRETED_MAX_EVENTS", 0)
        monkeypatch.setattr(analysis.ingest, "IN_MEMORY_MAX_EVENTS", 0)
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run, ignore=shutil.ignore_patterns("*.before.json"))
    after = analysis.run_analysis(run)
    before = json.loads((FIXTURES / name / "summary.before.json").read_text())
    for key in VOLATILE:
        before.pop(key)
    _same(after, before, "summary")
    tables = json.loads((FIXTURES / name / "metrics.before.json").read_text())
    for table, want in tables.items():
        got = _records(run / "metrics" / f"{table}.parquet", want["columns"])
        _same(got, want["rows"], table)
