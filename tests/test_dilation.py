"""Time dilation (node/dilation.py, orchestrator/run/wallclock.py): an experiment
run k times slower on the wall clock, recorded on its own clock. The
arithmetic, what the wall clock runs, the file's checks as the installed
command reports them, and a whole run on the process backend."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest

from node.config import NodeConfig
from node.dilation import DilatedClock
from orchestrator.experiment.spec import parse_experiment, resolved_to_yaml
from orchestrator.run.wallclock import on_wall_clock
from tests.spark_fixtures import requires_java
from tests.test_exit_codes import cli

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = """\
name: dilated
seed: 5
groups:
  - name: a
    count: 3
    router: gossipsub
    router_params: {D: 2, D_low: 1, D_high: 3}
    topics: [t]
    uplink: 8mbit
  - name: b
    count: 3
    router: gossipsub
    router_params: {D: 2, D_low: 1, D_high: 3}
    topics: [t]
overlay: {type: random_regular, degree: 2}
links:
  latency: {model: uniform, min_ms: 10, max_ms: 50}
  jitter_ms: 2
  loss: 0.01
workload: {topic: t, messages: 3, interval: 200ms, size: 64, publishers: {nodes: [a-0]}}
churn:
  timeline:
    - {at: 100ms, action: kill, select: {nodes: [b-2]}, for: 300ms}
linger: 1s
time_dilation: 4
"""


def test_the_experiments_clock_runs_k_times_slower_from_the_epoch():
    clock = DilatedClock(epoch_ns=10**12, factor=4.0)
    assert clock.virtual_ns(10**12) == 10**12
    assert clock.virtual_ns(10**12 + 4_000_000) == 10**12 + 1_000_000
    assert clock.wall_s(0.25) == 1.0
    assert DilatedClock().virtual_ns(123) == 123  # undilated: the wall clock itself


@pytest.mark.parametrize("factor", [0.5, 0.0, -1.0, 1001.0])
def test_a_dilation_out_of_range_is_refused(factor):
    with pytest.raises(ValueError, match="time dilation"):
        DilatedClock(0, factor)


def test_a_node_config_carries_its_clock():
    cfg = NodeConfig(name="n0", router="gossipsub", seed=1, listen_host="127.0.0.1", listen_port=1,
                     control_host="127.0.0.1", control_port=2, token="t", trace_path="/tmp/x.pb", index=0,
                     time_dilation=8.0, clock_epoch_ns=42)
    again = NodeConfig.from_json(cfg.to_json())
    assert again.clock == DilatedClock(42, 8.0)


def test_the_wall_clock_slows_times_links_and_rates_and_nothing_else():
    resolved = parse_experiment(EXPERIMENT, "dilated.yaml").resolve()
    wall = on_wall_clock(resolved)
    assert [p.at for p in wall.publishes] == [p.at * 4 for p in resolved.publishes]
    assert [c.at for c in wall.churn] == [c.at * 4 for c in resolved.churn] and wall.churn
    assert (wall.duration, wall.linger, wall.end_time()) == (
        resolved.duration * 4, resolved.linger * 4, resolved.end_time() * 4)
    for a, b in [*resolved.edges, ("a-0", "b-1"), ("a-1", "a-2")]:  # overlay edges and pairs outside it
        written, slowed = resolved.link(a, b), wall.link(a, b)
        assert (slowed.latency_ms, slowed.jitter_ms, slowed.loss) == (
            written.latency_ms * 4, written.jitter_ms * 4, written.loss)
    assert wall.default_link.latency_ms == resolved.default_link.latency_ms * 4
    assert [n.uplink_bps for n in wall.nodes] == [2_000_000] * 3 + [None] * 3
    same = ("edges", "seed", "expectations", "security", "authenticity", "message_id", "time_dilation")
    assert all(getattr(wall, f) == getattr(resolved, f) for f in same)
    assert [(n.name, n.seed, n.params) for n in wall.nodes] == [(n.name, n.seed, n.params) for n in resolved.nodes]
    undilated = parse_experiment(EXPERIMENT.replace("time_dilation: 4\n", ""), "plain.yaml").resolve()
    assert on_wall_clock(undilated) is undilated


def test_a_kernel_with_netem_is_given_the_slowed_links(tmp_path):
    """What `testbed up` asks a netem kernel to apply (a stand-in backend
    that records it): every neighbour's delay and jitter k times the written,
    the same loss, the uplink's rate 1/k; the routers shape nothing."""
    path = tmp_path / "dilated.yaml"
    path.write_text(EXPERIMENT)
    out = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state"),
           "TESTBED_BACKENDS": "netem=tests.fake_backend:NetemBackend", "PYTHONPATH": str(ROOT)}
    up = cli("up", str(path), "--backend", "netem", "--name", "dil", "--out", str(out), env=env)
    down = cli("down", "dil", env=env)
    assert up.returncode == 0 and down.returncode == 0, up.stderr[-3000:] + down.stderr[-3000:]
    asked = {row["node"]: row for row in map(json.loads, (out / "kernel-shaping.jsonl").read_text().splitlines())}
    written = parse_experiment(EXPERIMENT, "dilated.yaml").resolve()
    assert set(asked) == {n.name for n in written.nodes}
    for name, peers in written.neighbours().items():
        assert asked[name]["uplink_bps"] == (2_000_000 if name.startswith("a-") else None)
        assert sorted(asked[name]["per_peer"]) == peers
        for peer, shape in asked[name]["per_peer"].items():
            link = written.link(name, peer)
            assert (shape["delay_ms"], shape["jitter_ms"], shape["loss"]) == pytest.approx(
                (link.latency_ms * 4, link.jitter_ms * 4, link.loss))
    told = [json.loads(line) for line in (out / "user-shaping.jsonl").read_text().splitlines()]
    assert len(told) == len(asked) and not any(row["uplink_bps"] for row in told)
    own = [shape for row in told for shape in [*row["per_peer"].values(), row["default"]]]
    assert not any(v for shape in own for v in shape.values()), own


