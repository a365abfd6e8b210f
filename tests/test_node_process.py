"""The daemon as a process (`python -m node`, `testbed node`): SIGKILL loses
nothing the router traced, SIGTERM is a graceful exit 0 with LEAVE and
the lag file, a bad config is one clear error."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from node.config import NodeConfig
from node.engine.api import TraceType
from node.runtime.client import ControlClient
from node.trace.file import read_trace

TESTBED = Path(sys.executable).with_name("testbed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp: Path, cli: bool = False) -> tuple[subprocess.Popen, NodeConfig, ControlClient]:
    cfg = NodeConfig(
        name="solo", index=0, router="gossipsub", seed=1, listen_host="127.0.0.1", listen_port=free_port(),
        control_host="127.0.0.1", control_port=free_port(), token="tok", trace_path=str(tmp / "solo.pb"),
        topics=("t",),
    )
    path = tmp / "solo.json"
    path.write_text(cfg.to_json())
    cmd = [str(TESTBED), "node", "--config", str(path)] if cli else [sys.executable, "-m", "node", "--config", str(path)]
    proc = subprocess.Popen(cmd, stderr=open(tmp / "solo.log", "wb"))
    client = ControlClient("127.0.0.1", cfg.control_port, "tok")
    deadline = time.monotonic() + 15
    while client.try_call("status") is None:
        assert proc.poll() is None, (tmp / "solo.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc, cfg, client


def test_sigkill_loses_nothing_traced(tmp_path):
    proc, cfg, client = start(tmp_path)
    try:
        # killed as soon as the last publish is answered: its events were written before the answer
        mids = [client.call("publish", topic="t", size=10)["message_id"] for _ in range(5)]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    published = [ev.publishMessage.messageID.hex() for ev in read_trace(Path(cfg.trace_path))
                 if ev.type == TraceType.PUBLISH_MESSAGE]
    assert published == mids


def test_a_trace_that_cannot_be_written_is_exit_1_and_one_error_line(tmp_path):
    cfg = NodeConfig(
        name="solo", index=0, router="gossipsub", seed=1, listen_host="127.0.0.1", listen_port=free_port(),
        control_host="127.0.0.1", control_port=free_port(), token="tok", trace_path="/dev/full",  # ENOSPC
        topics=("t",), lag_path=str(tmp_path / "solo.lag.json"),
    )
    (tmp_path / "solo.json").write_text(cfg.to_json())
    proc = subprocess.run([sys.executable, "-m", "node", "--config", str(tmp_path / "solo.json")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "solo cannot write its trace: [Errno 28] No space left on device; stopping" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sigterm_is_a_graceful_exit(tmp_path):
    proc, cfg, client = start(tmp_path, cli=True)
    status = client.call("status")
    assert status["name"] == "solo" and status["topics"] == ["t"]
    time.sleep(0.3)  # a few ticks of the lag meter
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    types = [ev.type for ev in read_trace(Path(cfg.trace_path))]
    assert types[0] == TraceType.JOIN and types[-1] == TraceType.LEAVE
    lag = json.loads(Path(cfg.trace_path + ".lag.json").read_text())
    assert lag["node"] == "solo" and lag["samples"] > 0


def test_a_stall_after_the_lag_window_ends_is_not_in_the_lag(tmp_path):
    """The router frozen for 1.5 s (SIGSTOP) while its window is open: the
    heartbeat due then is that late in its lag. In a new window, closed by
    `end_lag` before the same stall, it is not, neither in `status` nor in
    the lag file written at exit."""

    def stall() -> None:
        proc.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        proc.send_signal(signal.SIGCONT)
        time.sleep(1.5)  # the late heartbeat, and the next one

    proc, cfg, client = start(tmp_path)
    try:
        stall()
        assert client.call("status")["lag"]["max_ms"] >= 400
        client.call("status", reset_lag=True)
        time.sleep(1.2)  # a heartbeat in the new window
        closed = client.call("status", end_lag=True)["lag"]
        assert closed["samples"] >= 1 and closed["max_ms"] < 400 and not closed["ended"]
        stall()
        after = client.call("status")["lag"]
        assert after["ended"] and after["samples"] == closed["samples"] and after["max_ms"] == closed["max_ms"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    written = json.loads(Path(cfg.trace_path + ".lag.json").read_text())
    assert written["ended"] and written["samples"] == closed["samples"] and written["max_ms"] < 400


def test_shutdown_command_exits_zero(tmp_path):
    proc, cfg, client = start(tmp_path)
    assert client.call("shutdown")["ok"]
    assert proc.wait(timeout=10) == 0
    # `python -m node` leaves without the interpreter's finalization: what it
    # keeps is still whole, down to the log's last line
    assert [ev.type for ev in read_trace(Path(cfg.trace_path))][-1] == TraceType.LEAVE
    assert "solo stopped (" in (tmp_path / "solo.log").read_text().splitlines()[-1]


def test_bad_config_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "node", "--config", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2 and "cannot load node config" in out.stderr
