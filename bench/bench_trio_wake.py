"""What one wake-up of a trio task costs in CPU, by how it is woken: a
deadline (`trio.sleep`, what the user-space shaper's writer pays per held
frame), a timerfd, a socket another thread writes to, a memory channel; and,
outside trio, `time.sleep` and `epoll.poll` with a timeout. CPU is the trio
thread's own (`time.thread_time`), so the figures hold up under other load
better than wall time; run it on a quiet box all the same (docs/wire.md,
issue 13, sixth pass).

    .venv/bin/python bench/bench_trio_wake.py [--n 3000] [--interval-us 500]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import socket
import threading
import time

import trio

_libc = ctypes.CDLL(None, use_errno=True)
CLOCK_MONOTONIC = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def per_wake_us(started: float, n: int) -> float:
    return round((time.thread_time() - started) / n * 1e6, 1)


async def deadline(n: int, interval: float) -> float:
    started = time.thread_time()
    for _ in range(n):
        await trio.sleep(interval)
    return per_wake_us(started, n)


async def timerfd(n: int, interval: float) -> float:
    fd = _libc.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
    ns = int(interval * 1e9)
    spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
    started = time.thread_time()
    for _ in range(n):
        _libc.timerfd_settime(fd, 0, ctypes.byref(spec), None)
        await trio.lowlevel.wait_readable(fd)
        os.read(fd, 8)
    took = per_wake_us(started, n)
    os.close(fd)
    return took


async def socket_wake(n: int, interval: float) -> float:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)

    def writer() -> None:
        for _ in range(n):
            time.sleep(interval)
            theirs.send(b"x")

    thread = threading.Thread(target=writer)
    thread.start()
    started, got = time.thread_time(), 0
    while got < n:
        await trio.lowlevel.wait_readable(ours)
        got += len(ours.recv(4096))
    took = per_wake_us(started, n)
    thread.join()
    ours.close()
    theirs.close()
    return took


async def channel(n: int, interval: float) -> float:
    send, recv = trio.open_memory_channel[int](0)

    async def producer() -> None:
        async with send:
            for i in range(n):
                await send.send(i)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        started = time.thread_time()
        async for _ in recv:
            pass
        return per_wake_us(started, n)


def outside_trio(n: int, interval: float) -> tuple[float, float]:
    started = time.thread_time()
    for _ in range(n):
        time.sleep(interval)
    slept = per_wake_us(started, n)
    epoll, started = select.epoll(), time.thread_time()
    for _ in range(n):
        epoll.poll(interval)
    return slept, per_wake_us(started, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="wake-ups per kind")
    ap.add_argument("--interval-us", type=float, default=500.0, help="time between wake-ups")
    args = ap.parse_args()
    n, interval = args.n, args.interval_us / 1e6
    print(f"load average {os.getloadavg()[0]:.1f}; {n} wake-ups each, {args.interval_us:g} us apart; CPU per wake-up:")
    for name, fn in (("trio.sleep (a deadline)", deadline), ("timerfd in trio", timerfd),
                     ("socket written by a thread", socket_wake), ("memory channel hand-off", channel)):
        print(f"  {name:30s} {trio.run(fn, n, interval):7.1f} us")
    slept, polled = outside_trio(n, interval)
    print(f"  {'time.sleep (no trio)':30s} {slept:7.1f} us")
    print(f"  {'epoll.poll timeout (no trio)':30s} {polled:7.1f} us")


if __name__ == "__main__":
    main()
