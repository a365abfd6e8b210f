"""A topic's validation delay (test-plans' setTopicValidationDelay): our
engines hold a message in validation without blocking, as go-libp2p-pubsub
does (seen when validation starts, delivered and forwarded when it ends);
the simulator and the experiment file carry it; contract scripts get the
instruction."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine_harness import MS, add_peers, forwarded, lone, msg, publish_rpc
from node.engine import TraceType, make_router
from node.trace.file import read_trace
from orchestrator.experiment.spec import parse_experiment, resolved_to_yaml
from orchestrator.routers.interop_script import node_script
from orchestrator.sim.run import run_simulation

T = "t"
MESH = {"gossipsub": {"D": 2, "D_low": 1, "D_high": 3}, "gossipsub-v1.2": {"D": 2, "D_low": 1, "D_high": 3, "D_out": 0, "D_score": 1}}
TESTBED = Path(sys.executable).with_name("testbed")


def delayed(kind: str, ms: float = 5.0, params: dict | None = None):
    r = make_router(kind, b"me", 0, params or {}, validation_delay={T: ms / 1000})
    add_peers(r, [b"p00", b"p01", b"p02"], [T])
    r.join(0, T)
    r.heartbeat(0)
    return r


@pytest.mark.parametrize("kind", ["floodsub", "gossipsub", "gossipsub-v1.2"])
def test_a_message_is_delivered_and_forwarded_when_its_validation_ends(kind):
    r = delayed(kind, params=MESH.get(kind))
    m = msg(b"p00", 1)
    out = r.handle_rpc(10 * MS, b"p00", publish_rpc(m))
    assert out.wakeups == (15 * MS,)
    assert not out.deliveries and not forwarded(out)
    dup = r.handle_rpc(12 * MS, b"p01", publish_rpc(m))  # seen since validation began, as in go
    assert [e.type for e in dup.trace if e.type != TraceType.RECV_RPC] == [TraceType.DUPLICATE_MESSAGE]
    assert not dup.wakeups
    early = r.wake(14 * MS)
    assert not early.deliveries and not early.sends
    done = r.wake(15 * MS)
    assert done.deliveries == (m,)
    delivered = [e for e in done.trace if e.type == TraceType.DELIVER_MESSAGE]
    assert [(e.timestamp, e.peer) for e in delivered] == [(15 * MS, b"p00")]
    assert forwarded(done) and b"p00" not in forwarded(done)


def test_other_topics_and_routers_without_a_delay_validate_at_once():
    r = delayed("gossipsub")
    r.join(0, "u")
    add_peers(r, [b"q00"], ["u"])
    out = r.handle_rpc(0, b"q00", publish_rpc(msg(b"q00", 1, topic="u")))
    assert out.deliveries and not out.wakeups
    plain = lone("gossipsub")
    add_peers(plain, [b"p00"], [T])
    plain.join(0, T)
    assert plain.handle_rpc(0, b"p00", publish_rpc(msg(b"p00", 1))).deliveries


def test_validations_end_in_the_order_they_are_due_and_one_wake_finishes_all_due():
    r = delayed("floodsub", ms=5)
    a, b = msg(b"p00", 1), msg(b"p01", 2)
    r.handle_rpc(0, b"p00", publish_rpc(a))
    r.handle_rpc(1 * MS, b"p01", publish_rpc(b))
    assert r.wake(20 * MS).deliveries == (a, b)


def test_gossipsub_v12_sends_idontwant_before_validation_ends():
    r = delayed("gossipsub-v1.2", params={**MESH["gossipsub-v1.2"], "IDontWantMessageThreshold": 1})
    out = r.handle_rpc(0, b"p00", publish_rpc(msg(b"p00", 1, data=b"x" * 64)))
    assert any(rpc.control is not None and rpc.control.idontwant for _, rpc in out.sends)
    assert not out.deliveries


def test_routers_that_validate_at_once_refuse_a_delay():
    with pytest.raises(ValueError, match="simsub validates at once"):
        make_router("simsub", b"me", 0, {}, validation_delay={T: 0.005})


CHAIN = """\
name: chain
nodes: {count: 3, router: floodsub}
overlay: {type: explicit, edges: [[n0, n1], [n1, n2]]}
links: {latency: 10}
workload: {messages: 1, size: 100, publishers: {nodes: [n0]}, start: 1s}
validation_delay: {t: 50ms}
"""


def test_simulator_adds_the_delay_at_every_hop(tmp_path):
    """n0 publishes; n1 validates 50 ms before delivering and forwarding;
    n2 gets it 10 ms later and validates 50 ms: 60 ms and 120 ms."""
    exp = parse_experiment(CHAIN, "chain.yaml")
    resolved = exp.resolve()
    assert dict(resolved.validation_delay) == {T: 0.05}
    run_simulation(resolved, resolved_to_yaml(resolved, exp), tmp_path)
    times = {}
    for node in ("n0", "n1", "n2"):
        for ev in read_trace(tmp_path / "traces" / f"{node}.pb"):
            if ev.type in (TraceType.PUBLISH_MESSAGE, TraceType.DELIVER_MESSAGE):
                times.setdefault(node, ev.timestamp)
    assert round((times["n1"] - times["n0"]) / MS) == 60
    assert round((times["n2"] - times["n0"]) / MS) == 120
    assert "validation_delay: {t: 0.05}" in (tmp_path / "experiment.resolved.yaml").read_text()


def test_contract_scripts_set_the_topic_validation_delay():
    text = CHAIN.replace("router: floodsub", "router: rust-libp2p")
    resolved = parse_experiment(text, "chain.yaml").resolve()
    script = node_script(resolved, "n1", {"n1": ["n0"]})
    assert script[1] == {"type": "setTopicValidationDelay", "topicID": T, "delaySeconds": 0.05}


@pytest.mark.parametrize(("edit", "line", "says"), [
    (("{t: 50ms}", "{blocks: 50ms}"), 6, "no group subscribes to topic 'blocks'"),
    (("router: floodsub", "router: simsub"), 6, "runs simsub, which validates at once"),
    (("router: floodsub", "router: py-libp2p"), 6, "runs py-libp2p, which validates at once"),
    (("{t: 50ms}", "{t: -1}"), 6, "validation_delay.t"),
])
def test_bad_validation_delays_are_refused_at_their_line(tmp_path, edit, line, says):
    path = tmp_path / "bad.yaml"
    path.write_text(CHAIN.replace(*edit))
    proc = subprocess.run([str(TESTBED), "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"bad.yaml:{line}" in proc.stderr and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_runtime_wakes_its_engine_when_validation_ends(tmp_path):
    """Two trio nodes on loopback, 300 ms validation at n1: the message is
    delivered there no sooner than 300 ms after it arrived, and n1 stays
    responsive meanwhile (its status answers)."""
    import trio  # noqa: PLC0415

    from test_node_runtime import ctl, make_cfg, running, wait_for  # noqa: PLC0415

    async def main() -> None:
        a_cfg = make_cfg(tmp_path, "n0")
        b_cfg = make_cfg(tmp_path, "n1", validation_delay={T: 0.3})
        async with running(a_cfg, b_cfg) as (a, b):
            await a.connect("127.0.0.1", b.listen_port, "n1", True)
            await wait_for(lambda: a.mesh().get(T) == ["n1"] and b.mesh().get(T) == ["n0"])
            assert (await ctl(a, "publish", topic=T, size=100))["ok"]
            await wait_for(lambda: any(e.type == TraceType.RECV_RPC and e.recvRPC.meta.messages
                                       for e in read_trace(tmp_path / "n1.pb")), timeout=5)
            assert b.counters["delivered"] == 0 and (await ctl(b, "status"))["ok"]
            await wait_for(lambda: b.counters["delivered"] == 1, timeout=5)

    trio.run(main)
    events = list(read_trace(tmp_path / "n1.pb"))
    arrived = min(e.timestamp for e in events if e.type == TraceType.RECV_RPC and e.recvRPC.meta.messages)
    delivered = min(e.timestamp for e in events if e.type == TraceType.DELIVER_MESSAGE)
    assert delivered - arrived >= 300 * MS
