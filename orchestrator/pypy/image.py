"""gossip-testbed/pypy: the interpreter `testbed sim --pypy` runs the
simulator on (orchestrator/pypy/run.py).

The simulator is pure Python hot loops over small objects, which PyPy's JIT
runs 1.8-2.7 times as fast as CPython with the same traces, byte for byte
(docs/simulator.md, "PyPy"). Bookworm's pypy3 is Python 3.9, too old for the
project, and trixie's (PyPy 7.3.19, Python 3.11) needs trixie's libc, so the
image is a trixie rootfs with pypy3 (debootstrapped and imported like the
routers' base, orchestrator/images/base.py) plus the simulator's packages
(scripts/pypy/requirements.lock, and PyYAML's pure-Python part at the host's
pin), installed on the host with `pip install --target` for PyPy's ABI so
`docker build` needs no network. The project's sources are not in it: a
run mounts the checkout read-only, so the image changes only when the lock
or this recipe does. A RUN step imports the
packages, so a wheel PyPy cannot load fails the build, not a run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cache_dir
from orchestrator.dockerapi.names import LABEL
from orchestrator.images.base import (Rootfs, build_context, debootstrap_base_tag, debootstrapped_base, image_or_none,
                                      prune_older)
from orchestrator.images.router import build_lock
from orchestrator.images.wheels import pip_install_target, pip_platforms
from orchestrator.progress import Reporter

IMAGE_REPO = "gossip-testbed/pypy"
IMAGE_FORMAT = 1  # bump when how the image is assembled changes beyond the Dockerfile text
PYPY_ROOTFS = Rootfs("trixie", ("pypy3",))
PYPY_ABI = "pypy311_pp73"
REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK = REPO_ROOT / "scripts" / "pypy" / "requirements.lock"
# Pure-Python packages with no PyPy wheel: installed from the host's lock at
# the host's pin, from its CPython wheel, whose C accelerator is dropped (PyPy
# would not load it; PyYAML falls back to its pure-Python loader without it).
HOST_LOCK = REPO_ROOT / "requirements.lock"
FROM_HOST_LOCK = ("pyyaml",)
SITE = "/opt/pypy/site-packages"

DOCKERFILE = """\
FROM {base}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PYTHONPATH={site} \\
    PYTHONUNBUFFERED=1 \\
    PYTHONDONTWRITEBYTECODE=1
COPY site-packages {site}
RUN pypy3 -c "import pydantic, yaml, google.protobuf; from cryptography.hazmat.primitives.asymmetric import ed25519"
LABEL gossip-testbed=1 gossip-testbed.base={base_ref} gossip-testbed.interpreter=pypy
"""


def pypy_image_tag(client: Any) -> str | None:
    """The tag of an up-to-date PyPy image when it is present, else None
    (without building anything)."""
    base = image_or_none(client, debootstrap_base_tag(PYPY_ROOTFS))
    if base is None:
        return None
    tag = _tag(base.id)
    return tag if image_or_none(client, tag) is not None else None


def build_pypy_image(client: Any, reporter: Reporter) -> str:
    """The tag of an up-to-date PyPy image, building it when needed."""
    with build_lock("image-pypy"):
        base_id = debootstrapped_base(client, reporter, PYPY_ROOTFS)
        tag = _tag(base_id)
        if image_or_none(client, tag) is not None:
            reporter.note(f"image {tag} is up to date")
            return tag
        site = _site_packages(reporter)
        reporter.note(f"building {tag}")
        with tempfile.TemporaryDirectory(prefix="gtb-pypy-", dir=cache_dir()) as tmp:
            ctx = Path(tmp)
            (ctx / "Dockerfile").write_text(_dockerfile(base_id))
            shutil.copytree(site, ctx / "site-packages", ignore=shutil.ignore_patterns(".complete"))
            build_context(client, ctx, tag, reporter)
        image = client.images.get(tag)
        prune_older(client, IMAGE_REPO, image.id, reporter, {"label": f"{LABEL}=1"})
        return tag


def _dockerfile(base_id: str) -> str:
    return DOCKERFILE.format(base=base_id, base_ref=debootstrap_base_tag(PYPY_ROOTFS), site=SITE)


def _tag(base_id: str) -> str:
    digest = hashlib.sha256()
    for part in (str(IMAGE_FORMAT), _dockerfile(base_id), LOCK.read_text(), _host_pins(),
                 "\n".join(pip_platforms())):
        digest.update(part.encode() + b"\0")
    return f"{IMAGE_REPO}:{digest.hexdigest()[:12]}"


def _site_packages(reporter: Reporter) -> Path:
    """The lock installed for PyPy's ABI, cached by the lock's hash."""
    key = hashlib.sha256(json.dumps([LOCK.read_text(), _host_pins(), pip_platforms(), PYPY_ABI]).encode()
                         ).hexdigest()[:16]
    root = cache_dir() / "site-packages-pypy" / key
    if (root / ".complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    reporter.note(f"installing {LOCK.name} for PyPy (wheels from PyPI)")
    host_pins = root.parent / f"{key}.host.lock"
    host_pins.write_text(_host_pins())
    try:
        for lock, abi in ((LOCK, ["--implementation", "pp", "--abi", PYPY_ABI, "--abi", "none"]),
                          (host_pins, ["--implementation", "cp", "--abi", "cp311"])):
            pip_install_target(root, ["--require-hashes", "--only-binary=:all:", "--python-version", "3.11", *abi],
                               ["-r", str(lock)], f"could not install {lock.name} for the PyPy image")
    finally:
        host_pins.unlink()
    for accelerator in root.glob("*/*.cpython-*.so"):
        accelerator.unlink()
    shutil.rmtree(root / "bin", ignore_errors=True)
    (root / ".complete").write_text(LOCK.read_text())
    return root


def _host_pins() -> str:
    """The entries of FROM_HOST_LOCK in the host's lock, with their hashes."""
    entries, keep = [], False
    for line in HOST_LOCK.read_text().splitlines():
        if line and not line[0].isspace():
            keep = line.split("==")[0].strip().lower() in FROM_HOST_LOCK
        if keep and not line.lstrip().startswith("#"):
            entries.append(line)
    return "\n".join(entries) + "\n"
