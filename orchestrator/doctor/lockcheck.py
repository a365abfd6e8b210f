"""Does the running environment hold exactly what requirements.lock pins?
The lock is what CI tested; an environment that drifted from it may give
results CI never saw. Pure functions over the lock's text and a name→version
map, so the doctor and its tests share one reading of the lock."""

from __future__ import annotations

import re
from collections.abc import Mapping

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def canonical(name: str) -> str:
    """PEP 503 normalisation: `Typing_Extensions` and `typing-extensions` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text: str) -> dict[str, str]:
    """name → version of every `name==version` line of a requirements lock."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def drift(pins: Mapping[str, str], installed: Mapping[str, str]) -> tuple[str, ...]:
    """One line per package whose installed version is not the locked one
    (missing, different, or not in the lock), sorted by name; () when the
    environment is the lock."""
    lines = []
    for name in sorted(pins.keys() | installed.keys()):
        want, have = pins.get(name), installed.get(name)
        if want == have:
            continue
        if have is None:
            lines.append(f"{name} missing (lock {want})")
        elif want is None:
            lines.append(f"{name} {have} not in the lock")
        else:
            lines.append(f"{name} {have} (lock {want})")
    return tuple(lines)
