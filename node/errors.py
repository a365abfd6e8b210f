"""The errors the CLI turns into one clear message and an exit code, so bad
input never starts anything half-way. They live at the bottom of the arrows
(cli -> orchestrator/analysis -> node) so that the orchestrator and the
analysis raise the same errors without the analysis importing the
orchestrator."""

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


class IncompleteData(TestbedError):
    """The analysis would report figures from part of the data (events
    decoded from the traces went missing on their way into Spark): exit 3,
    naming both counts. Never a figure from partial data."""

    exit_code = 3
