"""The base the router image is built on: python:3.11-slim where it is
present or can be pulled, else a Debian bookworm rootfs bootstrapped locally
with debootstrap and `docker import`ed (machines with no registry). The
rootfs tarball is kept in the cache, so the next import is fast. The same
debootstrap makes other Debian bases by their `Rootfs` (the simulator's
PyPy image is built on trixie, orchestrator/pypy/image.py).

Order in `--base auto`: python:3.11-slim already present; our debootstrapped
base already present; a pull of python:3.11-slim (short timeout); debootstrap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cache_dir, docker_client
from orchestrator.dockerapi.names import LABEL
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.progress import Reporter

BASE_REPO = "gossip-testbed/base"
SLIM = "python:3.11-slim"


@dataclass(frozen=True)
class Rootfs:
    """A Debian rootfs debootstrap builds (minbase plus `include`), imported as
    gossip-testbed/base:<suite>-<hash>."""

    suite: str
    include: tuple[str, ...]


# The routers' base: python3 (3.11 in bookworm) + iproute2 (tc/ip inside the
# image, for `docker exec` debugging; the backend shapes from the host with
# nsenter and does not need them).
ROUTER_ROOTFS = Rootfs("bookworm", ("python3", "iproute2"))
DEBIAN_MIRROR = os.environ.get("TESTBED_DEBIAN_MIRROR", "http://deb.debian.org/debian")
TRIM_VERSION = 1  # bump when _trim_rootfs changes, so the cached base is rebuilt
PULL_TIMEOUT_S = 20.0


def image_or_none(client: Any, ref: str) -> Any:
    import docker.errors  # noqa: PLC0415

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


# ---------------------------------------------------------------- base


def build_context(client: Any, ctx: Path, tag: str, reporter: Reporter) -> None:
    """`docker build` of the context directory `ctx` as `tag`, with each Step
    shown as progress; TestbedError with the daemon's error and the last 20
    lines of the build log when it fails."""
    log: list[str] = []
    error = None
    try:
        for chunk in client.api.build(path=str(ctx), tag=tag, rm=True, forcerm=True, pull=False, decode=True):
            line = chunk.get("stream", "").strip()
            if line:
                log.append(line)
                if line.startswith("Step "):
                    reporter.note(line)
            if "error" in chunk:
                error = chunk["error"].strip()
    except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds for one failed build
        error = str(exc)
    if error:
        raise TestbedError(f"docker build of {tag} failed: {error}\n" + "\n".join(log[-20:]))


def prune_older(client: Any, repo: str, keep_id: str, reporter: Reporter,
                filters: dict[str, str] | None = None) -> None:
    """Remove the images of `repo` (matching `filters`) other than `keep_id`
    that no container uses: every source change makes a new content-hashed
    tag, and the old ones would pile up."""
    import docker.errors  # noqa: PLC0415

    for image in client.images.list(repo, filters=filters or {}):
        if image.id == keep_id:
            continue
        try:
            client.images.remove(image.id, noprune=False)
            reporter.note(f"removed the older image {', '.join(image.tags) or image.short_id}")
        except docker.errors.APIError:
            continue  # in use by a container (a running testbed): keep it


def debootstrap_base_tag(rootfs: Rootfs = ROUTER_ROOTFS) -> str:
    key = hashlib.sha256(
        json.dumps([rootfs.suite, "minbase", rootfs.include, TRIM_VERSION, platform.machine()]).encode()
    ).hexdigest()[:12]
    return f"{BASE_REPO}:{rootfs.suite}-{key}"


def resolve_base(client: Any, base: str, reporter: Reporter) -> tuple[str, str]:
    """(reference, image id) of the base to build on."""
    local = local_base(client, base)
    if local is not None:
        return local
    tried: list[str] = []
    if base in ("auto", SLIM):
        tried.append(f"{SLIM} is not present locally")
        reporter.note(f"pulling {SLIM} (timeout {PULL_TIMEOUT_S:.0f}s)")
        ok, why = _pull_with_timeout(SLIM, PULL_TIMEOUT_S)
        if ok:
            return SLIM, client.images.get(SLIM).id
        tried.append(f"docker pull {SLIM} failed: {why}")
        if base == SLIM:
            raise BackendUnavailable(
                "cannot get the base image: " + "; ".join(tried)
                + " (use --base debootstrap to bootstrap one from Debian's packages)"
            )
    try:
        return debootstrap_base_tag(), debootstrapped_base(client, reporter)
    except TestbedError as exc:
        tried.append(str(exc))
        raise BackendUnavailable(
            "cannot get a base image for the router image: " + "; ".join(tried)
        ) from exc


def local_base(client: Any, base: str) -> tuple[str, str] | None:
    """(reference, image id) of a base already present: python:3.11-slim
    first, then our debootstrapped one."""
    candidates = ([SLIM] if base in ("auto", SLIM) else []) + (
        [debootstrap_base_tag()] if base in ("auto", "debootstrap") else [])
    for ref in candidates:
        image = image_or_none(client, ref)
        if image is not None:
            return ref, image.id
    return None


def _pull_with_timeout(ref: str, timeout: float) -> tuple[bool, str]:
    """docker pull in a thread with a deadline: an unreachable registry must not
    hang `testbed up`."""
    box: dict[str, str] = {}

    def pull() -> None:
        try:
            client = docker_client(timeout=int(timeout) + 5)
            try:
                repo, _, tag = ref.partition(":")
                client.images.pull(repo, tag=tag or "latest")
            finally:
                client.close()
            box["ok"] = ""
        except Exception as exc:
            text = str(getattr(exc, "explanation", None) or exc).strip()
            box["error"] = text.splitlines()[-1][:300] if text else type(exc).__name__

    thread = threading.Thread(target=pull, daemon=True, name="pull-base")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return False, f"no answer within {timeout:.0f}s"
    if "ok" in box:
        return True, ""
    return False, box.get("error", "unknown error")


def debootstrapped_base(client: Any, reporter: Reporter, rootfs: Rootfs = ROUTER_ROOTFS) -> str:
    """The id of the image of `rootfs`, imported from the cached tarball, or
    debootstrapped first when there is none."""
    tag = debootstrap_base_tag(rootfs)
    image = image_or_none(client, tag)
    if image is not None:
        return image.id
    tarball = cache_dir() / "base" / f"{tag.split(':', 1)[1]}.tar"
    if not tarball.exists():
        _debootstrap_tarball(tarball, reporter, rootfs)
    reporter.note(f"importing {tarball.name} as {tag}")
    repo, _, version = tag.partition(":")
    try:
        client.api.import_image(
            src=str(tarball), repository=repo, tag=version,
            changes=[f"LABEL {LABEL}=1", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        )
    except Exception as exc:
        raise TestbedError(f"docker import of {tarball} failed: {exc}") from exc
    image = image_or_none(client, tag)
    if image is None:
        raise TestbedError(f"docker import of {tarball} did not produce {tag}")
    return image.id


def _debootstrap_tarball(tarball: Path, reporter: Reporter, rootfs: Rootfs) -> None:
    exe = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if Path(p).exists()), None
    )
    if exe is None:
        raise TestbedError("debootstrap is not installed (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise TestbedError("debootstrap needs root to build the base image (run once as root)")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=tarball.parent) as tmp:
        root = Path(tmp) / "rootfs"
        cmd = [exe, "--variant=minbase", "--include=" + ",".join(rootfs.include),
               rootfs.suite, str(root), DEBIAN_MIRROR]
        reporter.note(f"debootstrap {rootfs.suite} from {DEBIAN_MIRROR} (about a minute)")
        tail: list[str] = []
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-15:]
            if line.startswith("I: ") and any(w in line for w in ("Retrieving", "Validating", "Installing", "Configuring", "Extracting", "Unpacking", "Base system")):
                if "Retrieving" in line or "Validating" in line:
                    continue  # hundreds of these
                reporter.note("debootstrap: " + line[3:])
        if proc.wait() != 0:
            raise TestbedError(
                f"debootstrap {rootfs.suite} from {DEBIAN_MIRROR} failed (exit {proc.returncode}):\n"
                + "\n".join(tail)
            )
        _trim_rootfs(root)
        reporter.note(f"packing the rootfs into {tarball}")
        partial = tarball.with_suffix(".tar.partial")
        result = subprocess.run(
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise TestbedError(f"tar of the rootfs failed: {result.stderr.strip()}")
        partial.rename(tarball)


def _trim_rootfs(rootfs: Path) -> None:
    """Drop what a router never reads: apt lists and caches, docs, man pages,
    locales, logs."""
    for rel in ("var/lib/apt/lists", "var/cache/apt", "var/cache/debconf", "usr/share/doc",
                "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian",
                "usr/share/common-licenses", "var/log", "usr/share/bash-completion"):
        path = rootfs / rel
        if not path.is_dir():
            continue
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    child.unlink()
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
