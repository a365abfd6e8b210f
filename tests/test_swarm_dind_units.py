"""The Docker-in-Docker lab's parts that need no engine: how a node
container is asked for (every capability the engine has, not --privileged;
its own label, never the testbed's), what its entry does before dockerd, the
engine map the swarm backend reads, and the image tag following its inputs."""

from __future__ import annotations

import subprocess

from orchestrator import swarm_dind
from orchestrator.docker_util import LABEL, LABEL_STATE, LABEL_TESTBED
from orchestrator.swarm_engine import ENGINES_ENV, engine_urls


def test_a_node_has_every_capability_but_the_one_the_engine_lacks_and_is_not_privileged():
    opts = swarm_dind.container_options("lab", 2, "gossip-testbed/dind:x")
    assert opts["name"] == opts["hostname"] == "lab-2"
    assert "privileged" not in opts
    assert opts["cap_add"] == ["ALL"] and opts["cap_drop"] == ["SYS_RESOURCE"]
    assert "seccomp=unconfined" in opts["security_opt"]
    assert opts["volumes"] == {"lab-2": {"bind": "/var/lib/docker", "mode": "rw"}}
    assert opts["network"] == "lab"


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

