"""The rust-libp2p adapter (adapters/rust-libp2p): its binary, built with cargo,
and its image, gossip-testbed/rust-libp2p:<contenthash>.

Why this shape:
- `cargo build --release --locked` with CARGO_TARGET_DIR in the project's cache
  (orchestrator/dockerapi/client.cache_dir), so every clone and worktree shares one
  build and a rebuild with nothing changed is cargo's own no-op. --locked makes
  the committed Cargo.lock the only source of versions; crates.io is the only
  network reached, at build time only.
- The image is FROM the router's base image (orchestrator/images/base.py):
  Debian bookworm like this host, so the glibc binary built here runs there
  unchanged, and nothing is pulled. After the build the binary is run once in
  the image; an image in which it cannot start is removed, not tagged.
- The tag hashes the adapter's sources, Cargo.lock, the Dockerfile and the base
  image id: an up-to-date image is a tag lookup, and no cargo runs at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from node.atomic import write_atomic
from orchestrator.dockerapi.client import cache_dir
from orchestrator.dockerapi.names import LABEL
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.images.base import build_context, image_or_none, prune_older, resolve_base
from orchestrator.progress import Reporter

ROUTER = "rust-libp2p"
IMAGE_REPO = "gossip-testbed/rust-libp2p"
BINARY = "rust-libp2p-adapter"
MIN_RUSTC = (1, 88)  # libp2p 0.57's crates use let-chains
IMAGE_FORMAT = 1  # bump when how the image is assembled changes beyond the Dockerfile text
LABEL_ROUTER = "gossip-testbed.router"
ADAPTER_DIR = Path(__file__).resolve().parents[2] / "adapters" / "rust-libp2p"
IN_IMAGE = f"/usr/local/bin/{BINARY}"
BUILD_TIMEOUT_S = 3600

DOCKERFILE = """\
FROM {base}
COPY {binary} {in_image}
ENTRYPOINT ["{in_image}"]
CMD ["--params", "/node/params.json", "--config", "/node/config.json"]
LABEL gossip-testbed=1 gossip-testbed.base={base_ref} gossip-testbed.router={router}
"""


def target_dir() -> Path:
    """Where cargo builds: shared by every checkout of the project on this host."""
    return cache_dir() / "rust-libp2p" / "target"


def binary_path() -> Path:
    return target_dir() / "release" / BINARY


def _tool(name: str) -> str | None:
    """A Rust tool on PATH, else where rustup puts it."""
    rustup = Path.home() / ".cargo" / "bin" / name
    return shutil.which(name) or (str(rustup) if rustup.exists() else None)


def _version(tool: str) -> tuple[int, int] | None:
    exe = _tool(tool)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+)\.(\d+)\.\d+", out)
    return (int(match[1]), int(match[2])) if match else None


def toolchain_problem() -> str | None:
    """Why the adapter cannot be built here (cargo or a new enough rustc
    missing), or None."""
    need = ".".join(map(str, MIN_RUSTC))
    for tool in ("cargo", "rustc"):
        version = _version(tool)
        if version is None:
            return f"the rust-libp2p adapter needs {tool} (rustc >= {need}); install it with rustup"
        if tool == "rustc" and version < MIN_RUSTC:
            return f"the rust-libp2p adapter needs rustc >= {need}, this host has {version[0]}.{version[1]}"
    return None


def build_rust_adapter(reporter: Reporter | None = None) -> Path:
    """The adapter binary, built (or found up to date) by cargo in the cache."""
    reporter = reporter or Reporter()
    problem = toolchain_problem()
    if problem is None and not (ADAPTER_DIR / "Cargo.toml").is_file():
        problem = f"the rust-libp2p adapter's sources are not at {ADAPTER_DIR} (a source checkout has them)"
    if problem is not None:
        raise BackendUnavailable(problem)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir())}
    built_from = _forget_other_sources()
    manifest = ADAPTER_DIR / "Cargo.toml"
    cmd = [_tool("cargo") or "cargo", "build", "--release", "--locked", "--manifest-path", str(manifest)]
    reporter.note(f"cargo build --release --locked ({ADAPTER_DIR.name}, target {target_dir()})")
    with reporter.phase(f"building the {ROUTER} adapter with cargo"):
        try:
            result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise TestbedError(f"cargo build of the {ROUTER} adapter took over {BUILD_TIMEOUT_S} s") from exc
    if result.returncode != 0:
        raise TestbedError(
            f"cargo build of the {ROUTER} adapter failed (exit {result.returncode}):\n"
            + "\n".join(result.stderr.strip().splitlines()[-25:])
        )
    if not binary_path().is_file():
        raise TestbedError(f"cargo build succeeded but {binary_path()} is missing")
    write_atomic(_sources_stamp(), built_from)
    return binary_path()


def _sources_stamp() -> Path:
    return target_dir() / "release" / f"{BINARY}.sources"


def _forget_other_sources() -> str:
    """The hash of this checkout's adapter sources. cargo judges a build
    fresh by file times, not content, and every checkout shares the target
    directory: one whose sources differ from the last build's but are older
    than it would get that build's binary. So when the hash differs from the
    one recorded with the binary, the adapter's own fingerprints are removed
    and cargo compiles the adapter again (its crates stay built)."""
    digest = hashlib.sha256()
    _hash_sources(digest)
    sources = digest.hexdigest()
    stamp = _sources_stamp()
    if not stamp.is_file() or stamp.read_text() != sources:
        for stale in (target_dir() / "release" / ".fingerprint").glob("gossip-testbed-rust-adapter-*"):
            shutil.rmtree(stale, ignore_errors=True)
    return sources


def rust_adapter_command(reporter: Reporter | None = None) -> list[str]:
    """The process backend's command for a rust-libp2p node (its --params and
    --config follow)."""
    return [str(build_rust_adapter(reporter))]


def _source_files() -> list[Path]:
    files = [ADAPTER_DIR / "Cargo.toml", ADAPTER_DIR / "Cargo.lock"]
    return files + sorted(p for p in (ADAPTER_DIR / "src").rglob("*") if p.is_file())


def _content_hash(dockerfile: str, base_id: str) -> str:
    digest = hashlib.sha256()
    for part in (str(IMAGE_FORMAT), dockerfile, base_id):
        digest.update(part.encode() + b"\0")
    _hash_sources(digest)
    return digest.hexdigest()[:12]


def _hash_sources(digest: Any) -> None:
    for path in _source_files():
        digest.update(str(path.relative_to(ADAPTER_DIR)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())


def rust_image_tag(base_ref: str, base_id: str) -> tuple[str, str]:
    """(Dockerfile, tag) of the adapter image on that base."""
    dockerfile = DOCKERFILE.format(base=base_id, base_ref=base_ref, binary=BINARY, in_image=IN_IMAGE,
                                   router=ROUTER)
    return dockerfile, f"{IMAGE_REPO}:{_content_hash(dockerfile, base_id)}"


def build_rust_image(client: Any, reporter: Reporter | None = None) -> str:
    """The tag of an up-to-date rust-libp2p adapter image, building the binary
    and the image when needed."""
    reporter = reporter or Reporter()
    base_ref, base_id = resolve_base(client, "auto", reporter)
    dockerfile, tag = rust_image_tag(base_ref, base_id)
    if image_or_none(client, tag) is not None:
        reporter.note(f"image {tag} is up to date")
        return tag
    binary = build_rust_adapter(reporter)
    reporter.note(f"building {tag} from {base_ref}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gtb-rust-image-", dir=cache_dir()) as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(dockerfile)
        shutil.copy2(binary, ctx / BINARY)
        build_context(client, ctx, tag, reporter)
    _check_runs(client, tag)
    reporter.note(f"built {tag} in {time.monotonic() - started:.1f} s")
    prune_older(client, IMAGE_REPO, client.images.get(tag).id, reporter)
    return tag


def _check_runs(client: Any, tag: str) -> None:
    """Runs the binary in the image with an unknown argument: it must print its
    usage and exit 2. Anything else (a missing loader or library) removes the
    image."""
    output = b""
    try:
        container = client.containers.run(tag, command=["--check"], detach=True, network_mode="none",
                                          labels={LABEL: "1"})
        try:
            status = container.wait(timeout=60).get("StatusCode")
            output = container.logs(stdout=True, stderr=True)
        finally:
            container.remove(force=True)
    except Exception as exc:  # docker errors and timeouts alike mean "does not run"
        status, output = None, str(exc).encode()
    if status != 2 or b"usage" not in output:
        client.images.remove(tag, force=True)
        raise TestbedError(
            f"the {ROUTER} adapter does not run in {tag} (exit {status}): "
            + output.decode(errors="replace").strip()[-500:]
        )
