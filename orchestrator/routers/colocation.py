"""Identity density (a group's `identities_per_host`) on the real backends:
refused, with the reason, before anything starts.

Why: the simulator gives identities packed on one host one address, which
is all P6 (IP colocation) needs. A real backend would need several router
identities in one network namespace (containers sharing the first one's,
`network_mode="container:<first>"`, each on a port of its own), and the
backends still give every node its own address and the same fixed port, so
a packed file run there would score every sybil as alone: a run that looks
like the attack and is not. Refusing says so instead.
"""

from __future__ import annotations

from orchestrator.errors import InputError
from orchestrator.experiment.model import ResolvedExperiment


def refuse_packing(resolved: ResolvedExperiment, backend: str) -> None:
    """InputError naming the first group that packs identities."""
    packed = next((n for n in resolved.nodes if n.host is not None), None)
    if packed is not None:
        raise InputError(
            f"{resolved.source}: group {packed.group!r}: identities_per_host: several identities on one host (one IP) are built in "
            f"the simulator only (`testbed sim`); the {backend} backend gives every node its own address")
