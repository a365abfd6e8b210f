"""The router image: node/ plus only its runtime dependencies (trio, protobuf, cryptography),
built without any network access inside `docker build`.

Why this shape:
- The dependencies are installed on the host with
  `pip install --target --only-binary=:all: --platform manylinux... --python-version 3.11`,
  pinned to the versions in the host's environment (so the generated protobuf
  code and the runtime match), and copied into the build context. `docker build`
  then needs no registry and no PyPI.
- The base is `python:3.11-slim` where a registry can be reached. Where none can
  (this project's machines), a Debian bookworm base is bootstrapped locally with
  debootstrap (bookworm's python3 is 3.11, matching the wheels) and `docker
  import`ed: orchestrator/images/base.py.
- The image tag is a content hash of everything that goes in (node/ sources,
  pinned dependency versions, base image id, Dockerfile), so a rebuild with
  nothing changed is a tag lookup.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata as metadata
import json
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cache_dir, docker_client
from orchestrator.dockerapi.names import LABEL
from orchestrator.errors import InputError, TestbedError
from orchestrator.images.base import SLIM, build_context, image_or_none, local_base, prune_older, resolve_base
from orchestrator.images.wheels import pip_install_target, pip_platforms
from orchestrator.progress import Reporter

IMAGE_REPO = "gossip-testbed/node"
PYTHON_VERSION = "3.11"
BASES = ("auto", "debootstrap", SLIM)
IMAGE_FORMAT = 2  # bump when how the image is assembled changes beyond the Dockerfile text
LABEL_BASE = "gossip-testbed.base"  # on router images: the base they were built on

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = REPO_ROOT / "node"

DOCKERFILE = """\
FROM {base}
COPY opt /opt
RUN python3 -m compileall -q -j 0 /opt/testbed >/dev/null
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PYTHONPATH=/opt/testbed/app:/opt/testbed/site-packages \\
    PYTHONUNBUFFERED=1 \\
    PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["python3", "-m", "node"]
LABEL gossip-testbed=1 gossip-testbed.base={base_ref}
"""


@dataclass(frozen=True)
class ImageInfo:
    tag: str
    image_id: str
    base: str
    base_id: str
    built: bool  # False: the tag existed, nothing was done
    seconds: float
    size_bytes: int
    dependencies: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag, "image_id": self.image_id, "base": self.base,
            "base_id": self.base_id, "built": self.built, "seconds": round(self.seconds, 3),
            "size_bytes": self.size_bytes, "dependencies": list(self.dependencies),
        }


def ensure_image(reporter: Reporter | None = None, base: str = "auto") -> str:
    """The tag of an up-to-date router image, building it (and its base) when
    needed. Called by `testbed up` on first use."""
    return build_image(base=base, reporter=reporter).tag


def build_image(base: str = "auto", reporter: Reporter | None = None, client: Any = None) -> ImageInfo:
    if base not in BASES:
        raise InputError(f"--base must be one of {', '.join(BASES)}, not {base!r}")
    reporter = reporter or Reporter()
    started = time.monotonic()
    own = client is None
    client = client or docker_client(timeout=600)
    try:
        with build_lock("image"):
            base_ref, base_id = resolve_base(client, base, reporter)
            deps = runtime_requirements()
            dockerfile, tag = _dockerfile_and_tag(base_ref, base_id, deps)
            existing = image_or_none(client, tag)
            if existing is not None:
                reporter.note(f"image {tag} is up to date")
                return _info(existing, tag, base_ref, base_id, False, started, deps)
            site = _site_packages(deps, reporter)
            reporter.note(f"building {tag} from {base_ref}")
            image = _docker_build(client, dockerfile, site, tag, base_ref, reporter)
            prune_older(client, IMAGE_REPO, image.id, reporter, {"label": f"{LABEL_BASE}={base_ref}"})
            return _info(image, tag, base_ref, base_id, True, started, deps)
    finally:
        if own:
            client.close()


@dataclass(frozen=True)
class ImageStatus:
    """The router image as `testbed up` would find it, learnt without building
    or pulling anything."""

    base: str | None  # the base a build would use now; None: none is present locally
    tag: str | None  # the tag an up-to-date image has on that base
    present: bool  # that tag exists: `testbed up` starts at once
    others: tuple[str, ...]  # other router images here (older node/ or pins)


def image_status(client: Any) -> ImageStatus:
    others = tuple(sorted(t for image in client.images.list(IMAGE_REPO) for t in image.tags))
    local = local_base(client, "auto")
    if local is None:
        return ImageStatus(None, None, False, others)
    _, tag = _dockerfile_and_tag(*local, runtime_requirements())
    return ImageStatus(local[0], tag, tag in others, tuple(t for t in others if t != tag))


def _dockerfile_and_tag(base_ref: str, base_id: str, deps: tuple[str, ...]) -> tuple[str, str]:
    dockerfile = DOCKERFILE.format(base=base_id, base_ref=base_ref)
    return dockerfile, f"{IMAGE_REPO}:{_content_hash(dockerfile, base_id, deps)}"


def list_images(client: Any = None) -> list[dict[str, Any]]:
    own = client is None
    client = client or docker_client()
    try:
        rows = []
        for image in client.images.list(filters={"label": f"{LABEL}=1"}):
            rows.append({
                "tags": image.tags, "id": image.short_id,
                "created": image.attrs.get("Created", ""),
                "size_bytes": image.attrs.get("Size", 0),
            })
        return sorted(rows, key=lambda r: r["created"], reverse=True)
    finally:
        if own:
            client.close()


# ---------------------------------------------------------------- dependencies


def _node_imports_yaml() -> bool:
    pattern = re.compile(r"^\s*(import yaml|from yaml\b)", re.M)
    return any(pattern.search(p.read_text(errors="replace")) for p in NODE_DIR.rglob("*.py"))


def runtime_requirements() -> tuple[str, ...]:
    """`name==version` for the router's runtime dependencies and everything they
    need on Linux/CPython 3.11, pinned to the host's installed versions."""
    roots = ["trio", "protobuf", "cryptography"] + (["pyyaml"] if _node_imports_yaml() else [])
    env = {
        "python_version": PYTHON_VERSION, "python_full_version": PYTHON_VERSION + ".2",
        "sys_platform": "linux", "os_name": "posix", "platform_system": "Linux",
        "platform_machine": platform.machine(), "implementation_name": "cpython",
        "platform_python_implementation": "CPython", "extra": "",
    }
    Requirement = _requirement_class()
    pins: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = _canon(name)
        if key in pins:
            continue
        try:
            pins[key] = metadata.version(name)
        except metadata.PackageNotFoundError as exc:
            raise TestbedError(
                f"the router image needs {name!r} installed in this environment "
                f"({sys.executable}) to pin its version: pip install {name}"
            ) from exc
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            todo.append(req.name)
    return tuple(sorted(f"{k}=={v}" for k, v in pins.items()))


