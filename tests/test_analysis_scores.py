"""analysis/scores.py on hand-made score files: the per-second distribution,
a row cut short by a kill, and a run without score files."""

from __future__ import annotations

from pathlib import Path

from analysis.scores import read_scores, score_summary, scores_over_time

HEADER = "time_ns,peer,score,p1,p2,p3,p3b,p4,p5,p6,p7\n"


def _row(t_ns: int, score: float) -> str:
    return f"{t_ns},12D3KooWx,{score},0,0,0,0,0,0,0,0\n"


def test_distribution_per_second_and_a_cut_row_left_out(tmp_path: Path):
    (tmp_path / "scores").mkdir()
    (tmp_path / "scores" / "n0.csv").write_text(HEADER + _row(10_100_000_000, -2.0) + _row(10_900_000_000, 4.0)
                                                + "11500000000,12D3KooWx")
    (tmp_path / "scores" / "n1.csv").write_text(HEADER + _row(10_500_000_000, 1.0) + _row(11_000_000_000, 3.0))
    rows = read_scores(tmp_path)
    assert len(rows) == 4
    table = scores_over_time(rows, t0=10_000_000_000).set_index("t_s")
    assert table.loc[0, ["samples", "negative", "min", "p50", "max"]].tolist() == [3, 1, -2.0, 1.0, 4.0]
    assert table.loc[0, "p10"] == -2.0 + 0.2 * 3.0  # linear between the 1st and 2nd of three
    assert table.loc[1, ["samples", "min", "max"]].tolist() == [1, 3.0, 3.0]
    assert score_summary(rows) == {"samples": 4, "nodes": 2, "negative": 1, "min": -2.0, "p50": 2.0, "max": 4.0}


def test_a_run_without_score_files_has_no_scores(tmp_path: Path):
    rows = read_scores(tmp_path)
    assert score_summary(rows) is None and len(scores_over_time(rows, 0)) == 0
