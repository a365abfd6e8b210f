"""The user-space shaper (pure arithmetic, then observed over TCP) and the
bounded per-peer outbound queue (DROP_RPC traced, others keep being served)."""

from __future__ import annotations

import random
import statistics

import trio

from node.config import LinkShape
from node.engine.api import TraceType
from node.libp2p.identity import peer_id_to_b58
from node.shaping.shaper import LinkShaper, Uplink
from node.trace.file import read_trace
from test_node_runtime import EVIL_ID, RawPeer, ctl, make_cfg, pid, running, wait_for


def test_delay_jitter_keep_fifo_order():
    shaper = LinkShaper(LinkShape(delay_ms=50, jitter_ms=20), None, random.Random(1))
    dense = [shaper.schedule(i * 0.001, 100) for i in range(1000)]  # 1 ms apart: jitter would reorder
    assert dense == sorted(dense)
    assert all(0.03 <= d - i * 0.001 <= 0.07 + 1e-9 for i, d in enumerate(dense))
    sparse_shaper = LinkShaper(LinkShape(delay_ms=50, jitter_ms=20), None, random.Random(1))
    lateness = [sparse_shaper.schedule(i * 1.0, 100) - i * 1.0 for i in range(1000)]
    assert 0.03 <= min(lateness) and max(lateness) <= 0.07 + 1e-9
    assert abs(statistics.mean(lateness) - 0.05) < 0.003


def test_loss_rate():
    shaper = LinkShaper(LinkShape(loss=0.2), None, random.Random(2))
    lost = sum(shaper.schedule(0.0, 10) is None for _ in range(10_000))
    assert 1800 < lost < 2200


def test_rate_is_serialization_time_on_the_shared_uplink():
    uplink = Uplink(8_000)  # 1000 bytes/s
    a = LinkShaper(LinkShape(), uplink, random.Random(3))
    b = LinkShaper(LinkShape(delay_ms=100), uplink, random.Random(4))
    assert a.schedule(0.0, 500) == 0.5
    assert b.schedule(0.0, 500) == 1.0 + 0.1  # queued behind a's frame on the same uplink
    link = LinkShaper(LinkShape(rate_bps=16_000), None, random.Random(5))
    assert link.schedule(10.0, 2000) == 11.0
    assert not LinkShaper(LinkShape(), Uplink(None), random.Random(6)).schedule(1.0, 5) is None
    assert LinkShaper(LinkShape(), Uplink(None), random.Random(6)).noop


def test_delay_and_loss_observed_over_tcp(tmp_path):
    """A 150 ms one-way delay from a to b shows up as at least ~150 ms from
    publish to delivery; 50% loss loses some messages but not all."""

    async def main():
        slow = LinkShape(delay_ms=150)
        a_cfg = make_cfg(tmp_path, "a", shaping={pid("b"): slow}, router="floodsub", params={})
        b_cfg = make_cfg(tmp_path, "b", router="floodsub", params={})
        async with running(a_cfg, b_cfg) as (a, b):
            await b.connect("127.0.0.1", a.listen_port, "a", True)
            await wait_for(lambda: "t" in {t for ts in [a.engine.topics] for t in ts} and a.engine.topic_peers("t"))
            times = []
            for _ in range(3):
                before = b.counters["delivered"]
                t0 = trio.current_time()
                await ctl(a, "publish", topic="t", size=100)
                await wait_for(lambda: b.counters["delivered"] > before, timeout=5, step=0.005)
                times.append(trio.current_time() - t0)
            assert min(times) >= 0.14, times
            assert max(times) < 2.0, times

        lossy_cfg = make_cfg(tmp_path, "c", shaping={pid("d"): LinkShape(loss=0.5)}, router="floodsub", params={})
        d_cfg = make_cfg(tmp_path, "d", router="floodsub", params={})
        async with running(lossy_cfg, d_cfg) as (c, d):
            await d.connect("127.0.0.1", c.listen_port, "c", True)
            await wait_for(lambda: bool(c.engine.topic_peers("t")))
            for _ in range(200):
                await ctl(c, "publish", topic="t", size=10)
            await trio.sleep(0.5)
            assert 40 < d.counters["delivered"] < 160, d.counters["delivered"]
            assert c.counters["lost"] >= 200 - d.counters["delivered"]  # (+ a lost hello, maybe)

    trio.run(main)


def test_full_queue_drops_and_traces_drop_rpc(tmp_path):
    """A peer behind a very slow link: its queue (4 RPCs) fills and further
    RPCs to it are dropped with DROP_RPC, while a fast peer gets everything."""

    async def main():
        cfg = make_cfg(
            tmp_path, "a", router="floodsub", params={}, queue_len=4,
            shaping={peer_id_to_b58(EVIL_ID): LinkShape(rate_bps=8_000)},
        )
        async with running(cfg, make_cfg(tmp_path, "fast", router="floodsub", params={})) as (a, fast), \
                trio.open_nursery() as nursery:
            await fast.connect("127.0.0.1", a.listen_port, "a", True)
            slow = await RawPeer.connect(a, nursery, "/floodsub/1.0.0")
            from node.wire.rpc import Rpc, SubOpts

            await slow.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),)))
            await wait_for(lambda: len(a.engine.topic_peers("t")) == 2)
            for _ in range(40):
                await ctl(a, "publish", topic="t", size=1000)
                await trio.sleep(0.01)  # let the fast peer's writer drain its 4 slots
            await wait_for(lambda: fast.counters["delivered"] == 40)
            assert a.counters["dropped"] >= 30
            st = await ctl(a, "status")
            assert st["counters"]["dropped"] == a.counters["dropped"]
            nursery.cancel_scope.cancel()

    trio.run(main)
    drops = [ev for ev in read_trace(tmp_path / "a.pb") if ev.type == TraceType.DROP_RPC]
    assert len(drops) >= 30 and all(ev.dropRPC.sendTo == EVIL_ID for ev in drops)


def test_a_stalled_peer_does_not_block_the_router(tmp_path):
    """A peer that never reads: TCP backpressure stalls its writer only."""

    async def main():
        cfg = make_cfg(tmp_path, "a", router="floodsub", params={}, queue_len=8)
        async with running(cfg, make_cfg(tmp_path, "fast", router="floodsub", params={})) as (a, fast), \
                trio.open_nursery() as nursery:
            await fast.connect("127.0.0.1", a.listen_port, "a", True)
            stalled = await RawPeer.connect(a, nursery, "/floodsub/1.0.0")
            from node.wire.rpc import Rpc, SubOpts

            await stalled.send_rpc(Rpc(subscriptions=(SubOpts(True, "t"),)))
            await wait_for(lambda: len(a.engine.topic_peers("t")) == 2)
            for _ in range(100):
                await ctl(a, "publish", topic="t", size=256 << 10)
                await trio.sleep(0.02)
            await wait_for(lambda: fast.counters["delivered"] == 100, timeout=15)
            assert a.counters["dropped"] > 0
            nursery.cancel_scope.cancel()

    trio.run(main)
    drops = [ev.dropRPC.sendTo for ev in read_trace(tmp_path / "a.pb") if ev.type == TraceType.DROP_RPC]
    assert drops and set(drops) == {EVIL_ID}
