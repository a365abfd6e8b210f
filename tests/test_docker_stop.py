"""stop_all (orchestrator/backends/docker/teardown.py) against a fake engine: every
container gets SIGTERM before any wait, one grace period covers all of them,
SIGKILL only for those still running after it, paused ones are unpaused
first, and what cannot be stopped is named; with root, a container's init
is held while its router exits, its disconnect comes before its init is let
go, and no two disconnects overlap (so no two endpoints are released
together), while a slow router's drain does not hold up the others."""

from __future__ import annotations

import docker.errors

import os
import signal
import subprocess
import time

import pytest

from orchestrator.backends.docker import teardown as docker_teardown
from orchestrator.backends.docker.teardown import only_child, stop_all
from orchestrator.errors import TeardownIncomplete

FLT = {"label": "gossip-testbed.testbed=t"}


class FakeApi:
    def __init__(self, states: dict[str, str], ignores_term: set[str] = frozenset(), exits_after: int = 1) -> None:
        self.states = dict(states)
        self.ignores_term = set(ignores_term)
        self.exits_after = exits_after  # listings before a SIGTERMed container has exited
        self.termed: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []

    def containers(self, filters=None):
        assert filters["label"] == FLT["label"]
        for cid in list(self.termed):
            self.termed[cid] -= 1
            if self.termed[cid] <= 0 and self.states[cid] == "running":
                self.states[cid] = "exited"
        want = filters.get("status")
        return [{"Id": cid, "State": st} for cid, st in self.states.items()
                if st != "exited" and (want is None or st == want)]

    def inspect_container(self, cid):
        return {"State": {"Pid": 0}}  # no init pid: the plain way

    def unpause(self, cid):
        self.calls.append(("unpause", cid))
        self.states[cid] = "running"

    def kill(self, cid, signal):
        self.calls.append((signal, cid))
        if self.states.get(cid) == "gone":
            raise docker.errors.APIError("500 Server Error", explanation="cannot kill: device busy")
        if self.states[cid] == "exited":
            raise docker.errors.APIError("409", explanation=f"Container {cid} is not running")
        if signal == "SIGKILL":
            self.states[cid] = "exited"
        elif cid not in self.ignores_term:
            self.termed[cid] = self.exits_after


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api = api


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_all_get_sigterm_before_any_wait_and_stop_within_one_grace():
    api = FakeApi({f"c{i}": "running" for i in range(50)}, exits_after=3)
    clock = Clock()
    assert stop_all(FakeClient(api), FLT, {f"n{i}": f"c{i}" for i in range(50)}, 10.0, None, clock, clock.sleep) == {}
    assert sorted(api.calls) == sorted(("SIGTERM", f"c{i}") for i in range(50))
    assert clock.t < 1.0  # one shared wait, not 50 graces
    assert set(api.states.values()) == {"exited"}


def test_sigkill_only_for_those_still_running_after_the_grace():
    api = FakeApi({"c0": "running", "c1": "running"}, ignores_term={"c1"})
    clock = Clock()
    assert stop_all(FakeClient(api), FLT, {"n0": "c0", "n1": "c1"}, 10.0, None, clock, clock.sleep) == {}
    assert ("SIGKILL", "c1") in api.calls and ("SIGKILL", "c0") not in api.calls
    assert 10.0 <= clock.t < 11.0


def test_paused_ones_are_unpaused_first_and_failures_are_named():
    api = FakeApi({"c0": "paused", "c1": "gone", "c2": "exited"}, ignores_term={"c1"})
    api.states["c1"] = "running"
    clock = Clock()

    def kill(cid, signal, orig=api.kill):
        if cid == "c1":
            api.calls.append((signal, cid))
            raise docker.errors.APIError("500", explanation="cannot kill: device busy")
        return orig(cid, signal)

    api.kill = kill
    out = stop_all(FakeClient(api), FLT, {"n0": "c0", "n1": "c1", "n2": "c2"}, 1.0, None, clock, clock.sleep)
    assert api.calls[0] == ("unpause", "c0")
    assert set(out) == {"n1"} and "still running" in out["n1"]
    assert api.states["c0"] == "exited"


def _state(pid: int | None) -> str | None:
    try:
        raw = open(f"/proc/{pid}/stat").read()
    except (OSError, TypeError):
        return None
    return raw[raw.rfind(")") + 2:][:1]


