"""The fidelity figures (analysis/fidelity.py) from router-cpu.json samples
(orchestrator/records/router_cpu.py): rest and per-delivery CPU are separated, a
restarted router's window is left out, and the budget follows the host's
cores; plus the /proc reader on a live process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from analysis.fidelity import FAITHFUL_SHARE, fidelity
from orchestrator.records.router_cpu import FILE, proc_cpu_seconds, read_samples, record_sample

S = 1_000_000_000


def write(run: Path, samples: list[tuple[str, float, dict[str, float]]], cpus: int = 2) -> None:
    doc = {"source": "test", "host_cpus": cpus,
           "samples": [{"at": at, "t_ns": round(t * S), "cpu_s": cpu} for at, t, cpu in samples]}
    (run / FILE).write_text(json.dumps(doc))


def test_rest_and_per_delivery_are_separated_and_give_the_budget(tmp_path):
    # a: 5 ms/s at rest over 10 s; over the 20 s load window 100 ms of rest
    # plus 100 deliveries at 2 ms each = 0.3 s
    write(tmp_path, [("up", 0, {"a": 1.0, "b": 2.0}), ("workload", 10, {"a": 1.05, "b": 2.05}),
                     ("down", 30, {"a": 1.35, "b": 2.35})])
    lag = {"per_node": {"a": {"p50_ms": 1.0, "p99_ms": 4.0, "max_ms": 9.0}}}
    f = fidelity(tmp_path, {"event_loop_lag": lag}, {"a": 100, "b": 100})
    a = f["per_node"][0]
    assert a["node"] == "a" and a["cpu_s"] == pytest.approx(0.35)
    assert a["rest_ms_per_s"] == pytest.approx(5.0)
    assert a["ms_per_delivery"] == pytest.approx(2.0)
    assert a["load_ms_per_s"] == pytest.approx(15.0)
    assert a["lag_p99_ms"] == 4.0 and f["per_node"][1]["lag_p99_ms"] is None
    assert f["deliveries_per_router_s"] == pytest.approx(5.0)
    assert f["ms_per_router_s_at_rate"] == pytest.approx(15.0)
    assert f["budget_at_rate"] == int(2 * FAITHFUL_SHARE * 1000 / 15.0)
    assert f["budget_at_rest"] == int(2 * FAITHFUL_SHARE * 1000 / 5.0)


@pytest.mark.parametrize("dilation", [1.0, 4.0])
def test_the_burst_is_one_message_over_what_the_cores_give_while_it_spreads(tmp_path, dilation):
    """10 routers at 20 ms a delivery: a message costs them 200 ms of CPU.
    It spreads at the network's speed in latency p50 / stretch p50 = 50 ms
    (x the dilation on the wall), where two cores at FAITHFUL_SHARE give 70 ms
    x the dilation: the load is 200 / that, and the dilation at which it fits
    is the same whatever the run's own was."""
    nodes = [f"n{i}" for i in range(10)]
    write(tmp_path, [("up", 0, {n: 0.0 for n in nodes}), ("workload", 10, {n: 0.0 for n in nodes}),
                     ("down", 30, {n: 2.0 for n in nodes})])  # 100 deliveries each, 20 ms a delivery
    manifest = {"time_dilation": dilation} if dilation != 1.0 else {}
    delivered = {n: 100 for n in nodes}
    f = fidelity(tmp_path, manifest, delivered, latency_p50_ms=150.0, stretch_p50=3.0)
    assert f["ms_per_delivery"] == pytest.approx(20.0) and f["burst_cpu_ms"] == pytest.approx(200.0)
    assert f["burst_spread_ms"] == pytest.approx(50.0 * dilation)
    assert f["burst_spread_from"] == "latency p50 / stretch p50"
    assert f["burst_load"] == pytest.approx(200.0 / (2 * FAITHFUL_SHARE * 50.0 * dilation))
    assert f["dilation_for_burst"] == pytest.approx(200.0 / (2 * FAITHFUL_SHARE * 50.0))
    # without the stretch the latency itself stands in (inflated under overload: a lower bound)
    bare = fidelity(tmp_path, manifest, delivered, latency_p50_ms=150.0)
    assert bare["burst_spread_ms"] == pytest.approx(150.0 * dilation) and bare["burst_spread_from"] == "latency p50"
    unknown = fidelity(tmp_path, manifest, delivered)  # no latency: no burst figures but its CPU
    assert unknown["burst_cpu_ms"] == pytest.approx(200.0)
    assert unknown["burst_load"] is None and unknown["dilation_for_burst"] is None
    # two topics, each message to half the routers: 1,000 deliveries of 200 messages
    half = fidelity(tmp_path, manifest, delivered, latency_p50_ms=150.0, messages=200, stretch_p50=3.0)
    assert half["burst_cpu_ms"] == pytest.approx(100.0)


