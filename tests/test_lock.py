"""The host environment is the lock: `pip freeze` of the running environment
(.venv, made by ./bootstrap.sh) lists exactly the packages and versions of
requirements.lock, the lock satisfies pyproject.toml's ranges, and every pin
carries hashes so plain `pip install --require-hashes` accepts it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from orchestrator.doctor.lockcheck import canonical, drift, lock_pins

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"


def test_pip_freeze_is_the_lock():
    out = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True, text=True, check=True,
    ).stdout
    installed = {}
    for line in out.splitlines():
        name, sep, version = line.partition("==")
        assert sep, f"pip freeze lists {line!r}, not a locked release (run ./bootstrap.sh)"
        installed[canonical(name)] = version
    assert len(installed) > 20
    assert drift(lock_pins(LOCK.read_text()), installed) == (), "run ./bootstrap.sh"


def test_lock_satisfies_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = lock_pins(LOCK.read_text())
    for line in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(line)
        version = pins.get(canonical(req.name))
        assert version is not None, f"{req.name} is not in requirements.lock (run scripts/lock.sh)"
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {req.name}=={version}, outside pyproject's {req.specifier}"
        )


def test_every_pin_has_hashes():
    text = LOCK.read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text)
    pinned = [b for b in blocks if "==" in b.split(None, 1)[0]]
    assert len(pinned) == len(lock_pins(text)) > 0
    for block in pinned:
        assert "--hash=sha256:" in block, f"no hash for {block.splitlines()[0]}"
