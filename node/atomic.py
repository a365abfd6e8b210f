"""One way to write a file another process will read (the CLI's state and
run records, the analysis server's warm-up state): to a temporary
file beside it, then rename. A CLI killed half-way (SIGKILL during `up` is a
case `down` must clean up after) leaves the old file or the new one, never a
truncated one that the next reader chokes on."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` with `text`; the file has `mode` (0o600 for secrets)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