def test_a_router_restarted_in_a_window_is_left_out_of_it(tmp_path):
    write(tmp_path, [("up", 0, {"a": 1.0, "b": 1.0}), ("workload", 10, {"a": 1.1, "b": 0.2}),
                     ("down", 20, {"a": 1.2, "b": 0.4})])
    rows = {r["node"]: r for r in fidelity(tmp_path, {}, {"a": 10, "b": 10})["per_node"]}
    assert rows["b"]["rest_ms_per_s"] is None and rows["b"]["cpu_s"] is None
    assert rows["b"]["load_ms_per_s"] == pytest.approx(20.0)
    assert rows["a"]["rest_ms_per_s"] == pytest.approx(10.0)


def test_no_cpu_file_means_no_section(tmp_path):
    assert fidelity(tmp_path, {}, {}) is None


def test_samples_are_recorded_in_moment_order_and_replaced(tmp_path):
    record_sample(tmp_path, "down", {"a": 3.0}, "src")
    record_sample(tmp_path, "up", {"a": 1.0}, "src")
    record_sample(tmp_path, "up", {"a": 1.5}, "src")
    doc = read_samples(tmp_path)
    assert [s["at"] for s in doc["samples"]] == ["up", "down"]
    assert doc["samples"][0]["cpu_s"] == {"a": 1.5} and doc["source"] == "src"
    assert doc["host_cpus"] == os.cpu_count()
    with pytest.raises(ValueError, match="expected one of"):
        record_sample(tmp_path, "later", {"a": 1.0}, "src")


def test_proc_cpu_seconds_counts_a_busy_process():
    before = proc_cpu_seconds(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = proc_cpu_seconds(os.getpid())
    assert before is not None and after is not None and after - before >= 0.15
    assert proc_cpu_seconds(2**22 + 1) is None


def test_a_burst_that_does_not_fit_is_a_banner(tmp_path):
    """The report says on its first screen what the fidelity table shows
    further down: a burst load above 1 (subnet-blob-msg-docker on this box:
    8.2) means the latencies are partly the host's."""
    import pandas as pd

    from analysis.report.data import RunData
    from analysis.report.tables import banners, overloaded
    from analysis.rundir import RunDir

    nodes = [f"n{i}" for i in range(10)]
    write(tmp_path, [("up", 0, {n: 0.0 for n in nodes}), ("workload", 10, {n: 0.0 for n in nodes}),
                     ("down", 30, {n: 2.0 for n in nodes})])  # 20 ms a delivery: 200 ms a message
    table = {"nodes": pd.DataFrame({"node": nodes, "delivered": [100] * 10})}

    def run(latency_p50_ms: float) -> RunData:
        summary = {"latency_p50_ms": latency_p50_ms, "stretch_p50": 3.0, "messages": 100}
        return RunData(RunDir(tmp_path, tmp_path, []), summary, table, 0)

    # spreads in 150 / 3 = 50 ms, where 2 cores at 70% give 70 ms of CPU: 200 / 70
    banner = overloaded(run(150.0))
    assert banner is not None and banner.danger and "2.857 times" in banner.text
    assert banner in banners(run(150.0))
    assert overloaded(run(1500.0)) is None  # 500 ms to spread in: 700 ms of CPU, it fits
    (tmp_path / FILE).unlink()
    assert overloaded(run(150.0)) is None  # a run that does not say (no router-cpu.json)
