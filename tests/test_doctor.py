"""`testbed doctor`: the console script as a CI job runs it (one JSON
document, the exit status this machine deserves, findings that match what the
machine really has), and every probe and verdict with its inputs faked."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import docker.errors
import pytest

from orchestrator.shaping import delayline

from orchestrator.shaping import tc
from orchestrator.doctor import Host, HostFacts, assess
from orchestrator.doctor import facts as F
from orchestrator.doctor.budget import router_budget
from orchestrator.doctor.lockcheck import drift, lock_pins
from orchestrator.images.router import IMAGE_REPO, SLIM, ImageStatus

TESTBED = Path(sys.executable).parent / "testbed"


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    assert TESTBED.exists(), f"the console script is not installed at {TESTBED} (run ./bootstrap.sh)"
    return subprocess.run([str(TESTBED), *argv], capture_output=True, text=True, timeout=300,
                          env=env if env is not None else os.environ.copy(), stdin=subprocess.DEVNULL)


def by_name(document: dict) -> dict[str, dict]:
    return {c["name"]: c for c in document["checks"]}


# ---------------------------------------------------------------- the console script on this machine


def _kernel_has_netem() -> bool | None:
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode(errors="replace")
    except OSError:
        return None
    return "CONFIG_NET_SCH_NETEM=y" in text or "CONFIG_NET_SCH_NETEM=m" in text


def _docker_answers() -> bool:
    from orchestrator.dockerapi.client import docker_available  # noqa: PLC0415

    return docker_available()[0]


@pytest.fixture(scope="module")
def doctor_json() -> tuple[subprocess.CompletedProcess, dict]:
    result = cli("doctor", "--json")
    return result, json.loads(result.stdout)  # the whole of stdout is one document


def test_json_is_one_document_and_the_exit_status_is_the_demos(doctor_json):
    result, document = doctor_json
    from analysis.spark import java_available  # noqa: PLC0415

    can_run_demo = java_available() and F.distribution_version("pyspark") is not None
    assert document["demo_ok"] is can_run_demo
    assert result.returncode == (0 if can_run_demo else 1), result.stderr
    assert document["default_backend"] == ("docker" if _docker_answers() else "process")


def test_findings_match_this_machine(doctor_json):
    _, document = doctor_json
    checks = by_name(document)
    assert checks["docker"]["status"] == ("ok" if _docker_answers() else "missing")
    kvm = F.kvm(F.Host())
    assert checks["kvm"]["status"] == {"rw": "ok", "pvm": "limited"}.get(kvm, "missing")
    netem = _kernel_has_netem()
    if netem is False and delayline.unavailable() is None:  # this project's machines: no sch_netem, a delay line
        assert checks["kernel shaping"]["status"] == "ok"
        assert "netem no" in checks["kernel shaping"]["found"] and "delay line" in checks["kernel shaping"]["found"]
    elif netem is False:
        assert checks["kernel shaping"]["status"] in ("limited", "missing")
        assert "netem no" in checks["kernel shaping"]["found"]
        assert "user space" in checks["kernel shaping"]["cost"]
    elif netem is True:
        assert "netem yes" in checks["kernel shaping"]["found"]
    assert checks["environment"]["status"] == "ok", checks["environment"]["found"]
    if _docker_answers():
        from orchestrator.dockerapi.client import docker_client  # noqa: PLC0415

        driver = docker_client().info()["Driver"]
        assert checks["docker storage"]["found"].startswith(f"storage driver {driver}")
        assert checks["docker storage"]["status"] == ("limited" if driver in ("fuse-overlayfs", "vfs") else "ok")
    budget = document["router_budget"]
    assert budget["routers"] == min(budget["by_memory"], budget["by_cpu"]) > 0
    assert budget["cores"] == len(os.sched_getaffinity(0))


def test_without_java_the_demo_cannot_run_and_the_fix_is_named(tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = str(empty)
    result = cli("doctor", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the demo cannot run" in result.stdout
    assert "default-jre-headless" in result.stdout
    assert "Traceback" not in result.stderr


def test_table_names_every_check():
    result = cli("doctor")
    assert result.returncode in (0, 1), result.stderr
    for name in ("docker", "swarm", "router image", "docker storage", "kernel shaping", "java", "pyspark",
                 "spark start", "kvm", "qemu", "cargo/rustc", "py-libp2p venv", "memory and cores"):
        assert name in result.stdout
    assert "router budget: about" in result.stdout


# ---------------------------------------------------------------- probes with a faked host


def fake_host(outputs: dict[str, str] | None = None, paths: dict[str, int] | None = None,
              env: dict[str, str] | None = None, files: dict[str, str] | None = None) -> Host:
    """`outputs`: command name → what `NAME --version` (or `-version`) prints;
    `paths`: path → the access bits it grants (absent: no such path)."""
    outputs, paths, files = outputs or {}, paths or {}, files or {}

    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if name in outputs else None

    def run(argv) -> str | None:
        return outputs.get(Path(argv[0]).name) if argv[0].startswith("/usr/bin/") else outputs.get(argv[0])

    def access(path: str, mode: int) -> bool:
        return path in paths and (mode == os.F_OK or paths[path] & mode == mode)

    return Host(which=which, run=run, read_text=files.get, access=access, env=env or {})


def test_java_version_from_path_and_from_java_home():
    banner = 'openjdk version "17.0.13" 2024-10-15\nOpenJDK Runtime Environment (build 17.0.13+11)\n'
    assert F.java(fake_host({"java": banner})) == "17.0.13"
    host = fake_host({"/opt/jdk/bin/java": 'java version "21.0.2"'}, paths={"/opt/jdk/bin/java": os.X_OK},
                     env={"JAVA_HOME": "/opt/jdk"})
    assert F.java(host) == "21.0.2"
    assert F.java(fake_host()) is None


def test_tool_versions_are_the_version_numbers():
    host = fake_host({
        "cargo": "cargo 1.95.0 (f2d3ce0bd 2026-03-21)\n",
        "qemu-system-x86_64": "QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u12)\nCopyright",
        "chromium": "Chromium 131.0.6778.85 built on Debian GNU/Linux 12 (bookworm)\n",
    })
    assert F.tool_version(host, "cargo") == "1.95.0"
    assert F.tool_version(host, "qemu-system-x86_64") == "7.2.15"
    assert F.chromium(host) == "131.0.6778.85"
    assert F.tool_version(host, "rustc") is None


def test_kvm_states():
    assert F.kvm(fake_host()) == "absent"
    assert F.kvm(fake_host(paths={"/dev/kvm": 0})) == "no access"
    assert F.kvm(fake_host(paths={"/dev/kvm": os.R_OK | os.W_OK})) == "rw"
    pvm = {"/dev/kvm": os.R_OK | os.W_OK, "/sys/module/kvm_pvm": 0}
    assert F.kvm(fake_host(paths=pvm)) == "pvm"
    assert F.kvm(fake_host(paths={**pvm, "/sys/module/kvm_intel": 0})) == "rw"


def test_pylibp2p_venv(tmp_path):
    python = str(tmp_path / "bin" / "python")
    assert F.pylibp2p(fake_host(paths={python: os.X_OK}), venv=tmp_path) == python
    assert F.pylibp2p(fake_host(), venv=tmp_path) is None


def test_meminfo():
    text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20480000 kB\n"
    assert F.meminfo(text) == F.Memory(24576000 * 1024, 20480000 * 1024)
    assert F.meminfo("MemTotal: 1 kB\n") is None
    assert F.meminfo(None) is None


class FakeImage:
    def __init__(self, image_id: str, tags: list[str]):
        self.id, self.tags = image_id, tags


class FakeImages:
    def __init__(self, images: list[FakeImage]):
        self._images = images

    def list(self, repo: str | None = None, **_filters):
        return [i for i in self._images if repo is None or any(t.split(":")[0] == repo for t in i.tags)]

    def get(self, ref: str):
        for image in self._images:
            if ref in image.tags:
                return image
        raise docker.errors.ImageNotFound(ref)


class FakeClient:
    def __init__(self, images: list[FakeImage], swarm: str = "inactive", driver: str = "overlay2"):
        self.images, self._swarm, self._driver, self.closed = FakeImages(images), swarm, driver, False

    def version(self):
        return {"Version": "27.3.1"}

    def info(self):
        return {"Swarm": {"LocalNodeState": self._swarm}, "Driver": self._driver}

    def close(self):
        self.closed = True


def test_docker_facts_without_a_daemon():
    def refuse():
        raise RuntimeError("no Docker daemon reachable at unix:///var/run/docker.sock")

    facts = F.docker_facts(refuse)
    assert facts.version is None and "no Docker daemon" in facts.error and facts.image is None


def test_docker_facts_image_stale_then_up_to_date():
    old = FakeImage("sha256:old", [f"{IMAGE_REPO}:000000000000"])
    client = FakeClient([FakeImage("sha256:slim", [SLIM]), old], swarm="active", driver="fuse-overlayfs")
    facts = F.docker_facts(lambda: client)
    assert client.closed
    assert (facts.version, facts.swarm, facts.storage) == ("27.3.1", "active", "fuse-overlayfs")
    assert facts.image.base == SLIM and not facts.image.present
    assert facts.image.others == (f"{IMAGE_REPO}:000000000000",)
    current = FakeImage("sha256:new", [facts.image.tag])
    fresh = F.docker_facts(lambda: FakeClient([FakeImage("sha256:slim", [SLIM]), current]))
    assert fresh.image.present and fresh.image.tag == facts.image.tag


def test_docker_facts_without_a_base_image():
    facts = F.docker_facts(lambda: FakeClient([]))
    assert facts.image == ImageStatus(None, None, False, ())


def test_lock_drift():
    lock = ("# header\nfoo==1.0 \\\n    --hash=sha256:ab\n    # via bar\nTyping_Extensions==4.16.0 \\\n"
            "    --hash=sha256:cd\n")
    pins = lock_pins(lock)
    assert pins == {"foo": "1.0", "typing-extensions": "4.16.0"}
    assert drift(pins, {"foo": "1.0", "typing-extensions": "4.16.0"}) == ()
    assert drift(pins, {"foo": "2.0", "extra": "1"}) == (
        "extra 1 not in the lock", "foo 2.0 (lock 1.0)", "typing-extensions missing (lock 4.16.0)")


# ---------------------------------------------------------------- verdicts


def healthy() -> HostFacts:
    return HostFacts(
        system="Linux", python="3.11.7", root=True, lock_drift=(), locked_packages=46,
        backends=("process", "docker"), default_backend="docker",
        docker=F.DockerFacts("27.3.1", "", "inactive",
                             ImageStatus(SLIM, f"{IMAGE_REPO}:abc", True, ()), storage="overlay2"),
        shaping=tc.NetemProbe(True, True, True, "netns", "ok"), delay_line=None, own_bridge=None,
        java="17.0.13", pyspark="4.3.0", spark_start_s=None, spark_error="",
        kvm="rw", qemu="7.2.15", cargo="1.95.0", rustc="1.95.0", pylibp2p="/x/.venv-pylibp2p/bin/python",
        chromium="131.0", memory=F.Memory(24 * 2**30, 20 * 2**30), cores=2,
    )


def checks_of(facts: HostFacts):
    report = assess(facts)
    return report, {c.name: c for c in report.checks}


def test_a_healthy_host_can_run_the_demo():
    report, checks = checks_of(healthy())
    assert report.demo_ok and report.problems == ()
    assert {c.status for c in report.checks} <= {"ok", "skipped", "missing"}
    assert checks["swarm"].status == "missing" and checks["swarm"].fix == "docker swarm init"
    assert "no swarm backend" in checks["swarm"].cost
    assert checks["kernel shaping"].status == "ok"


def test_no_java_blocks_the_demo_with_its_fix():
    report, checks = checks_of(replace(healthy(), java=None))
    assert not report.demo_ok
    assert [c.name for c in report.problems] == ["java"]
    assert "default-jre-headless" in checks["java"].fix


def test_a_spark_that_will_not_start_blocks_the_demo():
    report, checks = checks_of(replace(healthy(), spark_error="JVM died"))
    assert [c.name for c in report.problems] == ["spark start"]
    report, checks = checks_of(replace(healthy(), spark_start_s=6.25))
    assert checks["spark start"].status == "ok" and "6.2 s" in checks["spark start"].found


def test_no_docker_means_the_process_backend_not_a_failure():
    no_docker = F.DockerFacts(None, "no Docker daemon reachable", None, None)
    report, checks = checks_of(replace(healthy(), docker=no_docker, default_backend="process"))
    assert report.demo_ok
    assert checks["docker"].status == "missing" and "systemctl start docker" in checks["docker"].fix
    assert checks["router image"].status == "skipped" and checks["swarm"].status == "skipped"


def test_a_storage_driver_with_a_cost_per_container_is_limited_and_names_the_fix():
    assert checks_of(healthy())[1]["docker storage"].status == "ok"
    for driver in ("fuse-overlayfs", "vfs"):
        report, checks = checks_of(replace(healthy(), docker=replace(healthy().docker, storage=driver)))
        check = checks["docker storage"]
        assert report.demo_ok and check.status == "limited" and driver in check.found
        assert "`up` of 250" in check.cost and "overlay2" in check.fix and "testbed image build" in check.fix
    no_docker = F.DockerFacts(None, "no Docker daemon reachable", None, None)
    assert checks_of(replace(healthy(), docker=no_docker))[1]["docker storage"].status == "skipped"


def test_kernel_without_netem_is_limited_and_says_what_it_costs():
    shaping = tc.NetemProbe(False, True, True, "netns", "failed")
    report, checks = checks_of(replace(healthy(), shaping=shaping, delay_line="gtb-delayline is not built"))
    check = checks["kernel shaping"]
    assert report.demo_ok and check.status == "limited"
    assert "netem no, htb yes, tbf yes" in check.found and "no delay line: gtb-delayline is not built" in check.found
    assert "user space" in check.cost and "sch_netem" in check.fix and "delay line" in check.fix


def test_kernel_without_netem_but_with_the_delay_line_shapes_every_link():
    report, checks = checks_of(replace(healthy(), shaping=tc.NetemProbe(False, True, True, "netns", "failed")))
    check = checks["kernel shaping"]
    assert check.status == "ok" and "netem no" in check.found and "delay line" in check.found


def test_a_testbed_network_without_root_is_a_docker_network_and_says_what_it_costs():
    assert checks_of(healthy())[1]["testbed network"].status == "ok"
    report, checks = checks_of(replace(healthy(), root=False, own_bridge="an own bridge needs root"))
    check = checks["testbed network"]
    assert report.demo_ok and check.status == "limited" and "needs root" in check.found
    assert "one at a time" in check.cost and "root" in check.fix


def test_kernel_probe_without_root_says_so():
    shaping = tc.NetemProbe(True, True, True, "config", "/proc/config.gz")
    _, checks = checks_of(replace(healthy(), shaping=shaping, root=False))
    check = checks["kernel shaping"]
    assert check.status == "limited" and "kernel config" in check.found and "needs root" in check.found
    _, checks = checks_of(replace(healthy(), shaping=tc.NetemProbe(None, False, None, "netns", "")))
    assert checks["kernel shaping"].status == "missing"


def test_stale_image_and_drifted_environment():
    stale = ImageStatus(SLIM, f"{IMAGE_REPO}:new", False, (f"{IMAGE_REPO}:old",))
    facts = replace(healthy(), docker=replace(healthy().docker, image=stale),
                    lock_drift=("pyspark 4.2.0 (lock 4.3.0)",))
    report, checks = checks_of(facts)
    assert report.demo_ok
    assert checks["router image"].status == "limited" and checks["router image"].fix == "testbed image build"
    assert f"{IMAGE_REPO}:old" in checks["router image"].found
    assert checks["environment"].status == "limited" and checks["environment"].fix == "./bootstrap.sh"
    assert "pyspark 4.2.0 (lock 4.3.0)" in checks["environment"].found


def test_missing_optional_pieces_name_their_fix():
    facts = replace(healthy(), kvm="absent", qemu=None, cargo=None, rustc=None, pylibp2p=None, chromium=None)
    report, checks = checks_of(facts)
    assert report.demo_ok
    for name in ("kvm", "qemu", "cargo/rustc", "py-libp2p venv", "chromium"):
        assert checks[name].status == "missing" and checks[name].fix and checks[name].cost


def test_pvm_kvm_is_limited_not_ok():
    report, checks = checks_of(replace(healthy(), kvm="pvm"))
    assert report.demo_ok
    assert checks["kvm"].status == "limited" and "PVM" in checks["kvm"].found and "TCG" in checks["kvm"].cost


def test_router_budget_formula():
    budget = router_budget(cores=2, available_bytes=20 * 2**30)
    assert budget.by_memory == (19 * 2**30) // (40 * 2**20) == 486
    assert budget.by_cpu == int(2 * 0.5 / 0.001) == 1000
    assert (budget.routers, budget.bound) == (486, "memory")
    small = router_budget(cores=8, available_bytes=2 * 2**30)
    assert (small.routers, small.bound) == (25, "memory")
    assert router_budget(cores=1, available_bytes=2**29).routers == 0


def test_report_to_dict_round_trips_through_json():
    report = assess(replace(healthy(), java=None))
    document = json.loads(json.dumps(report.to_dict()))
    assert document["demo_ok"] is False
    assert by_name(document)["java"]["blocks_demo"] is True
    assert document["router_budget"]["routers"] == 486 and "40 MiB" in document["router_budget"]["formula"]
