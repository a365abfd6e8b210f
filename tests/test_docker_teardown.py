"""Teardown on a real Docker engine: a failed run cleans up like a successful
one (readiness timeout with many containers, an exception in the workload,
SIGTERM and Ctrl-C of the CLI), `down` keeps the record and names the command
when something cannot be removed, `testbed gc` lists before it removes, and
each container can only touch its own node directory.

Every test works under its own TESTBED_STATE_DIR and removes only what it
made; `testbed gc` is only run scoped to a testbed the test created (or with
--dry-run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docker_fixtures import (  # noqa: F401 - fixtures
    SINK_ENTRYPOINT,
    docker_backends,
    needs_docker,
    node_image,
    sink_config,
    tcp_reachable,
    unique_testbed,
    wait_for,
)
from orchestrator.host import iptables
from orchestrator.backends.docker import own_bridge
from orchestrator.backends.docker.wiring import DOCKER_NETWORK, ENV, OWN_BRIDGE
from tests.kill_harness import host_side, labelled, live_netns, records, netns_keys
from tests.readiness_harness import experiment_text, readiness_tries

pytestmark = [pytest.mark.docker, needs_docker]

TESTBED = Path(sys.executable).parent / "testbed"


def experiment(tmp_path: Path, name: str, nodes: int, messages: int = 1, interval: str = "100ms") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(experiment_text(name, nodes, messages, interval))
    return path


def state_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}


def assert_nothing_left(state: Path, netns: set[str]) -> None:
    assert labelled(state) == {"container": [], "network": [], "volume": []}
    assert records(state) == []
    assert live_netns(netns) == []
    assert host_side(state) == {"delay lines": [], "iptables rules": [], "bridges": []}


def test_two_readiness_timeouts_in_a_row_with_thirty_containers_leave_nothing(tmp_path, node_image):
    """Issue #17's failure, scaled to CI: runs that fail at readiness, twice in
    a row (the second starts at once), each tearing down everything it made."""
    results = readiness_tries(30, 2, tmp_path, report=lambda _line: None)
    for r in results:
        assert "never came up" in r.error, r.line()
        assert r.started == 30, r.line()
        assert r.clean, r.line()
        manifest = json.loads((tmp_path / f"run-{r.index}" / "manifest.json").read_text())
        iso = manifest["isolation"]
        assert manifest["status"] == "finished" and iso["cap_drop"] == ["ALL"] and iso["read_only_rootfs"]
        assert int(iso["user"].split(":")[0]) != 0 and iso["mounts"][0].startswith("run_dir/nodes/<node> at /node")
        assert "never came up" in (tmp_path / f"run-{r.index}" / "events.jsonl").read_text()


def test_an_exception_in_the_workload_tears_down(tmp_path, monkeypatch, node_image):
    from cli.postrun import plan_runs
    from orchestrator.run.controller import Controller
    from orchestrator.run.runs import run_experiment

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))

    def broken(self, resolved):
        raise RuntimeError("workload broke")

    monkeypatch.setattr(Controller, "run_workload", broken)
    planned = plan_runs(experiment(tmp_path, "wl", 4), None, tmp_path / "run", "docker", None).runs[0]
    with pytest.raises(RuntimeError, match="workload broke"):
        run_experiment(planned.resolved, planned.resolved_yaml, "docker", planned.run_dir)
    assert_nothing_left(tmp_path / "state", set())
    assert len(list((tmp_path / "run" / "traces").glob("*.pb"))) == 4


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signalled_run_tears_down_before_it_exits(tmp_path, sig, code, node_image):
    env = state_env(tmp_path)
    state = tmp_path / "state"
    file = experiment(tmp_path, "sig", 6, messages=300, interval="100ms")
    proc = subprocess.Popen([str(TESTBED), "run", str(file), "--backend", "docker", "--no-report",
                             "--out", str(tmp_path / "run")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        events = tmp_path / "run" / "events.jsonl"
        assert wait_for(lambda: proc.poll() is not None or (events.is_file() and '"all_up"' in events.read_text()),
                        timeout=120)
        assert proc.poll() is None, proc.communicate()
        netns = netns_keys(state)
        assert len(netns) == 6
        time.sleep(1.0)  # in the workload
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert_nothing_left(state, netns)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["status"] == "finished"


def test_down_ends_and_removes_the_testbed_once(tmp_path, monkeypatch, node_image):
    """`testbed down NAME` through the real code path: the host's network is
    ended once and the converging removal (listing, then removing, every
    labelled object) runs once; it ran three times (the backend's destroy,
    the controller, then `down`'s own cleanup)."""
    from orchestrator.backends.docker import teardown as docker_teardown
    from orchestrator.backends.docker.netns import Netns
    from tests.cli_helpers import run_cli

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    calls: list[str] = []
    real_teardown, real_end = docker_teardown.teardown, Netns.end_host_network

    def teardown(*args, **kwargs):
        calls.append("teardown")
        return real_teardown(*args, **kwargs)

    def end_host_network(self):
        calls.append("end_host_network")
        real_end(self)

    monkeypatch.setattr(docker_teardown, "teardown", teardown)
    monkeypatch.setattr(Netns, "end_host_network", end_host_network)
    name = f"once-{os.getpid()}"
    assert run_cli("up", str(experiment(tmp_path, "once", 4)), "--backend", "docker", "--name", name,
                   "--out", str(tmp_path / "run")) == 0
    assert calls == []
    assert run_cli("down", name) == 0
    assert calls == ["end_host_network", "teardown"]
    assert_nothing_left(tmp_path / "state", set())


def test_down_keeps_the_record_and_names_the_command_when_something_stays(tmp_path, monkeypatch, capsys):
    from orchestrator.backends.docker.backend import DockerBackend
    from orchestrator.errors import TeardownIncomplete
    from orchestrator.records.state import StateStore
    from tests.cli_helpers import run_cli

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    store = StateStore()
    store.create({"name": "stuck", "backend": "docker", "run_dir": str(tmp_path / "run"), "nodes": {}})
    command = "docker network rm gtb-stuck || (systemctl restart docker && docker network rm gtb-stuck)"
    stuck = [True]

    def cleanup(cls, testbed, store):
        if stuck[0]:
            raise TeardownIncomplete([f"network gtb-stuck was not removed: active endpoints; remove it with: {command}"],
                                     [])
        return []

    monkeypatch.setattr(DockerBackend, "cleanup", classmethod(cleanup))
    assert run_cli("down", "stuck") == 1
    assert command in capsys.readouterr().err
    assert store.exists("stuck")
    assert run_cli("down", "--all", "--json") == 1
    assert json.loads(capsys.readouterr().out)["left"][0].endswith(command)
    assert store.exists("stuck")
    stuck[0] = False  # the user ran the command: a later down finishes
    assert run_cli("down", "stuck") == 0
    assert not store.exists("stuck")


def test_down_through_the_cli_exits_1_names_what_stays_and_keeps_the_record_until_it_is_gone(tmp_path, node_image):
    """A real leftover: an unlabelled container someone attached to the
    testbed's network. `testbed down` removes everything of ours, leaves that
    network (never touching the foreign container), exits 1 naming the
    network and the command, and keeps the record; once the command has run,
    the next `down` finishes and forgets the testbed."""
    env = {**state_env(tmp_path), ENV: DOCKER_NETWORK}  # the leftover here is a Docker network's
    state = tmp_path / "state"
    name = f"stay-{os.getpid()}"
    network, foreign = f"gtb-{name}", f"foreign-{os.getpid()}"
    up = subprocess.run([str(TESTBED), "up", str(experiment(tmp_path, "stay", 4)), "--backend", "docker", "--name",
                         name, "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        subprocess.run(["docker", "run", "-d", "--name", foreign, "--network", network, "--entrypoint", "sleep",
                        node_image, "300"], check=True, capture_output=True)
        down = subprocess.run([str(TESTBED), "down", name], env=env, capture_output=True, text=True, timeout=300)
        command = f"docker network disconnect -f {network} {foreign} && docker network rm {network}"
        assert down.returncode == 1, down.stderr
        assert f"network {network} was not removed" in down.stderr and foreign in down.stderr
        assert command in " ".join(down.stderr.split()), down.stderr
        assert labelled(state) == {"container": [], "network": [network], "volume": []}
        assert records(state) == [name]
        subprocess.run(command, shell=True, check=True, capture_output=True)  # what the user is told to do
        again = subprocess.run([str(TESTBED), "down", name], env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert_nothing_left(state, set())
    finally:
        subprocess.run(["docker", "rm", "-f", foreign], capture_output=True)
        subprocess.run([str(TESTBED), "down", "--all"], env=env, capture_output=True, timeout=300)


def test_gc_lists_asks_and_removes_a_testbed_from_another_state_dir(docker_backends, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state-a"))
    backend = docker_backends(unique_testbed("gc"), entrypoint=SINK_ENTRYPOINT)
    addresses = backend.prepare(["n0"])
    backend.start(sink_config(backend, "n0", addresses))
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state-b")}  # a state dir that knows nothing

    def gc(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([str(TESTBED), "gc", *args], env=env, input=stdin, capture_output=True, text=True,
                              timeout=120)

    # `down --all` of the other state dir does not see it
    down = subprocess.run([str(TESTBED), "down", "--all", "--json"], env=env, capture_output=True, text=True)
    assert down.returncode == 0 and json.loads(down.stdout)["removed"] == []
    # the unscoped listing finds it, removes nothing
    listing = gc("--dry-run", "--json")
    assert listing.returncode == 0, listing.stderr
    doc = json.loads(listing.stdout)
    found = {(r["kind"], r["name"]) for r in doc["found"]}
    on_network = backend.wiring.kind == DOCKER_NETWORK
    net = ("network", backend.network_name) if on_network else ("bridge", backend.wiring.bridge)
    assert {("container", f"gtb-{backend.testbed}-n0"), net} <= found
    ours = [r for r in doc["found"] if r["testbed"] == backend.testbed]
    assert doc["removed"] == [] and all(r["state"] for r in ours if r["kind"] in ("container", "network"))
    # asked and declined: nothing removed, exit 1
    declined = gc("--testbed", backend.testbed, stdin="n\n")
    assert declined.returncode == 1 and "remove " in declined.stderr
    assert "1 container" in declined.stderr and f"1 {net[0]}," in declined.stderr
    assert net[1] in declined.stdout
    assert len(labelled(tmp_path / "state-a")["container"]) == 1
    # --json cannot prompt
    assert gc("--testbed", backend.testbed, "--json").returncode == 2
    removed = gc("--testbed", backend.testbed, "--yes", "--json")
    assert removed.returncode == 0, removed.stderr
    assert len(json.loads(removed.stdout)["removed"]) == len(ours)
    assert labelled(tmp_path / "state-a") == {"container": [], "network": [], "volume": []}
    assert own_bridge.admitted(backend.testbed, None) == [] and iptables.admitted(None, backend.testbed, None) == []


def test_a_container_touches_only_its_own_node_directory(docker_backends):
    backend = docker_backends()  # the real router
    addresses = backend.prepare(["a", "b"])
    backend.start(sink_config(backend, "a", addresses))
    backend.start(sink_config(backend, "b", addresses, peers=["a"]))
    assert wait_for(lambda: tcp_reachable(backend.ips["b"], 9000))
    container = backend._container("a")
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in container.attrs["Mounts"]}
    assert mounts.pop("/node") == (str(backend.run_dir / "nodes" / "a"), True)
    if backend.wiring.kind == OWN_BRIDGE:  # every node's name and address, read-only (docker_wiring.py)
        assert mounts.pop("/etc/hosts") == (str(backend.run_dir / "nodes" / "hosts"), False)
        assert mounts.pop("/etc/resolv.conf") == (str(backend.run_dir / "nodes" / "resolv.conf"), False)
    # the rest: the router image's own code and libraries, unpacked once on the
    # host and shared read-only by its containers (orchestrator/images/tree.py)
    assert mounts == {bind["bind"]: (source, False) for source, bind in backend._shared.items()}
    uid = int(container.attrs["Config"]["User"].split(":")[0])
    assert uid != 0
    probe = (
        "import os\n"
        "print(os.getuid())\n"
        "for p in ('/node/x', '/x', '/run-dir/x', '/usr/lib/x', '/opt/x'):\n"
        "    try:\n"
        "        open(p, 'w').close(); print(p, 'ok')\n"
        "    except OSError as e:\n"
        "        print(p, type(e).__name__)\n"
        "print(sorted(os.listdir('/node')))\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
        "print(status['CapEff'].strip(), status['CapBnd'].strip(), status['NoNewPrivs'].strip())\n"
    )
    out = container.exec_run(["python3", "-c", probe]).output.decode().split("\n")
    assert out[0] == str(uid)
    assert out[1] == "/node/x ok" and out[2] == "/x OSError" and out[3] == "/run-dir/x FileNotFoundError"
    assert out[4] == "/usr/lib/x OSError" and out[5] == "/opt/x OSError"
    assert "trace.pb" in out[6] and "config.json" in out[6]
    assert out[7] == "0000000000000000 0000000000000000 1"  # no capability, none to gain, no-new-privileges
    host = container.attrs["HostConfig"]
    assert (host["CapDrop"], host["ReadonlyRootfs"], host["Privileged"]) == (["ALL"], True, False)
    assert "no-new-privileges" in host["SecurityOpt"]
    node_dir = backend.run_dir / "nodes" / "a"
    assert node_dir.stat().st_uid == uid and node_dir.stat().st_mode & 0o777 == 0o700
    assert wait_for(lambda: (backend.run_dir / "traces" / "a.pb").is_file())
    assert (backend.run_dir / "traces" / "a.pb").resolve() == node_dir / "trace.pb"
    assert (node_dir / "trace.pb").stat().st_uid == uid
    assert backend.isolation()["user"] == container.attrs["Config"]["User"]
    assert len(backend.isolation()["mounts"]) == 1 + bool(backend._shared) + (backend.wiring.kind == OWN_BRIDGE)

