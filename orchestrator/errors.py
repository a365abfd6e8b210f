"""The shared errors (node/errors.py), under the name orchestrator code has
always imported them by."""

from __future__ import annotations

from node.errors import BackendUnavailable, InputError, TestbedError

__all__ = ["BackendUnavailable", "InputError", "TeardownIncomplete", "TestbedError"]


class TeardownIncomplete(TestbedError):
    """Something a testbed created could not be removed: exit 1. Each line of
    `left` names the resource and the command that removes it; the testbed's
    state record is kept so that a later `testbed down` retries."""

    def __init__(self, left: list[str], removed: list[str]) -> None:
        self.left = left
        self.removed = removed
        super().__init__(
            f"teardown incomplete: {len(left)} object(s) left; the testbed stays recorded so that "
            "`testbed down` retries\n  " + "\n  ".join(left)
        )
