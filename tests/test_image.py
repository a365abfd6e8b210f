"""The router image: pinned runtime dependencies only, content-hash tags (a
rebuild with nothing changed is a no-op), imports work inside, and a build
from nothing (fresh cache, fresh debootstrapped base) works."""

from __future__ import annotations

import subprocess
import time

import pytest

from orchestrator.images import router as image_mod
from orchestrator.images import base as image_base
from tests.docker_fixtures import needs_docker, node_image  # noqa: F401 - fixture


def test_runtime_requirements_are_pinned_and_minimal():
    deps = image_mod.runtime_requirements()
    names = {d.split("==")[0] for d in deps}
    assert {"trio", "protobuf", "cryptography", "cffi", "outcome", "sniffio", "attrs",
            "sortedcontainers", "idna"} <= names
    assert not names & {"pyspark", "docker", "pandas", "pyarrow", "typer", "rich", "requests"}
    assert all("==" in d for d in deps)


def test_content_hash_changes_with_inputs():
    deps = ("trio==1",)
    a = image_mod._content_hash("FROM x", "sha256:1", deps)
    assert a == image_mod._content_hash("FROM x", "sha256:1", deps)
    assert a != image_mod._content_hash("FROM x", "sha256:2", deps)
    assert a != image_mod._content_hash("FROM x", "sha256:1", ("trio==2",))
    assert a != image_mod._content_hash("FROM y", "sha256:1", deps)
    assert len(a) == 12


def test_bad_base_is_an_input_error():
    from orchestrator.errors import InputError

    with pytest.raises(InputError):
        image_mod.build_image(base="alpine")


def _run_in(image: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", code],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.docker
@needs_docker
def test_image_imports_and_contents(node_image):
    out = _run_in(node_image, (
        "import node, trio, google.protobuf, node.proto.trace_pb2, node.proto.rpc_pb2, importlib.util as u;"
        "import node.runtime.daemon;"
        "print([m for m in ('pyspark','docker','pandas','pyarrow','typer','yaml') if u.find_spec(m)])"
    ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    labels = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", node_image],
                            capture_output=True, text=True, check=True).stdout
    assert '"gossip-testbed":"1"' in labels


@pytest.mark.docker
@needs_docker
def test_second_build_is_a_noop(node_image):
    started = time.monotonic()
    info = image_mod.build_image()
    assert not info.built and info.tag == node_image
    assert time.monotonic() - started < 5


@pytest.mark.docker
@pytest.mark.slow
@needs_docker
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="debootstrap needs root")
def test_build_from_nothing(tmp_path, monkeypatch):
    """A fresh cache dir and a base tag nobody has: debootstrap, import, pip
    download, build; then the same again is a no-op. Removes what it made."""
    import docker

    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(image_base, "BASE_REPO", "gossip-testbed/base-scratch-test")
    client = docker.from_env()
    made: list[str] = []
    try:
        started = time.monotonic()
        info = image_mod.build_image(base="debootstrap")
        cold = time.monotonic() - started
        made += [info.tag, info.base]
        assert info.built and info.base.startswith("gossip-testbed/base-scratch-test:bookworm-")
        assert list((tmp_path / "cache" / "base").glob("bookworm-*.tar"))
        again = image_mod.build_image(base="debootstrap")
        assert not again.built and again.tag == info.tag and again.seconds < 5
        out = _run_in(info.tag, "import node, trio, google.protobuf; print('ok')")
        assert out.stdout.strip() == "ok", out.stderr
        print(f"cold build {cold:.1f}s, no-op {again.seconds:.2f}s")
    finally:
        for ref in made:
            try:
                client.images.remove(ref, force=True)
            except docker.errors.APIError:
                pass
        client.close()


def test_the_rust_adapter_is_compiled_again_for_other_sources(tmp_path, monkeypatch):
    """cargo judges freshness by file times, and every checkout shares the
    target directory: when the last build's sources differ from this
    checkout's, the adapter's fingerprints go (cargo compiles it again);
    when they are the same, they stay."""
    from orchestrator.images import rust as image_rust

    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    fingerprint = image_rust.target_dir() / "release" / ".fingerprint" / "gossip-testbed-rust-adapter-0123"
    crate = image_rust.target_dir() / "release" / ".fingerprint" / "libp2p-gossipsub-4567"
    for d in (fingerprint, crate):
        d.mkdir(parents=True)
    image_rust._sources_stamp().write_text("another checkout's sources")
    ours = image_rust._forget_other_sources()
    assert not fingerprint.exists() and crate.exists()
    fingerprint.mkdir()
    image_rust._sources_stamp().write_text(ours)
    assert image_rust._forget_other_sources() == ours and fingerprint.exists()
