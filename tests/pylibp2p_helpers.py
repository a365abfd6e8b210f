"""What the py-libp2p tests share: where the adapter and its virtualenv are,
why they cannot run here (None: they can), and the waits they need on a
shared, loaded box."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ADAPTER_DIR = ROOT / "adapters" / "py-libp2p"
ADAPTER = ADAPTER_DIR / "adapter.py"
PY_VENV = Path(os.environ.get("PYLIBP2P_VENV", ROOT / ".venv-pylibp2p"))
PY = PY_VENV / "bin" / "python"
START_S = 180.0  # importing py-libp2p on a loaded shared box can take a minute


def pylibp2p_missing() -> str | None:
    if not PY.exists():
        return f"no py-libp2p virtualenv at {PY_VENV} (make it with scripts/pylibp2p-venv.sh)"
    probe = subprocess.run([str(PY), "-c", "import libp2p"], capture_output=True, text=True)
    if probe.returncode:
        return f"py-libp2p does not import in {PY_VENV}: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def ndjson(path: Path) -> list[dict]:
    """An adapter's stdout so far, one object per line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def shut_down(proc: subprocess.Popen, client: Any) -> None:
    """Through the control endpoint (graceful); killed if that does not end it."""
    if proc.poll() is None:
        client.try_call("shutdown")
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
