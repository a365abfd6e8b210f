"""The shared errors (node/errors.py), under the name orchestrator code has
always imported them by."""

from __future__ import annotations

from node.errors import BackendUnavailable, InputError, TestbedError

__all__ = ["BackendUnavailable", "InputError", "TestbedError"]
