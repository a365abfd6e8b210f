"""The router image's code and libraries unpacked once on the host
(orchestrator/images/tree.py): the bytes are the image's, a second call reuses
them, and nothing is mounted where it is switched off."""

from __future__ import annotations

import hashlib
import io
import tarfile

from orchestrator.dockerapi.client import docker_client
from orchestrator.images.router import ensure_image
from orchestrator.images.tree import SHARED_DIRS, TREES, _ChunkReader, image_tree, shared_binds
from orchestrator.progress import Reporter
from tests.docker_fixtures import needs_docker


def test_the_chunk_reader_yields_the_archive_whatever_the_chunking():
    data = bytes(range(256)) * 1000
    chunks = [data[:1], data[1:70_000], b"", data[70_000:70_001], data[70_001:]]
    assert io.BufferedReader(_ChunkReader(iter(chunks)), buffer_size=4096).read() == data


def test_switched_off_nothing_is_mounted_and_nothing_unpacked(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_SHARED_TREE", "0")
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    assert shared_binds(object(), "any-image", Reporter()) == {}
    assert not (tmp_path / TREES).exists()


@needs_docker
def test_the_tree_holds_the_image_files_and_is_reused(monkeypatch, tmp_path):
    node_image = ensure_image()
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    client = docker_client()
    try:
        tree = image_tree(client, node_image, Reporter())
        assert all((tree / d).is_dir() for d in SHARED_DIRS)
        container = client.containers.create(node_image, entrypoint=["/bin/true"], network_disabled=True)
        try:
            chunks, _ = container.get_archive("/opt/testbed/app/node/libp2p/identity.py")
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
                in_image = tar.extractfile("identity.py").read()
        finally:
            container.remove(force=True)
        in_tree = (tree / "opt/testbed/app/node/libp2p/identity.py").read_bytes()
        assert hashlib.sha256(in_tree).digest() == hashlib.sha256(in_image).digest()
        marker = tree / "opt" / ".seen"
        marker.touch()
        assert image_tree(client, node_image, Reporter()) == tree and marker.exists()  # not unpacked again
        assert [p.name for p in (tmp_path / TREES).iterdir()] == [tree.name]  # no leftover work directory
    finally:
        client.close()