class HeldApi:
    """Containers whose init is a real `sh` with one child (the router); at
    each disconnect it notes the state of every init and router."""

    def __init__(self, inits: dict[str, subprocess.Popen]) -> None:
        self.inits = inits
        self.routers = {cid: only_child(p.pid) for cid, p in inits.items()}
        self.calls: list[tuple[str, str, float]] = []
        self.seen: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        self.in_flight = 0
        self.most_in_flight = 0

    def containers(self, filters=None):
        if filters.get("status") == "paused":
            return []
        return [{"Id": cid, "State": "running"} for cid, p in self.inits.items() if p.poll() is None]

    def inspect_container(self, cid):
        return {"State": {"Pid": self.inits[cid].pid, "Paused": False}}

    def disconnect_container_from_network(self, cid, network):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.calls.append(("disconnect", cid, time.monotonic()))
        self.seen[cid] = {c: (_state(p.pid), _state(self.routers[c])) for c, p in self.inits.items()}
        time.sleep(0.02)
        self.in_flight -= 1

    def kill(self, cid, signal):
        raise AssertionError("a held container is never signalled through Docker")


def _started(cmds: dict[str, str]) -> dict[str, subprocess.Popen]:
    inits = {cid: subprocess.Popen(["sh", "-c", f"{cmd} & wait $!"]) for cid, cmd in cmds.items()}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(only_child(p.pid) for p in inits.values()):
        time.sleep(0.05)
    return inits


def _catches_term(pid: int | None) -> bool:
    try:
        status = open(f"/proc/{pid}/status").read()
    except (OSError, TypeError):
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="holding a container's init needs root (as the docker "
                                                          "backend does)")


@needs_root
def test_with_root_each_init_is_held_until_its_own_endpoint_is_released_one_at_a_time():
    inits = _started({f"c{i}": "sleep 60" for i in range(4)})
    try:
        api = HeldApi(inits)
        out = stop_all(FakeClient(api), FLT, {f"n{i}": f"c{i}" for i in range(4)}, 5.0, "gtb-x")
        assert out == {}
        assert sorted(c[1] for c in api.calls) == ["c0", "c1", "c2", "c3"]
        assert api.most_in_flight == 1  # never two endpoints released together
        for cid, states in api.seen.items():
            init_state, router_state = states[cid]
            assert init_state == "T", f"{cid}'s init was let go before its disconnect"
            assert router_state in (None, "Z"), f"{cid} was disconnected before its router exited"
        for p in inits.values():
            assert p.wait(timeout=5) == 128 + signal.SIGTERM  # the init reports its router's SIGTERM
    finally:
        for p in inits.values():
            if p.poll() is None:
                p.kill()


@needs_root
def test_with_root_a_router_that_exits_early_leaves_while_a_slow_one_still_drains():
    slow = "python3 -c 'import signal, sys, time; signal.signal(signal.SIGTERM, " \
           "lambda *_: (time.sleep(1.5), sys.exit(0))); time.sleep(60)'"
    inits = _started({"fast": "sleep 60", "slow": slow})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _catches_term(only_child(inits["slow"].pid)):
            time.sleep(0.05)
        api = HeldApi(inits)
        t0 = time.monotonic()
        assert stop_all(FakeClient(api), FLT, {"a": "fast", "b": "slow"}, 5.0, "gtb-x") == {}
        at = {cid: t - t0 for _, cid, t in api.calls}
        assert at["fast"] < 1.0 <= at["slow"]
        assert api.seen["fast"]["slow"][1] not in (None, "Z")  # still draining when the fast one left
        assert inits["fast"].wait(timeout=5) == 128 + signal.SIGTERM
        assert inits["slow"].wait(timeout=5) == 0
    finally:
        for p in inits.values():
            if p.poll() is None:
                p.kill()


@pytest.mark.parametrize("pidfd", [True, False])
def test_exit_watch_tells_which_processes_are_gone_by_a_deadline(monkeypatch, pidfd):
    """The wait on an own bridge's inits: gone ones leave the watch as they
    exit (a pidfd each, or /proc where there is none), a stubborn one is
    still waited for at the deadline, and is let go once it dies."""
    if not pidfd:
        monkeypatch.setattr(docker_teardown.os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError("no pidfd")))
    quick = {str(i): subprocess.Popen(["sleep", str(0.1 * i)]) for i in range(1, 4)}
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30"])
    try:
        with docker_teardown._ExitWatch({k: p.pid for k, p in quick.items()} | {"s": stubborn.pid}) as watch:
            assert not watch.wait(time.monotonic() + 1.5, time.monotonic, time.sleep)
            assert list(watch.waiting) == ["s"]
            stubborn.kill()
            assert watch.wait(time.monotonic() + 5, time.monotonic, time.sleep) and not watch.waiting
    finally:
        for p in [*quick.values(), stubborn]:
            p.kill()
            p.wait()


