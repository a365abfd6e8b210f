"""Same seed, same bytes: an engine run is a pure function of its seed and its
inputs, whatever PYTHONHASHSEED says (set order of bytes ids depends on it,
so engines sort before they draw)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine_harness import Network, random_edges

ROOT = Path(__file__).resolve().parent.parent
KINDS = ["floodsub", "randomsub", "meshsub", "gossipsub", "simsub"]


def scenario(kind: str, seed: int, out_dir: Path) -> None:
    """A small run touching every input: joins, heartbeats at each engine's
    phase, publishes from subscribers and non-subscribers, a leave, a rejoin
    and a disconnect, with random per-link latencies; traces written."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(14)]
    edges = random_edges(names, 0.3, rng)
    params = {"D": 4, "D_low": 3, "D_high": 6} if kind in ("gossipsub", "meshsub") else {}
    net = Network.build({n: kind for n in names}, edges=edges, params=params, seed=seed, latency=(5, 80))
    net.join_all("t", names[1:])
    net.join_all("u", names[::3])
    net.start_heartbeats()
    net.run_for(2.2)
    for i in range(6):
        net.publish(rng.choice(names), rng.choice(["t", "u"]), f"m{i}".encode())
        net.run_for(rng.choice([0.05, 0.4, 1.1]))
    net.leave(names[2], "t")
    a = names[5]
    if net.neighbours(a):
        net.disconnect(a, sorted(net.neighbours(a))[0])
    net.run_for(1.5)
    net.join(names[2], "t")
    net.publish(names[7], "t", b"last")
    net.run_for(3)
    out_dir.mkdir(parents=True, exist_ok=True)
    net.write_traces(out_dir)


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.pb"))}


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_gives_byte_identical_traces(tmp_path, kind):
    scenario(kind, 11, tmp_path / "a")
    scenario(kind, 11, tmp_path / "b")
    a, b = digest(tmp_path / "a"), digest(tmp_path / "b")
    assert len(a) == 14 and a == b


@pytest.mark.parametrize("kind", ["randomsub", "gossipsub", "simsub"])
def test_different_seeds_give_different_traces(tmp_path, kind):
    scenario(kind, 11, tmp_path / "a")
    scenario(kind, 12, tmp_path / "b")
    assert digest(tmp_path / "a") != digest(tmp_path / "b")


def test_same_seed_byte_identical_across_processes_with_different_hash_seeds(tmp_path):
    code = (
        "import sys; from pathlib import Path; import test_determinism as t\n"
        "for kind in t.KINDS: t.scenario(kind, 3, Path(sys.argv[1]) / kind)\n"
    )
    digests = []
    for hash_seed in ("0", "4242"):
        out = tmp_path / hash_seed
        env = {**os.environ, "PYTHONHASHSEED": hash_seed,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
        subprocess.run([sys.executable, "-c", code, str(out)], check=True, env=env, cwd=ROOT, timeout=120)
        digests.append({kind: digest(out / kind) for kind in KINDS})
    assert all(len(d) == 14 for d in digests[0].values())
    assert digests[0] == digests[1]
