"""The router image's /usr/bin, /usr/lib and /opt, unpacked once on the host and bind-mounted
read-only into every router container, so all containers share one copy of
their page cache.

Why: with a storage driver that gives each container its own filesystem
(fuse-overlayfs here, `docker info`), every container has its own inodes for
the image's files: the interpreter, libpython, OpenSSL and every .pyc were
read through FUSE and cached once per container, charged to its cgroup. On
this host one router container that has imported its modules used 51.6 MB
(cgroup) after 0.54 s of imports from the image's own root; with these
directories from one host directory, 21.4 MB and 0.16 s. The bytes are the image's
(unpacked from it, under its id), so what runs is what the image holds; the
root filesystem stays the image's, read-only.

Only where the daemon reads this machine's files (a unix socket, and the
daemon's host name is ours); TESTBED_SHARED_TREE=0 turns it off.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.dockerapi.client import cache_dir
from orchestrator.errors import TestbedError
from orchestrator.progress import Reporter

# Where the interpreter, its libraries and our code live (merged /usr). Not all
# of /usr: Docker's init is mounted at /sbin/docker-init, that is /usr/sbin.
SHARED_DIRS = ("usr/bin", "usr/lib", "opt")
TREES = "image-trees"


def shared_binds(client: Any, image: str, reporter: Reporter) -> dict[str, dict[str, str]]:
    """Docker `binds` that mount the image's SHARED_DIRS read-only from its
    unpacked tree; {} where the daemon cannot see this machine's files."""
    if os.environ.get("TESTBED_SHARED_TREE", "1") == "0" or not _daemon_is_local(client):
        return {}
    tree = image_tree(client, image, reporter)
    return {str(tree / d): {"bind": f"/{d}", "mode": "ro"} for d in SHARED_DIRS}


def image_tree(client: Any, image: str, reporter: Reporter) -> Path:
    """The directory holding the image's SHARED_DIRS, unpacked on first use
    (a few seconds) and kept in the cache under the image's id."""
    image_id = client.images.get(image).id.split(":")[-1][:16]
    root = cache_dir() / TREES
    tree = root / image_id
    if all((tree / d).is_dir() for d in SHARED_DIRS):
        return tree
    shutil.rmtree(tree, ignore_errors=True)  # unpacked when SHARED_DIRS was shorter
    root.mkdir(parents=True, exist_ok=True)
    reporter.note(f"unpacking {image}'s {', '.join(SHARED_DIRS)} into {tree} (shared by its containers)")
    work = Path(tempfile.mkdtemp(prefix=f".{image_id}-", dir=root))
    work.chmod(0o755)
    container = client.containers.create(image, entrypoint=["/bin/true"], network_disabled=True)
    try:
        for d in SHARED_DIRS:
            chunks, _ = container.get_archive(f"/{d}")
            with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks)), mode="r|") as tar:
                tar.extractall(work / Path(d).parent, filter="tar")
    except Exception:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        container.remove(force=True)
    try:
        work.rename(tree)
    except OSError:  # another CLI unpacked the same image meanwhile
        shutil.rmtree(work, ignore_errors=True)
        if not tree.is_dir():
            raise TestbedError(f"could not put the unpacked image at {tree}") from None
    _prune(client, root, keep=image_id)
    return tree


def _prune(client: Any, root: Path, keep: str) -> None:
    """Trees of images that are no longer on this machine go."""
    import docker.errors  # noqa: PLC0415

    for path in root.iterdir():
        if path.name == keep or path.name.startswith("."):
            continue
        try:
            client.images.get(path.name)
        except docker.errors.ImageNotFound:
            shutil.rmtree(path, ignore_errors=True)


def _daemon_is_local(client: Any) -> bool:
    if not os.environ.get("DOCKER_HOST", "unix://").startswith("unix://"):
        return False
    return client.info().get("Name") == socket.gethostname()


class _ChunkReader(io.RawIOBase):
    """A readable stream over the Docker SDK's chunks of an archive."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n
