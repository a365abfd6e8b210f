"""The errors the CLI turns into one clear message and an exit code, so bad
input never starts anything half-way."""

from __future__ import annotations


class TestbedError(Exception):
    """A failure the user can act on; `exit_code` is what the CLI exits with."""

    exit_code = 1


class InputError(TestbedError):
    """Bad input (an experiment file, a run directory, an argument): exit 2.
    The message names the file, the field and what was wrong."""

    exit_code = 2


class BackendUnavailable(TestbedError):
    """A backend cannot run here (no Docker daemon, no Java): exit 3."""

    exit_code = 3


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
