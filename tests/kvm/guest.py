"""The guest's kernel and base initramfs, taken from the host's Debian packages
(installed by bootstrap.sh) and cached, so nothing is downloaded at test time.

The base archive holds busybox, iproute2's `tc` and `ip`, iputils' `ping`,
`iperf3`, the shared libraries they link, and the kernel modules the scenario
needs with their dependencies. It is cached under
~/.cache/gossip-testbed/kvm/<key>/, the key hashing the packages' versions and
this builder's own source, and rebuilt only when one of those changes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tests.kvm.cpio import CpioWriter

KERNEL_PACKAGE = "linux-image-amd64"
# Debian package -> the tools the guest takes from it (none from the kernel and qemu).
PACKAGES: dict[str, tuple[str, ...]] = {
    KERNEL_PACKAGE: (),
    "busybox-static": ("busybox",),
    "iproute2": ("tc", "ip"),
    "iputils-ping": ("ping",),
    "iperf3": ("iperf3",),
    "qemu-system-x86": (),
}
QEMU = "qemu-system-x86_64"
MODULES = ("veth", "bridge", "sch_htb", "sch_netem", "sch_tbf", "cls_u32")
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Guest:
    """A kernel image and a base initramfs that boot together."""

    kernel: Path
    release: str
    base_initramfs: Path
    modules: tuple[str, ...]  # load order, dependencies first
    versions: tuple[str, ...]  # "package=version", what the cache key hashes
    accelerator: str  # "kvm" or "tcg"
    accelerator_reason: str


def accelerator() -> tuple[str, str]:
    """("kvm", why) where /dev/kvm is hardware virtualisation (kvm_intel or
    kvm_amd), else ("tcg", why). Some hosts offer a /dev/kvm that only runs
    specially built guests: PVM (kvm_pvm, used for nesting inside microVMs
    without VMX) runs PVM-enabled kernels only, and Debian's stock kernel
    hangs in its decompressor there. qemu's TCG emulates the CPU instead;
    the guest's clock still follows the host's, so netem's timers are real."""
    hardware = [name for name in ("kvm_intel", "kvm_amd") if Path("/sys/module", name).is_dir()]
    if hardware and os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "kvm", f"/dev/kvm backed by {hardware[0]}"
    if Path("/sys/module/kvm_pvm").is_dir():
        return "tcg", "/dev/kvm is PVM (kvm_pvm), which cannot boot a stock kernel: emulating with TCG"
    if not os.path.exists("/dev/kvm"):
        return "tcg", "no /dev/kvm: emulating with TCG"
    return "tcg", "/dev/kvm is not hardware KVM or not accessible: emulating with TCG"


def package_versions() -> dict[str, str | None]:
    """Installed version of each package the guest is built from (None: absent)."""
    found: dict[str, str | None] = dict.fromkeys(PACKAGES)
    if shutil.which("dpkg-query") is None:
        return found
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status} ${Version}\n", *PACKAGES],
        capture_output=True, text=True, check=False,
    )
    for line in result.stdout.splitlines():
        name, status, version = (line.split(" ", 2) + ["", ""])[:3]
        if status == "installed":
            found[name] = version
    return found


def kernel_release() -> str | None:
    """The release the `linux-image-amd64` metapackage points at, e.g. 6.1.0-56-amd64."""
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Depends}", KERNEL_PACKAGE],
                            capture_output=True, text=True, check=False)
    match = re.match(r"linux-image-(\S+)", result.stdout.strip())
    return match.group(1) if match else None


def missing() -> str | None:
    """Why the guest cannot run here, or None when it can."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} is not installed (Debian package qemu-system-x86; run ./bootstrap.sh as root)"
    if shutil.which("dpkg-query") is None:
        return "not a Debian host: the guest is built from Debian packages"
    absent = [name for name, version in package_versions().items() if version is None]
    if absent:
        return f"Debian packages not installed: {', '.join(absent)} (run ./bootstrap.sh as root)"
    release = kernel_release()
    if release is None or not Path(f"/boot/vmlinuz-{release}").is_file():
        return f"{KERNEL_PACKAGE} is installed but its kernel image is not in /boot"
    if not os.access(f"/boot/vmlinuz-{release}", os.R_OK):
        return f"/boot/vmlinuz-{release} is not readable by this user"
    for tools in PACKAGES.values():
        for tool in tools:
            if shutil.which(tool) is None:
                return f"`{tool}` is not on PATH"
    return None


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gossip-testbed" / "kvm"


def prepare() -> Guest:
    """The guest, building its base initramfs first when the cache lacks it.
    Call only when `missing()` is None."""
    release = kernel_release()
    assert release is not None
    versions = tuple(f"{name}={version}" for name, version in sorted(package_versions().items()))
    digest = hashlib.sha256("\n".join(versions).encode())
    for source in ("guest.py", "cpio.py"):
        digest.update((_HERE / source).read_bytes())
    moddir = Path("/lib/modules") / release
    order = _module_order(moddir, MODULES)
    target = cache_root() / digest.hexdigest()[:16] / "base.cpio"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".partial-{os.getpid()}")
        with partial.open("wb") as out:
            _write_base(out, moddir, order)
        partial.replace(target)
    names = tuple(Path(path).name.removesuffix(".ko") for path in order)
    accel, why = accelerator()
    return Guest(Path(f"/boot/vmlinuz-{release}"), release, target, names, versions, accel, why)


def _module_order(moddir: Path, wanted: tuple[str, ...]) -> list[str]:
    """Paths (relative to moddir) of `wanted` and their dependencies, each after
    what it needs, as modules.dep says."""
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        module, _, needs = line.partition(":")
        deps[module] = needs.split()
    by_name = {Path(path).name.removesuffix(".ko"): path for path in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in deps[path]:
            visit(dep)
        order.append(path)

    for name in wanted:
        if name not in by_name:
            raise FileNotFoundError(f"{moddir}/modules.dep has no module {name}")
        visit(by_name[name])
    return order


def _shared_libraries(binary: str) -> list[str]:
    """Absolute paths ldd reports for `binary` (the loader included)."""
    result = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    paths = []
    for line in result.stdout.splitlines():
        match = re.search(r"(/\S+) \(0x", line)
        if match:
            paths.append(match.group(1))
    return paths


def _write_base(out: BinaryIO, moddir: Path, module_order: list[str]) -> None:
    archive = CpioWriter(out)
    for directory in ("bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "run", "tmp", "etc", "modules"):
        archive.directory(directory)
    archive.char_device("dev/console", 5, 1)  # init's stdio, before devtmpfs is mounted
    libraries: set[str] = set()
    for tools in PACKAGES.values():
        for tool in tools:
            path = shutil.which(tool)
            assert path is not None
            # busybox goes to /bin (its applets are linked there at boot); the
            # real tools to /usr/sbin, ahead of busybox's applets on PATH.
            where = "bin/busybox" if tool == "busybox" else f"usr/sbin/{tool}"
            archive.file(where, Path(path).read_bytes(), 0o755)
            if tool != "busybox":
                libraries.update(_shared_libraries(path))
    for library in sorted(libraries):
        archive.file(library, Path(library).read_bytes(), 0o755)
    for module in module_order:
        archive.file(f"modules/{Path(module).name}", (moddir / module).read_bytes())
    archive.close()
