"""The background warm-up's bookkeeping (analysis/warming.py), without a
Spark server: what `testbed spark status` reads while it runs and after its
process is gone, and that `spark stop` ends it."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from analysis import warming


def _detached_sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_running_warm_up_reads_as_running_and_stop_ends_it(tmp_path):
    proc = _detached_sleeper()
    warming._write(tmp_path, warming.Warming(proc.pid, warming.Phase(2, 1.5, 1.2)))
    assert warming.read(tmp_path) == warming.Warming(proc.pid, warming.Phase(2, 1.5, 1.2))
    warming.stop(tmp_path)
    assert proc.wait(timeout=10) == -15  # SIGTERM
    assert warming.read(tmp_path) is None


def test_a_warm_up_whose_process_died_reads_as_done_with_an_error(tmp_path):
    proc = _detached_sleeper()
    proc.kill()
    proc.wait()
    warming._write(tmp_path, warming.Warming(proc.pid, warming.Phase(1, 2.0, 2.0)))
    read = warming.read(tmp_path)
    assert read.done and read.small.runs == 1 and "ended before it finished" in read.error


def test_keep_warming_against_no_server_stops_at_once_and_says_why(tmp_path):
    began = time.monotonic()
    done = warming.keep_warming(tmp_path, "sc://127.0.0.1:1")
    assert time.monotonic() - began < 60
    assert done.done and done.small.runs == 0 and "no Spark Connect server answers" in done.error
    assert warming.read(tmp_path) == done
    assert done.pid == os.getpid()


def test_keep_warming_starts_no_run_while_an_analysis_holds_the_server(tmp_path):
    finished = threading.Event()
    warm_up = threading.Thread(target=lambda: (warming.keep_warming(tmp_path, "sc://127.0.0.1:1"), finished.set()))
    with warming.analysing(tmp_path), warming.analysing(tmp_path):  # two analyses at once
        warm_up.start()
        assert not finished.wait(2.0)
        assert warming.read(tmp_path) is None  # not one run recorded
    assert finished.wait(60)
    assert "no Spark Connect server answers" in warming.read(tmp_path).error


def test_no_warm_up_reads_as_none(tmp_path):
    assert warming.read(tmp_path) is None
    warming.stop(tmp_path)  # nothing to stop


@pytest.mark.parametrize("content", ["", "{", '{"runs": 1}'])
def test_a_damaged_state_file_reads_as_none(tmp_path, content):
    (tmp_path / warming.STATE_FILE).write_text(content)
    assert warming.read(tmp_path) is None


def test_a_detached_warm_up_against_no_server_ends_and_records_why(tmp_path):
    started = warming.detach(tmp_path, "sc://127.0.0.1:1")
    deadline = time.monotonic() + 120
    while not (read := warming.read(tmp_path)).done and time.monotonic() < deadline:
        time.sleep(0.2)
    assert read.pid == started.pid and read.small.runs == 0
    assert "no Spark Connect server answers" in read.error  # its own record, not "ended before it finished"


def test_an_experiment_holds_the_warm_up_off_only_while_a_server_is_up(tmp_path, monkeypatch):
    """`testbed run` wraps each experiment in experiment_running: with the
    local server up, the warm-up's exclusive lock cannot be had meanwhile."""
    import fcntl

    from analysis import endpoint

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))

    def warm_up_could_start() -> bool:
        with open(tmp_path / warming.BUSY_FILE, "a") as busy:
            try:
                fcntl.flock(busy, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

    monkeypatch.setattr(endpoint, "running", lambda state_dir: object())
    with endpoint.experiment_running(tmp_path):
        assert not warm_up_could_start()
    assert warm_up_could_start()
    monkeypatch.setattr(endpoint, "running", lambda state_dir: None)
    with endpoint.experiment_running(tmp_path):  # no server: nothing to hold off
        assert warm_up_could_start()