def _requirement_class() -> Any:
    try:
        from packaging.requirements import Requirement  # noqa: PLC0415
    except ImportError:  # pip always vendors it
        from pip._vendor.packaging.requirements import Requirement  # noqa: PLC0415
    return Requirement


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _site_packages(deps: tuple[str, ...], reporter: Reporter) -> Path:
    """The dependencies installed for the image's Python, cached by their pins."""
    key = hashlib.sha256(
        json.dumps([deps, pip_platforms(), PYTHON_VERSION]).encode()
    ).hexdigest()[:16]
    root = cache_dir() / "site-packages" / key
    if (root / ".complete").exists():
        reporter.note(f"dependencies cached in {root}")
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    reporter.note(f"downloading wheels for the image: {' '.join(deps)}")
    pip_install_target(
        root, ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
               "--abi", "cp" + PYTHON_VERSION.replace(".", "")], list(deps),
        f"could not fetch the router's dependencies for the image from PyPI ({' '.join(deps)})")
    shutil.rmtree(root / "bin", ignore_errors=True)
    for cache in root.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    (root / ".complete").write_text("\n".join(deps) + "\n")
    return root


# ---------------------------------------------------------------- content hash


def _node_files() -> list[Path]:
    return sorted(
        p for p in NODE_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def _content_hash(dockerfile: str, base_id: str, deps: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for part in (str(IMAGE_FORMAT), dockerfile, base_id, "\n".join(deps), "\n".join(pip_platforms())):
        digest.update(part.encode() + b"\0")
    for path in _node_files():
        digest.update(str(path.relative_to(NODE_DIR)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:12]


# ---------------------------------------------------------------- build


def _docker_build(client: Any, dockerfile: str, site: Path, tag: str, base_ref: str,
                  reporter: Reporter) -> Any:
    with tempfile.TemporaryDirectory(prefix="gtb-image-", dir=cache_dir()) as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(dockerfile)
        opt = ctx / "opt" / "testbed"
        shutil.copytree(site, opt / "site-packages", ignore=shutil.ignore_patterns(".complete"))
        shutil.copytree(NODE_DIR, opt / "app" / "node",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        build_context(client, ctx, tag, reporter)
    return client.images.get(tag)


def _info(image: Any, tag: str, base_ref: str, base_id: str, built: bool,
          started: float, deps: tuple[str, ...]) -> ImageInfo:
    return ImageInfo(
        tag=tag, image_id=image.id, base=base_ref, base_id=base_id, built=built,
        seconds=time.monotonic() - started, size_bytes=int(image.attrs.get("Size", 0)),
        dependencies=deps,
    )


# ---------------------------------------------------------------- locking


@contextlib.contextmanager
def build_lock(name: str) -> Iterator[None]:
    """One build at a time per cache dir (two `testbed up` at once share it)."""
    path = cache_dir() / f"{name}.lock"
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