def test_the_resolved_file_keeps_the_dilation():
    exp = parse_experiment(EXPERIMENT, "dilated.yaml")
    resolved = exp.resolve()
    again = parse_experiment(resolved_to_yaml(resolved, exp), "again.yaml").resolve()
    assert again.time_dilation == 4.0
    assert again.digest() == resolved.digest()
    plain = parse_experiment(EXPERIMENT.replace("time_dilation: 4\n", ""), "plain.yaml").resolve()
    assert plain.digest() != resolved.digest()


@pytest.mark.parametrize("value, says", [
    ("0.5", "time_dilation: expected a time dilation factor >= 1, got 0.5"),
    ("fast", "time_dilation: expected a time dilation factor, got"),
    ("5000", "time_dilation: expected a time dilation factor <= 1000, got 5000"),
])
def test_a_bad_dilation_is_one_error_naming_file_line_and_field(tmp_path, value, says):
    path = tmp_path / "bad.yaml"
    path.write_text(EXPERIMENT.replace("time_dilation: 4", f"time_dilation: {value}"))
    done = cli("validate", str(path))
    assert done.returncode == 2
    assert f"{path}:{EXPERIMENT.splitlines().index('time_dilation: 4') + 1}: {says}" in done.stderr
    assert "Traceback" not in done.stderr


def test_foreign_routers_cannot_be_dilated(tmp_path):
    path = tmp_path / "foreign.yaml"
    path.write_text("name: f\nnodes: {count: 3, router: rust-libp2p, topics: [t]}\noverlay: {type: full}\n"
                    "wire: {message_id: first-8-bytes}\ntime_dilation: 2\n")
    done = cli("validate", str(path))
    assert done.returncode == 2
    assert f"{path}:5: time_dilation: group 'default' runs a foreign router (rust-libp2p)" in done.stderr


