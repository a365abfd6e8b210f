"""The minimal gossipsub-interop contract node (tests/contract-node, a small
Rust binary written from libp2p/test-plans' implementation.md alone) as a
Docker image, for the conformance tests: a node that is not our router, run
as a bare `{image, contract: gossipsub-interop}` group.

cargo builds it from its locked crates (the rust-libp2p adapter's, already
in the cargo cache here) into the adapter's target directory, so only the
node itself compiles; the image is FROM the project's local base (Debian bookworm like
this host, nothing pulled) and tagged with a hash of the sources, so an
up-to-date image costs one lookup.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from orchestrator.dockerapi.client import cache_dir
from orchestrator.images.base import build_context, image_or_none, resolve_base
from orchestrator.images.rust import target_dir, toolchain_problem
from orchestrator.progress import Reporter

CRATE = Path(__file__).resolve().parent / "contract-node"
BINARY = "contract-node"
REPO = "gossip-testbed/contract-node"
DOCKERFILE = """\
FROM {base}
COPY {binary} /usr/local/bin/{binary}
ENTRYPOINT ["/usr/local/bin/{binary}"]
LABEL gossip-testbed=1 gossip-testbed.router=contract-node
"""


def build_contract_node() -> Path:
    """The binary, built (or found up to date) by cargo from the locked crates."""
    problem = toolchain_problem()
    if problem is not None:
        raise RuntimeError(problem)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir())}
    subprocess.run(["cargo", "build", "--release", "--locked", "--manifest-path",
                    str(CRATE / "Cargo.toml")], env=env, check=True, capture_output=True, timeout=3600)
    return target_dir() / "release" / BINARY


def contract_node_image(client) -> str:
    """The tag of an up-to-date contract-node image."""
    reporter = Reporter()
    _, base_id = resolve_base(client, "auto", reporter)
    dockerfile = DOCKERFILE.format(base=base_id, binary=BINARY)
    digest = hashlib.sha256(dockerfile.encode())
    for path in [CRATE / "Cargo.toml", CRATE / "Cargo.lock", *sorted((CRATE / "src").rglob("*.rs"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    tag = f"{REPO}:{digest.hexdigest()[:12]}"
    if image_or_none(client, tag) is not None:
        return tag
    binary = build_contract_node()
    with tempfile.TemporaryDirectory(prefix="gtb-contract-node-", dir=cache_dir()) as tmp:
        (Path(tmp) / "Dockerfile").write_text(dockerfile)
        shutil.copy2(binary, Path(tmp) / BINARY)
        build_context(client, Path(tmp), tag, reporter)
    return tag
