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
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ \\;]+)")


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_pip_freeze_is_the_lock():
    out = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True, text=True, check=True,
    ).stdout
    installed = {}
    for line in out.splitlines():
        name, sep, version = line.partition("==")
        assert sep, f"pip freeze lists {line!r}, not a locked release (run ./bootstrap.sh)"
        installed[canonicalize_name(name)] = version
    pins = lock_pins()
    differ = {n: (installed.get(n), pins.get(n)) for n in installed.keys() | pins.keys()
              if installed.get(n) != pins.get(n)}
    assert not differ, f"installed vs locked (run ./bootstrap.sh): {differ}"


def test_lock_satisfies_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = lock_pins()
    for line in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(line)
        version = pins.get(canonicalize_name(req.name))
        assert version is not None, f"{req.name} is not in requirements.lock (run scripts/lock.sh)"
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {req.name}=={version}, outside pyproject's {req.specifier}"
        )


def test_every_pin_has_hashes():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text())
    pinned = [b for b in blocks if PIN.match(b)]
    assert len(pinned) == len(lock_pins()) > 0
    for block in pinned:
        assert "--hash=sha256:" in block, f"no hash for {block.splitlines()[0]}"
