"""Where a run directory goes when the user does not say."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path


def default_run_dir(name: str, backend: str, root: Path = Path("runs")) -> Path:
    """runs/<experiment>-<UTC time>-<backend>, never an existing directory."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    candidate = root / f"{safe}-{stamp}-{backend}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = root / f"{safe}-{stamp}-{backend}-{n}"
    return candidate