class EventsApi:
    """An engine whose `die` events come from `feed` (a blocking iterator)."""

    def __init__(self, feed=None, fail: bool = False) -> None:
        self.feed, self.fail, self.filters, self.closed = feed, fail, None, False

    def events(self, since=None, filters=None, decode=False):
        assert since is not None and since < time.time()  # replayed from before the stream opened
        if self.fail:
            raise docker.errors.APIError("500 Server Error", explanation="no events here")
        self.filters = filters
        api = self

        class Stream:
            def __iter__(self):
                return iter(api.feed)

            def close(self):
                api.closed = True
        return Stream()


def test_deaths_waits_for_each_containers_die_event_on_one_stream():
    api = EventsApi(feed=[{"id": "c1"}, {"id": "other"}, {"id": "c0"}])
    with docker_teardown._Deaths(FakeClient(api), FLT, True) as deaths:
        t0 = time.monotonic()
        deaths.wait({"c0", "c1"}, t0 + 5.0, time.monotonic)
        assert time.monotonic() - t0 < 1
    assert api.filters == {**FLT, "type": "container", "event": "die"} and api.closed


def test_deaths_gives_up_at_the_deadline_or_without_a_stream():
    def forever():
        yield {"id": "c0"}
        time.sleep(30)

    api = EventsApi(feed=forever())
    with docker_teardown._Deaths(FakeClient(api), FLT, True) as deaths:
        t0 = time.monotonic()
        deaths.wait({"c0", "c1"}, t0 + 0.3, time.monotonic)  # c1 never dies
        assert 0.25 <= time.monotonic() - t0 < 5
    for api in (EventsApi(fail=True), EventsApi(feed=[])):
        with docker_teardown._Deaths(FakeClient(api), FLT, True) as deaths:
            t0 = time.monotonic()
            deaths.wait({"c0"}, t0 + 10.0, time.monotonic)
            assert time.monotonic() - t0 < 1  # the listing decides at once


class StuckApi:
    """An engine that lost the exits of its containers (Docker 20.10's
    libnetwork deadlock): it lists them as running forever, never sends their
    `die` events, and never answers an inspect or a kill."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.asked: list[str] = []

    def containers(self, filters=None):
        return [] if filters.get("status") == "paused" else [{"Id": cid, "State": "running"} for cid in self.ids]

    def events(self, since=None, filters=None, decode=False):
        raise docker.errors.APIError("500", explanation="no events")

    def inspect_container(self, cid):
        self.asked.append(cid)
        time.sleep(60)

    def kill(self, cid, signal):
        raise AssertionError("no call that would never return")


@needs_root
def test_a_daemon_that_lost_the_exits_ends_the_stop_with_what_to_do(monkeypatch):
    """On an own bridge (no network) the routers exit as asked; Docker still
    lists their containers as running and does not answer about them: the
    stop ends in TeardownIncomplete naming the daemon's deadlock and the fix,
    without a kill through Docker and without waiting on its silence."""
    inits = {f"c{i}": subprocess.Popen(["sleep", "30"]) for i in range(3)}
    monkeypatch.setattr(docker_teardown, "_inits", lambda ids: {cid: inits[cid].pid for cid in ids})
    monkeypatch.setattr(docker_teardown, "PROBE_S", 0.5)
    api = StuckApi(sorted(inits))
    t0 = time.monotonic()
    try:
        with pytest.raises(TeardownIncomplete) as caught:
            stop_all(FakeClient(api), FLT, {f"n{i}": f"c{i}" for i in range(3)}, 0.3, None)
    finally:
        for p in inits.values():
            p.kill()
            p.wait()
    assert time.monotonic() - t0 < 5
    text = str(caught.value)
    assert "3 container(s) (n0, n1, n2)" in text and "moby/moby#46661" in text and "testbed down --all" in text
    assert api.asked == ["c0"]


def test_a_kill_docker_does_not_answer_is_a_failed_stop_not_a_traceback():
    import requests.exceptions

    api = FakeApi({"c0": "running", "c1": "running"})

    def kill(cid, signal, orig=api.kill):
        api.calls.append((signal, cid))
        if cid == "c1":
            raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=120)")
        return orig(cid, signal)

    api.kill = kill
    clock = Clock()
    out = stop_all(FakeClient(api), FLT, {"n0": "c0", "n1": "c1"}, 1.0, None, clock, clock.sleep)
    assert set(out) == {"n1"} and "still running" in out["n1"]
    assert ("SIGTERM", "c1") in api.calls and ("SIGKILL", "c1") in api.calls and api.states["c0"] == "exited"
