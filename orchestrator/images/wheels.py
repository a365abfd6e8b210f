"""An image's Python packages, installed on the host: `pip install --target`
for the image's interpreter (its Python version, implementation, ABI and the
manylinux platforms), so `docker build` only copies them in and needs no
network. One way for the router image, the py-libp2p image and the
simulator's PyPy image (orchestrator/pypy/image.py)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.dockerapi.client import cache_dir
from orchestrator.errors import TestbedError


def pip_platforms() -> list[str]:
    machine = platform.machine()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)
    return [f"manylinux_2_28_{arch}", f"manylinux2014_{arch}", f"manylinux_2_17_{arch}"]


def pip_install_target(root: Path, interpreter: list[str], packages: list[str], failure: str) -> None:
    """Install `packages` (pip's arguments: requirements, or `-r LOCK`) into
    `root` for the interpreter `interpreter` describes (--python-version,
    --implementation, --abi, and --only-binary or --require-hashes as the
    caller wants); when pip fails, `root` goes and TestbedError says
    `failure` and what pip said."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--no-compile", "--target", str(root), *interpreter, "--cache-dir", str(cache_dir() / "pip")]
    for plat in pip_platforms():
        cmd += ["--platform", plat]
    result = subprocess.run(cmd + packages, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise TestbedError(f"{failure}:\n{result.stderr.strip()[-2000:]}")
