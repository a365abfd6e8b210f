"""The tool's version, as recorded in every manifest and printed by --version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def tool_version() -> str:
    try:
        return version("gossip-testbed")
    except PackageNotFoundError:
        return "0+unknown"
