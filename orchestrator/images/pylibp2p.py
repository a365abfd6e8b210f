"""The py-libp2p adapter: its Docker image and its command on the process
backend.

py-libp2p 0.8.1 needs protobuf<7, so it never shares the project's .venv:
on the process backend it runs from .venv-pylibp2p (scripts/pylibp2p-venv.sh);
in Docker from gossip-testbed/py-libp2p:<contenthash>, built FROM the router
image's base (orchestrator/images/base.py) the way the router image is built:
the hash-pinned lock (scripts/pylibp2p/requirements.lock) is installed on the
host with `pip install --target` (wheels for CPython 3.11 manylinux, the few
sdist-only packages such as fastecdsa built here, on a host whose Python is
3.11 like the base's), so `docker build` needs no network. The tag hashes
everything that goes in (Dockerfile, base id, lock, adapter sources), so a
rebuild with nothing changed is a tag lookup, and the adapter is the last
layer, so a changed adapter reuses Docker's cached dependency layers. A RUN
step imports py-libp2p in the image, so wheels the base cannot load fail the
build, not a run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cache_dir
from orchestrator.dockerapi.names import LABEL
from orchestrator.errors import BackendUnavailable
from orchestrator.images.router import PYTHON_VERSION, build_lock
from orchestrator.images.wheels import pip_install_target, pip_platforms
from orchestrator.images.base import build_context, image_or_none, prune_older, resolve_base
from orchestrator.progress import Reporter

IMAGE_REPO = "gossip-testbed/py-libp2p"
IMAGE_FORMAT = 1  # bump when how the image is assembled changes beyond the Dockerfile text
REPO_ROOT = Path(__file__).resolve().parents[2]
ADAPTER_DIR = REPO_ROOT / "adapters" / "py-libp2p"
LOCK = REPO_ROOT / "scripts" / "pylibp2p" / "requirements.lock"
VENV = REPO_ROOT / ".venv-pylibp2p"

DOCKERFILE = """\
FROM {base}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PYTHONPATH=/opt/pylibp2p/site-packages \\
    PYTHONUNBUFFERED=1 \\
    PYTHONDONTWRITEBYTECODE=1
COPY site-packages /opt/pylibp2p/site-packages
RUN python3 -m compileall -q -j 0 /opt/pylibp2p/site-packages >/dev/null \\
 && python3 -c "import libp2p.pubsub.gossipsub, fastecdsa, google.protobuf"
COPY adapter /opt/pylibp2p/adapter
ENTRYPOINT ["python3", "/opt/pylibp2p/adapter/adapter.py"]
LABEL gossip-testbed=1 gossip-testbed.base={base_ref} gossip-testbed.router=py-libp2p
"""


def pylibp2p_adapter_command() -> list[str]:
    """argv prefix of the adapter on the process backend (the caller adds
    --params and --config)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        raise BackendUnavailable(
            f"py-libp2p nodes need the virtualenv {VENV} (py-libp2p wants protobuf<7, so it has its own): "
            "make it with scripts/pylibp2p-venv.sh")
    return [str(python), str(ADAPTER_DIR / "adapter.py")]


def build_pylibp2p_image(client: Any, reporter: Reporter) -> str:
    """The tag of an up-to-date py-libp2p adapter image, building it when needed."""
    with build_lock("image-pylibp2p"):
        base_ref, base_id = resolve_base(client, "auto", reporter)
        dockerfile = DOCKERFILE.format(base=base_id, base_ref=base_ref)
        tag = f"{IMAGE_REPO}:{_content_hash(dockerfile, base_id)}"
        if image_or_none(client, tag) is not None:
            reporter.note(f"image {tag} is up to date")
            return tag
        site = _site_packages(reporter)
        reporter.note(f"building {tag} from {base_ref}")
        image = _docker_build(client, dockerfile, site, tag, reporter)
        prune_older(client, IMAGE_REPO, image.id, reporter, {"label": f"{LABEL}=1"})
        return tag


def _adapter_files() -> list[Path]:
    return sorted(p for p in ADAPTER_DIR.glob("*.py") if p.is_file())


def _content_hash(dockerfile: str, base_id: str) -> str:
    digest = hashlib.sha256()
    for part in (str(IMAGE_FORMAT), dockerfile, base_id, LOCK.read_text(), "\n".join(pip_platforms())):
        digest.update(part.encode() + b"\0")
    for path in _adapter_files():
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:12]


def _site_packages(reporter: Reporter) -> Path:
    """The lock installed for the image's Python, cached by the lock's hash."""
    key = hashlib.sha256(json.dumps([LOCK.read_text(), pip_platforms(), PYTHON_VERSION]).encode()).hexdigest()[:16]
    root = cache_dir() / "site-packages-pylibp2p" / key
    if (root / ".complete").exists():
        reporter.note(f"py-libp2p and its dependencies cached in {root}")
        return root
    if f"{sys.version_info.major}.{sys.version_info.minor}" != PYTHON_VERSION:
        raise BackendUnavailable(
            f"building the py-libp2p image needs Python {PYTHON_VERSION} here (some of its packages are "
            f"built from source for the image's Python), not {sys.version.split()[0]}")
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    reporter.note(f"installing {LOCK.relative_to(REPO_ROOT)} for the image (PyPI; a few packages build from source)")
    pip_install_target(
        root, ["--require-hashes", "--python-version", PYTHON_VERSION, "--implementation", "cp",
               "--abi", "cp" + PYTHON_VERSION.replace(".", ""), "--abi", "abi3", "--abi", "none"],
        ["-r", str(LOCK)], f"could not install {LOCK.name} for the py-libp2p image")
    shutil.rmtree(root / "bin", ignore_errors=True)
    for cache in root.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    (root / ".complete").write_text(LOCK.read_text())
    return root


def _docker_build(client: Any, dockerfile: str, site: Path, tag: str, reporter: Reporter) -> Any:
    with tempfile.TemporaryDirectory(prefix="gtb-pylibp2p-", dir=cache_dir()) as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(dockerfile)
        shutil.copytree(site, ctx / "site-packages", ignore=shutil.ignore_patterns(".complete"))
        (ctx / "adapter").mkdir()
        for path in _adapter_files():
            shutil.copy2(path, ctx / "adapter" / path.name)
        build_context(client, ctx, tag, reporter)
    return client.images.get(tag)
