"""`testbed sim --pypy` gives CPython's run, byte for byte: the same traces,
counters and event log for the same seed, on files that exercise churn,
gossipsub's versions, episub, scoring under attack and the sampled trace
level (orchestrator/pypy/run.py). PyPy is another implementation of the
language (its own dicts, sets, ints and random module underneath), so this
is the check that the simulator's output depends on the program alone.

Needs Docker and the gossip-testbed/pypy image (bootstrap.sh builds it;
`testbed image build --pypy`); skipped with the reason otherwise.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / ".venv" / "bin" / "testbed"
WALL = ("wall_s", "events_per_s")  # how long it took: the rest of a summary must agree


def _pypy_image_or_reason() -> str | None:
    try:
        from orchestrator.dockerapi.client import docker_client
        from orchestrator.pypy.image import pypy_image_tag

        client = docker_client(timeout=30)
    except Exception as exc:  # noqa: BLE001 - any reason there is no daemon is a reason to skip
        return f"no Docker daemon: {exc}"
    try:
        if pypy_image_tag(client) is None:
            return "the gossip-testbed/pypy image is not built (testbed image build --pypy; bootstrap.sh builds it)"
    finally:
        client.close()
    return None


REASON = _pypy_image_or_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def sim(file: str, out: Path, *extra: str) -> list[dict]:
    """The summary of each run (one per variant)."""
    result = subprocess.run([str(TESTBED), "sim", str(ROOT / "topologies" / file), "--out", str(out),
                             "--no-report", "--json", *extra], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return [{k: v for k, v in run["summary"].items() if k not in WALL} for run in json.loads(result.stdout)["runs"]]


def contents(run_dir: Path) -> dict[str, str]:
    """Every file the simulation wrote but the manifests (which say how long
    it took and on what), by its path under `run_dir`."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != "manifest.json"}


@pytest.mark.parametrize(("file", "extra"), [
    ("churn-30.yaml", ()),
    ("gossipsub-versions.yaml", ()),
    ("episub-vs-gossipsub-100.yaml", ()),
    ("attack-eclipse-100.yaml", ()),
    ("simsub-1000.yaml", ("--trace-sample", "0.1")),
])
def test_pypy_writes_what_cpython_writes(tmp_path, file, extra):
    on_cpython = sim(file, tmp_path / "cpython", *extra)
    on_pypy = sim(file, tmp_path / "pypy", *extra, "--pypy")
    written = contents(tmp_path / "cpython")
    assert any("traces" in Path(name).parts for name in written)
    assert contents(tmp_path / "pypy") == written
    assert on_pypy == on_cpython
    for cpython_manifest in (tmp_path / "cpython").rglob("manifest.json"):
        pypy_manifest = tmp_path / "pypy" / cpython_manifest.relative_to(tmp_path / "cpython")
        runs = [json.loads(m.read_text()) for m in (cpython_manifest, pypy_manifest)]
        assert [m["interpreter"] for m in runs] == ["CPython", "PyPy"]
        assert runs[0]["events_processed"] == runs[1]["events_processed"] > 0
