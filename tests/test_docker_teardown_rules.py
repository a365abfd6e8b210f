"""The teardown rules (orchestrator.backends.docker.teardown) against a scripted
stand-in for the Docker SDK: the failures that matter (stale endpoints,
"has active endpoints" on an empty network, a foreign container on our
network) cannot be produced on demand by a real daemon."""

from __future__ import annotations

import threading
import time

import docker.errors
import pytest

from orchestrator.backends.docker.teardown import NETWORK_BACKOFF_S, SETTLE_S, teardown
from orchestrator.dockerapi.names import LABEL, LABEL_STATE, LABEL_TESTBED, PARALLEL
from orchestrator.dockerapi.teardown import DAEMON_RESTART, Scope
from orchestrator.errors import TeardownIncomplete

STATE = "/state/a"


def labels(testbed: str, state: str = STATE) -> dict[str, str]:
    return {LABEL: "1", LABEL_TESTBED: testbed, LABEL_STATE: state}


class FakeEngine:
    """Just enough of docker.DockerClient for teardown(), recording every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.containers_by_id: dict[str, FakeContainer] = {}
        self.networks_by_id: dict[str, FakeNetwork] = {}
        self.volumes_list: list[FakeVolume] = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.containers = _Listing(lambda: list(self.containers_by_id.values()))
        self.networks = _Listing(lambda: list(self.networks_by_id.values()))
        self.volumes = _Listing(lambda: list(self.volumes_list))
        self.api = _Api(self)

    def container(self, name: str, lab: dict[str, str], networks: list[str], state: str = "running") -> FakeContainer:
        c = FakeContainer(self, f"id-{name}", name, lab, state)
        self.containers_by_id[c.id] = c
        for net in networks:
            self.networks_by_id[f"id-{net}"].attrs["Containers"][c.id] = {"Name": name}
        return c

    def network(self, name: str, lab: dict[str, str], phantom_failures: int = 0) -> FakeNetwork:
        n = FakeNetwork(self, f"id-{name}", name, lab, phantom_failures)
        self.networks_by_id[n.id] = n
        return n


class _Listing:
    def __init__(self, objects) -> None:
        self.objects = objects

    def list(self, all: bool = False, filters: dict[str, str] | None = None, sparse: bool = False):  # noqa: A002
        key, _, value = (filters or {}).get("label", "").partition("=")
        return [o for o in self.objects() if key in o.labels and (not value or o.labels[key] == value)]


class _Api:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def disconnect_container_from_network(self, target: str, net: str, force: bool = False) -> None:
        self.engine.calls.append(("disconnect", target))
        network = self.engine.networks_by_id.get(net) or next(
            n for n in self.engine.networks_by_id.values() if n.name == net)
        eps = network.attrs["Containers"]
        key = target if target in eps else next((i for i, e in eps.items() if e["Name"] == target), None)
        if key is None:
            raise docker.errors.APIError("container is not connected to the network")
        del eps[key]


class FakeContainer:
    def __init__(self, engine: FakeEngine, cid: str, name: str, lab: dict[str, str], state: str) -> None:
        self.engine, self.id, self.name, self.labels = engine, cid, name, lab
        self.client = engine
        self.listed_state = state  # what the listing says
        self.running = state == "running"  # what it is when removed
        self.endpoint = state == "running"

    @property
    def attrs(self):
        nets = {n.name: {} for n in self.engine.networks_by_id.values() if self.id in n.attrs["Containers"]}
        return {"Config": {"Labels": self.labels}, "NetworkSettings": {"Networks": nets}, "State": self.listed_state}

    def remove(self, force: bool = False, v: bool = False) -> None:
        if self.running and not force:
            self.engine.calls.append(("refused rm", self.name))
            raise docker.errors.APIError("409 Client Error", explanation=(
                f"You cannot remove a running container {self.id}. Stop the container before attempting "
                "removal or force remove"))
        self.engine.calls.append(("rm -f" if force else "rm", self.name))
        with self.engine.lock:
            self.engine.active += 1
            self.engine.max_active = max(self.engine.max_active, self.engine.active)
        time.sleep(0.01)
        with self.engine.lock:
            self.engine.active -= 1
        del self.engine.containers_by_id[self.id]


class FakeNetwork:
    def __init__(self, engine: FakeEngine, nid: str, name: str, lab: dict[str, str], phantom: int) -> None:
        self.engine, self.id, self.name, self.labels = engine, nid, name, lab
        self.attrs = {"Labels": lab, "Containers": {}}
        self.phantom = phantom  # times Docker says "active endpoints" although none are listed

    def reload(self) -> None:
        if self.id not in self.engine.networks_by_id:
            raise docker.errors.NotFound("network not found")

    def remove(self) -> None:
        self.engine.calls.append(("network rm", self.name))
        if self.attrs["Containers"] or self.phantom:
            self.phantom = max(0, self.phantom - 1)
            raise docker.errors.APIError(f"error while removing network: network {self.name} id {self.id} "
                                         "has active endpoints")
        del self.engine.networks_by_id[self.id]


class FakeVolume:
    def __init__(self, name: str, lab: dict[str, str]) -> None:
        self.id = self.name = name
        self.labels = lab
        self.attrs = {"Labels": lab}

    def remove(self, force: bool = False) -> None:
        raise docker.errors.APIError("volume is in use")


def run(engine: FakeEngine, scope: Scope):
    slept: list[float] = []
    return teardown(engine, scope, sleep=slept.append), slept


def test_containers_leave_the_network_before_they_are_removed_a_few_at_a_time():
    engine = FakeEngine()
    engine.network("gtb-tb", labels("tb"))
    for i in range(40):
        engine.container(f"gtb-tb-n{i}", labels("tb"), ["gtb-tb"])
    report, _ = run(engine, Scope("tb", STATE))
    assert not report.left and not engine.containers_by_id and not engine.networks_by_id
    for i in range(40):
        name = f"gtb-tb-n{i}"
        assert engine.calls.index(("disconnect", f"id-{name}")) < engine.calls.index(("rm -f", name))
    disconnects = [i for i, c in enumerate(engine.calls) if c[0] == "disconnect"]
    assert disconnects == list(range(40))  # all of them, one at a time, before any removal
    assert 1 < engine.max_active <= PARALLEL
    assert sum(line.startswith("removed container") for line in report.removed) == 40
    assert ("removed network gtb-tb (tb)") in report.removed


def test_stopped_containers_hold_no_endpoint_and_are_removed_without_a_disconnect_or_a_pause():
    engine = FakeEngine()
    engine.network("gtb-tb", labels("tb"))
    for i, state in enumerate(("exited", "dead", "exited")):
        engine.container(f"gtb-tb-n{i}", labels("tb"), [], state=state)
    report, slept = run(engine, Scope("tb", STATE))
    assert not report.left and not engine.containers_by_id and not engine.networks_by_id
    assert not [c for c in engine.calls if c[0] == "disconnect"]
    assert sorted(c for c in engine.calls if c[0].startswith("rm")) == [("rm", f"gtb-tb-n{i}") for i in range(3)]
    assert slept == []  # a stopped testbed: no CLI can still be creating its objects


def test_a_container_started_since_the_listing_is_disconnected_then_removed_on_its_own():
    engine = FakeEngine()
    net = engine.network("gtb-tb", labels("tb"))
    late = engine.container("gtb-tb-n0", labels("tb"), [], state="created")  # a killed `up` was starting it
    late.running = True
    net.attrs["Containers"][late.id] = {"Name": late.name}
    engine.container("gtb-tb-n1", labels("tb"), [], state="exited")
    report, slept = run(engine, Scope("tb", STATE))
    assert not report.left and not engine.containers_by_id and not engine.networks_by_id
    mine = [c for c in engine.calls if c[1] in (late.id, late.name)]
    assert mine == [("refused rm", late.name), ("disconnect", late.id), ("rm -f", late.name)]
    assert slept == [SETTLE_S]  # a half-started testbed: re-list after a pause


def test_stale_endpoint_of_a_gone_container_is_force_disconnected_by_its_name():
    engine = FakeEngine()
    net = engine.network("gtb-tb", labels("tb"))
    net.attrs["Containers"]["ep-stale"] = {"Name": "gtb-tb-n7"}  # its container no longer exists
    report, slept = run(engine, Scope("tb", STATE))
    assert ("disconnect", "gtb-tb-n7") in engine.calls
    assert not report.left and not engine.networks_by_id and slept[:-1] == []


def test_network_removal_is_retried_with_backoff_while_docker_reports_endpoints():
    engine = FakeEngine()
    engine.network("gtb-tb", labels("tb"), phantom_failures=3)
    report, slept = run(engine, Scope("tb", STATE))
    assert not report.left and not engine.networks_by_id
    assert slept[:3] == list(NETWORK_BACKOFF_S[:3])
    assert any("after 4 attempts" in line for line in report.removed)


def test_endpoints_only_a_daemon_restart_clears_are_left_named_with_the_command():
    engine = FakeEngine()
    engine.network("gtb-tb", labels("tb"), phantom_failures=1000)
    report, slept = run(engine, Scope("tb", STATE))
    assert engine.networks_by_id  # still there: Docker would not let go
    (left,) = report.left
    assert left.resource.name == "gtb-tb" and "active endpoints" in left.why
    assert left.command == f"docker network rm gtb-tb || ({DAEMON_RESTART} && docker network rm gtb-tb)"
    assert slept[:len(NETWORK_BACKOFF_S)] == list(NETWORK_BACKOFF_S)
    with pytest.raises(TeardownIncomplete) as info:
        report.raise_if_incomplete()
    assert "gtb-tb" in str(info.value) and DAEMON_RESTART in str(info.value) and info.value.exit_code == 1


def test_a_foreign_container_on_our_network_is_left_alone_and_reported():
    engine = FakeEngine()
    net = engine.network("gtb-tb", labels("tb"))
    net.attrs["Containers"]["id-web"] = {"Name": "someones-web"}
    report, _ = run(engine, Scope("tb", STATE))
    assert ("disconnect", "id-web") not in engine.calls and engine.networks_by_id
    (left,) = report.left
    assert "someones-web" in left.why
    assert left.command == "docker network disconnect -f gtb-tb someones-web && docker network rm gtb-tb"


def test_a_volume_that_cannot_go_is_reported_and_the_rest_still_removed():
    engine = FakeEngine()
    engine.network("gtb-tb", labels("tb"))
    engine.volumes_list.append(FakeVolume("gtb-tb-data", labels("tb")))
    report, _ = run(engine, Scope("tb", STATE))
    assert not engine.networks_by_id
    assert [lf.command for lf in report.left] == ["docker volume rm -f gtb-tb-data"]


def test_scope_admits_only_its_testbed_and_state_directory():
    engine = FakeEngine()
    engine.network("gtb-mine", labels("mine"))
    engine.network("gtb-other", labels("other", "/state/b"))
    engine.network("gtb-old", {LABEL: "1", LABEL_TESTBED: "old"})  # from before the state label
    engine.network("unlabelled", {"com.example": "x"})
    report, _ = run(engine, Scope(None, STATE))  # `testbed down --all` under /state/a
    assert sorted(n.name for n in engine.networks_by_id.values()) == ["gtb-old", "gtb-other", "unlabelled"]
    run(engine, Scope("old", STATE))  # named: a record-less testbed from before the label
    assert "gtb-old" not in {n.name for n in engine.networks_by_id.values()}
    run(engine, Scope(None, None))  # `testbed gc`: any state directory, still only ours
    assert [n.name for n in engine.networks_by_id.values()] == ["unlabelled"]


def test_node_directory_config_and_a_trace_path_outside_the_run_directory(tmp_path):
    import dataclasses

    from node.config import NodeConfig
    from orchestrator.backends.docker import nodedir as docker_nodedir
    from orchestrator.errors import InputError

    cfg = NodeConfig(name="a", index=0, router="floodsub", seed=1, listen_host="10.0.0.2", listen_port=4001,
                     control_host="10.0.0.2", control_port=4002, token="t", trace_path=str(tmp_path / "run" / "traces" / "a.pb"))
    seen = docker_nodedir.prepare(tmp_path / "run", cfg, docker_nodedir.node_user())
    assert (seen.trace_path, seen.lag_path) == ("/node/trace.pb", "/node/lag.json")
    assert docker_nodedir.prepare(tmp_path / "run", cfg, docker_nodedir.node_user()) == seen  # a restart
    with pytest.raises(InputError, match="trace_path .*only write under the run directory"):
        docker_nodedir.prepare(tmp_path / "run", dataclasses.replace(cfg, trace_path="/etc/a.pb"),
                               docker_nodedir.node_user())
