"""The Docker-in-Docker lab's parts that need no engine: how a node
container is asked for (every capability the engine has, not --privileged;
its own label, never the testbed's), what its entry does before dockerd, the
engine map the swarm backend reads, the image tag following its inputs; and
how collection reports a router lost with its swarm node."""

from __future__ import annotations

import json
import subprocess

import pytest

from orchestrator.backends.swarm import dind as swarm_dind
from orchestrator.dockerapi.names import LABEL, LABEL_STATE, LABEL_TESTBED
from orchestrator.errors import BackendUnavailable
from orchestrator.backends.swarm.collect import collect_one
from orchestrator.backends.swarm.engines import ENGINES_ENV, Task, engine_urls


def test_a_node_has_every_capability_but_the_one_the_engine_lacks_and_is_not_privileged():
    opts = swarm_dind.container_options("lab", 2, "gossip-testbed/dind:x")
    assert opts["name"] == opts["hostname"] == "lab-2"
    config = swarm_dind.host_config("lab", 2)
    assert "Privileged" not in config
    assert config["CapAdd"] == ["ALL"] and config["CapDrop"] == ["SYS_RESOURCE"]
    assert "seccomp=unconfined" in config["SecurityOpt"]
    assert config["MaskedPaths"] == [] and config["ReadonlyPaths"] == []
    assert config["Binds"] == ["lab-2:/var/lib/docker:rw"]
    assert config["NetworkMode"] == "lab"


def test_a_lab_carries_its_own_label_so_testbed_cleanup_never_takes_its_engines():
    labels = swarm_dind.container_options("lab", 1, "img")["labels"]
    assert labels == {swarm_dind.LABEL_DIND: "lab"}
    assert not {LABEL, LABEL_TESTBED, LABEL_STATE} & set(labels)


def test_the_entry_remounts_sys_and_cgroups_read_write_then_runs_dockerd_on_vfs():
    lines = swarm_dind.ENTRY.splitlines()
    remount = next(i for i, line in enumerate(lines) if "remount,rw /sys" in line)
    cgroups = next(i for i, line in enumerate(lines) if "remount,bind,rw" in line)
    dockerd = next(i for i, line in enumerate(lines) if "dockerd" in line)
    assert remount < cgroups < dockerd
    assert lines[dockerd].startswith("exec dockerd --storage-driver=vfs")
    assert f"tcp://0.0.0.0:{swarm_dind.ENGINE_PORT}" in lines[dockerd]
    check = subprocess.run(["sh", "-n"], input=swarm_dind.ENTRY, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr


def test_the_engine_map_is_what_the_swarm_backend_reads(monkeypatch):
    nodes = [swarm_dind.DindNode(f"lab-{i}", f"lab-{i}", f"172.30.0.{i + 1}") for i in (1, 2, 3)]
    monkeypatch.setenv(ENGINES_ENV, swarm_dind.engines_env(nodes))
    assert engine_urls() == {f"lab-{i}": f"tcp://172.30.0.{i + 1}:2375" for i in (1, 2, 3)}
    shell = swarm_dind.describe(nodes)
    assert "export DOCKER_HOST=tcp://172.30.0.2:2375" in shell


def test_the_image_tag_follows_the_base():
    assert swarm_dind.dind_image_tag("sha256:a") != swarm_dind.dind_image_tag("sha256:b")
    assert swarm_dind.dind_image_tag("sha256:a") == swarm_dind.dind_image_tag("sha256:a")
    assert swarm_dind.dind_image_tag("sha256:a").startswith(swarm_dind.DIND_REPO + ":")



class _Swarm:
    """The manager's answers a collection asks for: task list, hostnames, node state."""

    def __init__(self, state: str) -> None:
        self.state = state

    def tasks(self, service):
        return [Task("t2", "running", "running", "node3", "c2", 30001, ""),
                Task("t1", "complete", "shutdown", "node3", "c1", None, "")]

    def hostname(self, node_id):
        return {"node3": "lab-3"}[node_id]

    def node_state(self, node_id):
        return self.state

    def engine(self, node_id, why):
        raise BackendUnavailable(f"{why}: the Docker engine at tcp://172.30.0.4:2375 does not answer")


def test_a_node_whose_swarm_node_is_down_is_reported_lost_with_its_history_kept(tmp_path, monkeypatch):
    (tmp_path / "node-logs").mkdir()
    monkeypatch.delenv(ENGINES_ENV, raising=False)
    line = collect_one(_Swarm("down"), "gtb-x-g3-0", "g3-0", tmp_path, "img", {})
    assert line.startswith("g3-0: lost with swarm node lab-3")
    assert "volume gtb-x-g3-0" in line
    history = json.loads((tmp_path / "node-logs" / "g3-0.swarm.json").read_text())
    assert [h["swarm_node"] for h in history] == ["lab-3", "lab-3"]


def test_a_node_whose_named_engine_does_not_answer_is_lost_before_the_manager_notices(tmp_path, monkeypatch):
    (tmp_path / "node-logs").mkdir()
    monkeypatch.setenv(ENGINES_ENV, "lab-3=tcp://172.30.0.4:2375")
    line = collect_one(_Swarm("ready"), "gtb-x-g3-0", "g3-0", tmp_path, "img", {})
    assert line.startswith("g3-0: lost with swarm node lab-3 (the manager reports it ready, its engine does not")


def test_a_node_on_a_ready_swarm_node_with_no_engine_named_is_not_called_lost(tmp_path, monkeypatch):
    (tmp_path / "node-logs").mkdir()
    monkeypatch.delenv(ENGINES_ENV, raising=False)
    line = collect_one(_Swarm("ready"), "gtb-x-g3-0", "g3-0", tmp_path, "img", {})
    assert line.startswith("g3-0: traces not collected:") and "lost" not in line


def test_down_after_a_graceful_down_reports_its_lines_and_does_not_clean_up_again(tmp_path, monkeypatch):
    """The graceful down ran the one cleanup (its lines, a swarm node's
    unchecked volumes included, are what `down` reports); a second one is
    not run."""
    from orchestrator.run import runs  # noqa: PLC0415
    from orchestrator.records.state import StateStore  # noqa: PLC0415

    store = StateStore(tmp_path / "state")
    store.create({"name": "tb", "backend": "swarm", "status": "up"})
    note = "volumes on swarm node lab-3 not checked: its Docker engine is not reachable"

    class Graceful:
        def down(self) -> list[str]:
            return [note]

    monkeypatch.setattr(runs.Controller, "attach", staticmethod(lambda *a, **k: Graceful()))
    monkeypatch.setattr(runs, "_cleanup_with", lambda *a: pytest.fail(f"a second cleanup: {a}"))
    assert runs.down_testbed("tb", store) == [note]
