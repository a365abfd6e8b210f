"""What the doctor looks at, gathered in one pass and judged nowhere here
(assess.py does that). Every probe reads the host through a `Host` (which,
run, read, access), so tests fake the host rather than patch the code; the
Docker facts come from a client the caller may replace the same way."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.shaping import delayline

from orchestrator.backends.docker import own_bridge

from orchestrator.shaping import tc
from orchestrator.doctor.lockcheck import canonical, drift, lock_pins
from orchestrator.images.router import ImageStatus, image_status

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK_FILE = REPO_ROOT / "requirements.lock"
PYLIBP2P_VENV = REPO_ROOT / ".venv-pylibp2p"
OWN_DISTRIBUTION = "gossip-testbed"
TOOL_TIMEOUT_S = 10.0


def _output(argv: Sequence[str]) -> str | None:
    """stdout and stderr of a command that exited 0; None when it could not
    run, timed out or failed."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return (result.stdout + result.stderr) if result.returncode == 0 else None


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class Host:
    """The doctor's only ways of looking at the machine."""

    which: Callable[[str], str | None] = shutil.which
    run: Callable[[Sequence[str]], str | None] = _output
    read_text: Callable[[str], str | None] = _read_text
    access: Callable[[str, int], bool] = os.access
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass(frozen=True)
class DockerFacts:
    version: str | None  # None: no daemon answered
    error: str  # why not, when version is None
    swarm: str | None  # Swarm.LocalNodeState: inactive, active, pending, error, locked
    image: ImageStatus | None  # None: no daemon, or the lookup failed (image_error)
    image_error: str = ""
    storage: str | None = None  # the storage driver (Info.Driver): overlay2, fuse-overlayfs, vfs, ...


@dataclass(frozen=True)
class Memory:
    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class HostFacts:
    system: str  # platform.system(): the process backend and tc need Linux
    python: str
    root: bool
    lock_drift: tuple[str, ...] | None  # None: no requirements.lock beside the code
    locked_packages: int
    backends: tuple[str, ...]  # the backends this version has
    default_backend: str
    docker: DockerFacts
    shaping: tc.NetemProbe
    delay_line: str | None  # why the docker backend's delay line cannot run here; None: it can
    own_bridge: str | None  # why the docker backend cannot give a testbed its own bridge; None: it can
    java: str | None
    pyspark: str | None
    spark_start_s: float | None  # None: not measured (or failed: spark_error)
    spark_error: str
    kvm: str  # "rw" (hardware KVM), "pvm", "no access" or "absent"
    qemu: str | None
    cargo: str | None
    rustc: str | None
    pylibp2p: str | None  # the py-libp2p venv's python, when there is one
    chromium: str | None
    memory: Memory | None
    cores: int


# ---------------------------------------------------------------- parsing


def first_line(text: str | None) -> str | None:
    """The first non-empty line of a command's output."""
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else None


def java_version(text: str | None) -> str | None:
    """`17.0.13` from `java -version` (`openjdk version "17.0.13" 2024-10-15`)."""
    if not text:
        return None
    match = re.search(r'version "([^"]+)"', text)
    return match.group(1) if match else first_line(text)


def version_number(text: str | None) -> str | None:
    """The first version-looking word: `1.95.0` from `cargo 1.95.0 (f2d3ce0bd
    2026-03-21)`, `7.2.15` from `QEMU emulator version 7.2.15 (Debian ...)`;
    the first line when there is none."""
    if not text:
        return None
    match = re.search(r"\b(\d+(?:\.\d+)+[^\s,()]*)", text)
    return match.group(1) if match else first_line(text)


def meminfo(text: str | None) -> Memory | None:
    """MemTotal and MemAvailable from /proc/meminfo (kB)."""
    if not text:
        return None
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * 1024
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        return None
    return Memory(fields["MemTotal"], fields["MemAvailable"])


# ---------------------------------------------------------------- probes


def java(host: Host) -> str | None:
    """The java the analysis would start: $JAVA_HOME/bin/java, else on PATH
    (as analysis/spark.py finds it)."""
    home = host.env.get("JAVA_HOME")
    exe = f"{home}/bin/java" if home and host.access(f"{home}/bin/java", os.X_OK) else host.which("java")
    return java_version(host.run([exe, "-version"])) if exe else None


