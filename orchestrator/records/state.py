"""Where running testbeds are recorded, so that `status`, `publish`, `churn`
and `down` (other CLI invocations) find them, and `down` can clean up after a
CLI that was killed half-way through `up`.

    $TESTBED_STATE_DIR (default ~/.local/state/gossip-testbed)/
      testbeds/<name>/testbed.json   name, backend, run_dir, token, nodes (addresses,
                                     pids + start times), status, ...
      testbeds/<name>/configs/       each node's NodeConfig (process backend)
      testbeds/<name>/lock           flock for read-modify-write

Records are plain JSON objects (backends may add fields), written atomically
(temp file + rename) under an exclusive lock. The directory holds the testbed
token, so it is created 0700.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from node.atomic import write_atomic
from node.config import NodeConfig
from orchestrator.errors import InputError, TestbedError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
RECORD = "testbed.json"


def state_dir() -> Path:
    env = os.environ.get("TESTBED_STATE_DIR")
    if env:
        root = Path(env)
    else:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        root = Path(base) / "gossip-testbed"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InputError(
            f"testbed name {name!r}: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


class StateStore:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir()
        self.testbeds = self.root / "testbeds"
        self.testbeds.mkdir(parents=True, exist_ok=True, mode=0o700)

    def dir(self, name: str) -> Path:
        return self.testbeds / check_name(name)

    def names(self) -> list[str]:
        return sorted(p.name for p in self.testbeds.iterdir() if p.is_dir() and NAME_RE.match(p.name))

    def exists(self, name: str) -> bool:
        return (self.dir(name) / RECORD).is_file()

    def load(self, name: str) -> dict[str, Any] | None:
        path = self.dir(name) / RECORD
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return {"name": name, "corrupt": True, "nodes": {}}

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        d = self.dir(name)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(d / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, name: str, record: dict[str, Any]) -> None:
        write_atomic(self.dir(name) / RECORD, json.dumps(record, indent=1, sort_keys=True), 0o600)

    def create(self, record: dict[str, Any]) -> None:
        """Record a new testbed; InputError if the name is taken."""
        name = record["name"]
        with self.locked(name):
            if (self.dir(name) / RECORD).is_file():
                raise InputError(
                    f"a testbed named {name!r} is already recorded; `testbed down {name}` first or pick --name"
                )
            self._write(name, record)

    def update(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        with self.locked(name):
            record = self.load(name) or {"name": name, "nodes": {}}
            change(record)
            self._write(name, record)
            return record

    def set_node(self, name: str, node: str, **fields: Any) -> None:
        def change(record: dict[str, Any]) -> None:
            record.setdefault("nodes", {}).setdefault(node, {}).update(fields)

        self.update(name, change)

    def remove(self, name: str) -> None:
        shutil.rmtree(self.dir(name), ignore_errors=True)


def recorded_configs(record: dict[str, Any]) -> dict[str, NodeConfig]:
    """Each node's config from the file its testbed record names (another
    CLI wrote it); one that cannot be read is a TestbedError naming it,
    which `testbed down` reports before it cleans up."""
    configs: dict[str, NodeConfig] = {}
    for name, entry in (record.get("nodes") or {}).items():
        path = entry.get("config")
        if path and Path(path).is_file():
            try:
                configs[name] = NodeConfig.load(Path(path))
            except (ValueError, TypeError) as exc:
                raise TestbedError(f"{path}: {name}'s config is unreadable ({exc}); "
                                   f"`testbed down {record.get('name')}` cleans up") from None
    return configs
