"""The swarm backend's parts that need no swarm: the tc program a task gets
(peer names where addresses go), the placement field of experiment files,
where collected files land, the teardown order and its retries, the engine
map, doctor's swarm line, and the wait for a new overlay's subnet."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import docker.errors
import pytest

from node.config import LinkShape
from orchestrator.dockerapi.names import LABEL_STATE, LABEL_TESTBED
from orchestrator.dockerapi.teardown import Scope
from orchestrator.errors import BackendUnavailable
from orchestrator.backends.swarm.collect import _extract
from orchestrator.backends.swarm.engines import engine_urls
from orchestrator.backends.swarm.task import DEV, shaping_plan
from orchestrator.backends.swarm.teardown import teardown

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(ROOT / ".venv" / "bin" / "testbed")


def test_the_tc_program_names_peers_and_the_overlay_device():
    plan = shaping_plan({"n3": LinkShape(20, 0, 0, 1_000_000), "n1": LinkShape(5)}, None, None,
                        netem=False, path="userspace+htb", subnet="10.0.9.0/24")
    text = [" ".join(c) for c in plan.commands]
    assert all(f"dev {DEV}" in line for line in text)
    assert any("match ip dst n3/32" in line for line in text)
    assert not any("n1/32" in line for line in text)  # no rate, no netem: nothing for the kernel
    assert '"subnet": "10.0.9.0/24"' in plan.to_env()


def test_an_uplink_alone_is_one_tbf():
    plan = shaping_plan({}, 8_000_000, None, netem=False, path="userspace+htb", subnet="10.0.9.0/24")
    assert [c[3:6] for c in plan.commands] == [("dev", DEV, "root")]
    assert "tbf" in plan.commands[0]


def test_no_kernel_part_is_an_empty_program():
    plan = shaping_plan({"n1": LinkShape(30)}, None, None, netem=False, path="userspace+htb", subnet="10.0.0.0/24")
    assert plan.commands == ()


@pytest.mark.parametrize("constraints, ok", [
    (["node.labels.zone==a"], True),
    (["node.role != manager", "engine.labels.ssd==true"], True),
    (["zone==a"], False),
    (["node.labels.zone"], False),
])
def test_placement_constraints_are_checked(tmp_path, constraints, ok):
    from orchestrator.experiment.spec import load_experiment  # noqa: PLC0415
    from orchestrator.errors import InputError  # noqa: PLC0415

    path = tmp_path / "p.yaml"
    path.write_text(f"nodes: {{count: 2, router: gossipsub, resources: {{placement: {constraints!r}}}}}\n"
                    "overlay: {type: random, degree: 1}\n")
    if ok:
        resolved = load_experiment(path).resolve()
        assert {n.placement for n in resolved.nodes} == {tuple(constraints)}
    else:
        with pytest.raises(InputError, match=r"p.yaml:1: nodes.resources.placement\[0\]: expected a swarm placement"):
            load_experiment(path)


def test_top_level_placement_is_every_group_default(tmp_path):
    from orchestrator.experiment.spec import load_experiment  # noqa: PLC0415

    path = tmp_path / "p.yaml"
    path.write_text("resources: {placement: ['node.labels.zone==a']}\n"
                    "groups:\n"
                    "  - {name: a, count: 1, router: gossipsub}\n"
                    "  - {name: b, count: 1, router: gossipsub, resources: {placement: ['node.labels.zone==b']}}\n"
                    "overlay: {type: random, degree: 1}\n")
    resolved = load_experiment(path).resolve()
    assert {n.name: n.placement for n in resolved.nodes} == {"a-0": ("node.labels.zone==a",),
                                                              "b-0": ("node.labels.zone==b",)}


def test_a_bad_constraint_exits_2_naming_the_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("nodes:\n  count: 2\n  router: gossipsub\n  resources: {placement: [zone-a]}\n"
                    "overlay: {type: random, degree: 1}\n")
    out = subprocess.run([TESTBED, "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "p.yaml:4: nodes.resources.placement[0]" in out.stderr and "Traceback" not in out.stderr


def test_the_schema_lists_placement():
    from orchestrator.experiment.spec import experiment_json_schema  # noqa: PLC0415

    resources = experiment_json_schema()["properties"]["resources"]
    placement = resources["anyOf"][0]["properties"]["placement"] if "anyOf" in resources else \
        resources["properties"]["placement"]
    assert "node.labels.zone==a" in str(placement)


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_collected_files_land_where_readers_look(tmp_path):
    _extract(_tar({"node/trace.pb": b"T", "node/lag.json": b"{}", "node/node.log": b"L",
                   "node/shaping.json": b"{}", "node/config.json": b"secret"}), "n3", tmp_path)
    assert (tmp_path / "traces" / "n3.pb").read_bytes() == b"T"
    assert {p.name for p in (tmp_path / "node-logs").iterdir()} == {"n3.lag.json", "n3.log", "n3.shaping.json"}


class Obj:
    """A docker-py object: attrs with labels, remove() that fails `fails` times."""

    def __init__(self, kind, name, testbed, state, log, fails=0, spec_labels=False):
        labels = {LABEL_TESTBED: testbed, LABEL_STATE: state}
        self.attrs = {"Spec": {"Name": name, "Labels": labels}} if spec_labels else {"Labels": labels, "Scope": "swarm"}
        self.id, self.name, self.kind, self.log, self.fails = f"id-{name}", name, kind, log, fails

    def remove(self, **kw):
        if self.fails:
            self.fails -= 1
            raise docker.errors.APIError("in use", explanation=f"{self.kind} is in use")
        self.log.append(self.kind)


class Listing:
    def __init__(self, objs):
        self.objs = objs

    def list(self, filters=None):
        return list(self.objs)


class FakeClient:
    def __init__(self, log, state):
        self.services = Listing([Obj("service", "gtb-a-n0", "a", state, log, spec_labels=True)])
        self.networks = Listing([Obj("network", "gtb-a", "a", state, log, fails=2)])
        self.secrets = Listing([Obj("secret", "gtb-a-n0-1", "a", state, log, spec_labels=True),
                                Obj("secret", "gtb-b-n0-1", "b", "/other", log, spec_labels=True)])
        self.volumes = Listing([Obj("volume", "gtb-a-n0", "a", state, log)])


def test_teardown_removes_in_order_retries_and_keeps_to_its_scope():
    log: list[str] = []
    client = FakeClient(log, "/mine")
    report = teardown(client, [client], Scope(None, "/mine"), ["host2"], sleep=lambda s: None)
    assert log == ["service", "secret", "volume", "network"]  # the network once the swarm let go of it
    assert report.left == ()
    assert any("host2" in line and "not reachable" in line for line in report.removed)


def test_teardown_names_what_it_could_not_remove():
    log: list[str] = []
    client = FakeClient(log, "/mine")
    client.networks.objs[0].fails = 99
    report = teardown(client, [client], Scope("a", "/mine"), [], sleep=lambda s: None)
    assert [lf.command for lf in report.left] == ["docker network rm gtb-a"]


def test_engine_map_parses_and_refuses_nonsense(monkeypatch):
    monkeypatch.setenv("TESTBED_SWARM_ENGINES", "h2=tcp://10.0.0.2:2376, h3=ssh://root@h3")
    assert engine_urls() == {"h2": "tcp://10.0.0.2:2376", "h3": "ssh://root@h3"}
    monkeypatch.setenv("TESTBED_SWARM_ENGINES", "tcp://10.0.0.2:2376")
    with pytest.raises(BackendUnavailable, match="hostname=URL"):
        engine_urls()


def test_doctor_says_what_a_missing_swarm_costs_once_the_backend_exists():
    sys.path.insert(0, str(ROOT))
    from orchestrator.doctor.assess import assess  # noqa: PLC0415
    from tests.test_doctor import healthy  # noqa: PLC0415

    facts = healthy()
    checks = {c.name: c for c in assess(replace(facts, backends=("process", "swarm", "docker"))).checks}
    assert checks["swarm"].status == "missing"
    assert "--backend swarm cannot run" in checks["swarm"].cost
    assert checks["swarm"].fix == "docker swarm init" and "docs/swarm.md" in checks["swarm"].cost
    active = replace(facts, backends=("process", "swarm", "docker"), docker=replace(facts.docker, swarm="active"))
    assert {c.name: c for c in assess(active).checks}["swarm"].status == "ok"


class SlowOverlay:
    """An overlay network the manager gives its subnet on the third look."""

    def __init__(self):
        self.attrs, self.looks = {"IPAM": {"Config": []}}, 0

    def reload(self):
        self.looks += 1
        if self.looks == 3:
            self.attrs = {"IPAM": {"Config": [{"Subnet": "10.0.9.0/24"}]}}


def test_the_subnet_is_awaited_until_the_manager_allocates_it():
    from orchestrator.backends.swarm import backend as swarm_backend  # noqa: PLC0415

    backend = object.__new__(swarm_backend.SwarmBackend)
    backend._network, backend.testbed = SlowOverlay(), "t"
    assert backend.subnet() == "10.0.9.0/24" and backend._network.looks == 3
    backend._network.looks, backend._network.attrs = -10**9, {}
    with pytest.raises(swarm_backend.TestbedError, match="gtb-t has no subnet after 0.3 s"):
        backend.subnet(wait_s=0.3)


def _task(state: str, error: str = "", port: int | None = None):
    from orchestrator.backends.swarm.engines import Task  # noqa: PLC0415

    return Task(id=f"t-{state}-{port}", state=state, desired="running", node_id="n", container_id=None,
                published_port=port, error=error)


BUSY = ("starting container failed: unable to remount dir as readonly: mount tmpfs:/var/lib/docker/containers/"
        "x/mounts/secrets, flags: 0x21, data: uid=0,gid=0: device or resource busy")


@pytest.mark.parametrize("fails, started", [(1, True), (2, True), (3, False)])
def test_a_task_whose_container_never_started_is_started_anew_twice_at_most(fails, started):
    """CI once lost a run to the daemon failing a task's secrets mount; a
    task the router itself ended (or a missing image) is not retried."""
    from orchestrator.backends.swarm import backend as swarm_backend  # noqa: PLC0415

    backend = object.__new__(swarm_backend.SwarmBackend)
    runs, notes = [], []
    backend._tasks, backend.reporter = {}, type("R", (), {"note": lambda self, text: notes.append(text)})()
    backend._run = lambda config: runs.append(config.name)
    backend._latest = lambda node: _task("failed", BUSY) if len(runs) < fails else _task("running", port=4002)
    config = type("C", (), {"name": "n10"})()
    if started:
        backend._await_running([config])
        assert runs == ["n10"] * fails and backend._tasks["n10"].running and len(notes) == fails
    else:
        with pytest.raises(swarm_backend.TestbedError, match="n10: swarm task failed: starting container failed"):
            backend._await_running([config])
        assert runs == ["n10"] * swarm_backend.START_RETRIES
    assert not _task("failed", "task: non-zero exit (1)").never_started
    assert not _task("rejected", "No such image: gossip-testbed/router").never_started