def kvm(host: Host) -> str:
    """How usable /dev/kvm is for booting a stock kernel. PVM (kvm_pvm, found
    where the host is itself a microVM) offers a /dev/kvm that only runs
    specially built guests, so a stock kernel falls back to TCG emulation
    (tests/kvm/guest.py makes the same call)."""
    if not host.access("/dev/kvm", os.F_OK):
        return "absent"
    if not host.access("/dev/kvm", os.R_OK | os.W_OK):
        return "no access"
    if host.access("/sys/module/kvm_pvm", os.F_OK) and not any(
        host.access(f"/sys/module/{name}", os.F_OK) for name in ("kvm_intel", "kvm_amd")
    ):
        return "pvm"
    return "rw"


def tool_version(host: Host, command: str, parse: Callable[[str | None], str | None] = version_number) -> str | None:
    exe = host.which(command)
    return parse(host.run([exe, "--version"])) if exe else None


def pylibp2p(host: Host, venv: Path = PYLIBP2P_VENV) -> str | None:
    python = str(venv / "bin" / "python")
    return python if host.access(python, os.X_OK) else None


def chromium(host: Host) -> str | None:
    for name in ("chromium", "chromium-browser"):
        version = tool_version(host, name)
        if version:
            return version
    return None


def distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_distributions() -> dict[str, str]:
    """name → version of everything in this interpreter's environment but the
    project itself (an editable install of the code, not a locked package)."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) != OWN_DISTRIBUTION:
            out[canonical(name)] = dist.version
    return out


def lock_state(lock_text: str | None, installed: Mapping[str, str]) -> tuple[tuple[str, ...] | None, int]:
    if lock_text is None:
        return None, 0
    pins = lock_pins(lock_text)
    return drift(pins, installed), len(pins)


def docker_facts(client_factory: Callable[[], Any]) -> DockerFacts:
    """Version, swarm state and the router image, from one client. Any
    failure to connect is a fact (no daemon), never an exception."""
    try:
        client = client_factory()
    except Exception as exc:  # noqa: BLE001 - BackendUnavailable, or anything the SDK raises
        return DockerFacts(None, str(exc), None, None)
    try:
        version = str(client.version().get("Version", "?"))
        info = client.info()
        swarm = (info.get("Swarm") or {}).get("LocalNodeState")
        try:
            image, image_error = image_status(client), ""
        except Exception as exc:  # noqa: BLE001 - the image lookup failed; the daemon still answered
            image, image_error = None, str(exc)
        return DockerFacts(version, "", swarm, image, image_error, info.get("Driver"))
    except Exception as exc:  # noqa: BLE001 - answered ping, then failed
        return DockerFacts(None, f"the daemon answered ping, then: {exc}", None, None)
    finally:
        client.close()


def gather(
    host: Host | None = None,
    *,
    docker_client: Callable[[], Any] | None = None,
    shaping: Callable[[], tc.NetemProbe] = tc.probe_kernel,
    spark_start: Callable[[], float] | None = None,
) -> HostFacts:
    """Every fact, each probe bounded (TOOL_TIMEOUT_S a command). `spark_start`
    (seconds to a working Spark session) is only called when given: it
    costs seconds."""
    from orchestrator.backends.registry import BACKENDS, default_backend  # noqa: PLC0415
    from orchestrator.dockerapi.client import docker_client as real_client  # noqa: PLC0415

    host = host or Host()
    spark_s, spark_error = None, ""
    if spark_start is not None:
        try:
            spark_s = spark_start()
        except Exception as exc:  # noqa: BLE001 - a Spark that will not start is a finding
            spark_error = str(exc)
    drift_lines, locked = lock_state(host.read_text(str(LOCK_FILE)), installed_distributions())
    return HostFacts(
        system=platform.system(),
        python=platform.python_version(),
        root=os.geteuid() == 0,
        lock_drift=drift_lines,
        locked_packages=locked,
        backends=tuple(BACKENDS),
        default_backend=default_backend()[0],
        docker=docker_facts(docker_client or (lambda: real_client(timeout=10))),
        shaping=shaping(),
        delay_line=delayline.unavailable(),
        own_bridge=own_bridge.unavailable(),
        java=java(host),
        pyspark=distribution_version("pyspark"),
        spark_start_s=spark_s,
        spark_error=spark_error,
        kvm=kvm(host),
        qemu=tool_version(host, "qemu-system-x86_64"),
        cargo=tool_version(host, "cargo"),
        rustc=tool_version(host, "rustc"),
        pylibp2p=pylibp2p(host),
        chromium=chromium(host),
        memory=meminfo(host.read_text("/proc/meminfo")),
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
    )