RUN = """\
name: dilated-run
seed: 3
nodes: {count: 4, router: gossipsub, router_params: {D: 3, D_low: 2, D_high: 4}, topics: [t]}
overlay: {type: full}
links:
  latency: {model: constant, ms: 40}
workload: {topic: t, messages: 6, interval: 500ms, size: 64, publishers: {nodes: [n0]}}
expectations:
  - delivery_ratio >= 0.99
  - latency_p50_ms >= 30
  - latency_p50_ms < 120
linger: 2s
time_dilation: 5
"""


@requires_java
def test_a_dilated_run_goes_k_times_slower_and_reads_at_the_written_speed(tmp_path):
    """Links 40 ms written, 200 ms on the wall: the latency measured is the
    written one, the publishes are spaced as written in the run's log, the
    run took k times as long on the wall clock, and the routers' heartbeats
    (their lag samples, one a heartbeat) came k times less often."""
    path = tmp_path / "dilated.yaml"
    path.write_text(RUN)
    out = tmp_path / "run"
    done = cli("run", str(path), "--backend", "process", "--out", str(out), "--json",
               env={**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr[-3000:]
    checks = {e["expr"]: e for e in json.loads(done.stdout)["expectations"][str(out)]}
    assert all(e["passed"] for e in checks.values()), checks
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["time_dilation"] == 5.0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    published = [e["t_ns"] for e in events if e["kind"] == "publish"]
    gaps_ms = [(b - a) / 1e6 for a, b in zip(published, published[1:])]
    assert len(published) == 6 and all(450 <= g <= 550 for g in gaps_ms), gaps_ms
    workload_s = 5 * 0.5 + 2  # the last publish at 2.5 s, then the linger
    assert manifest["wall_time_s"] >= 5 * workload_s
    samples = [json.loads((out / "node-logs" / f"n{i}.lag.json").read_text())["samples"] for i in range(4)]
    heartbeats_if_dilated = manifest["wall_time_s"] / 5  # gossipsub's 1 s heartbeat, 5 s on the wall
    assert statistics.median(samples) <= heartbeats_if_dilated + 1, (samples, manifest["wall_time_s"])
    at_up = manifest["event_loop_lag_at_up"]["per_node"]  # the start-up's lag, apart from the run's
    assert set(at_up) == {f"n{i}" for i in range(4)} and all(v["samples"] >= 1 for v in at_up.values())
    report = (out / "report.html").read_text()
    assert "time dilation" in report and "burst load" in report


def test_a_dilated_testbed_keeps_its_clock_from_one_command_to_the_next(tmp_path):
    """`up`, `publish` and `down` as three commands: the later two rebuild the
    clock from the testbed's record, so their events are on the experiment's
    clock (k times closer than on the wall) and `--interval` is experiment
    seconds. Without the record's clock the publishes would be logged 2 s
    apart (the wall), without the interval's 80 ms."""
    path = tmp_path / "dilated.yaml"
    path.write_text(RUN)
    out = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    up = cli("up", str(path), "--backend", "process", "--name", "dil", "--out", str(out), env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        started = time.monotonic()
        published = cli("publish", "dil", "--node", "n0", "--count", "3", "--interval", "0.4", "--json", env=env)
        assert published.returncode == 0, published.stderr[-3000:]
        assert len(json.loads(published.stdout)["message_ids"]) == 3
    finally:
        down = cli("down", "dil", env=env)
    wall_s = time.monotonic() - started
    assert down.returncode == 0, down.stderr[-3000:]
    assert wall_s >= 5 * 0.8  # the two intervals, on the wall
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    at = {e["kind"]: e["t_ns"] for e in events}
    publishes = [e["t_ns"] for e in events if e["kind"] == "publish"]
    gaps_ms = [(b - a) / 1e6 for a, b in zip(publishes, publishes[1:])]
    assert len(gaps_ms) == 2 and all(370 <= g <= 470 for g in gaps_ms), gaps_ms
    assert (at["run_end"] - at["all_up"]) / 1e9 <= (wall_s + 5) / 5  # 5 s of the wall for the end of `up`
    assert json.loads((out / "manifest.json").read_text())["time_dilation"] == 5.0
