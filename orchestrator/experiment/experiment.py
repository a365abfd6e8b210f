"""A checked experiment: the file's sections with every default that depends
on the whole file filled in (group names and prefixes, router parameters,
workload and churn topics, the steady-churn downtime), ready for
`resolve(seed)` to make every random choice.

Node names are fixed here (no randomness): a file with one group names its
nodes n0, n1, ... n<count-1>; with several groups, `<group>-0`, `<group>-1`,
...; a group's `prefix` overrides either rule.

A file may declare `variants:` (name -> router/router_params/name/expectations
overrides): `variants()` gives one complete `Experiment` per variant, sharing
everything else (overlay, links, workload, churn, node names and seeds), so the
routers are compared on an identical set-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import InputError
from orchestrator.experiment.activity import Churn, Workload
from orchestrator.experiment.model import Expectation, ResolvedExperiment
from orchestrator.experiment.parts import Group, Links, Overlay, Resources, Wire
from orchestrator.experiment.resolve import resolve
from orchestrator.experiment.yamlsrc import Path_, Source


@dataclass(frozen=True)
class Experiment:
    """A checked experiment file. `resolve(seed)` makes every random choice."""

    name: str
    description: str
    seed: int
    groups: tuple[Group, ...]
    overlay: Overlay
    links: Links
    workloads: tuple[Workload, ...]
    churn: Churn
    expectations: tuple[Expectation, ...]
    duration: float | None
    linger: float  # the bound when linger_auto
    linger_auto: bool
    strict_traces: bool
    time_dilation: float  # wall seconds per experiment second on real backends (node/dilation.py)
    wire: Wire
    resources: Resources | None
    validation_delay: tuple[tuple[str, float], ...]  # (topic, seconds), file order
    source: Source = field(compare=False, repr=False)
    single_group_form: bool = False  # written as `nodes:` rather than `groups:`
    variant: str | None = None  # which of its file's variants this is (None: the file itself)
    variant_set: tuple[tuple[str, Experiment], ...] = field(default=(), compare=False, repr=False)
    sizes: dict[str, dict[str, int]] = field(default_factory=dict)  # the file's `sizes:` (backend -> group -> count)

    @property
    def file(self) -> str:
        return self.source.file

    @property
    def resource_defaults(self) -> dict[str, Any]:
        return self.resources.dump() if self.resources else {}

    def nodes_on(self, backend: str) -> int:
        """How many nodes the file has on `backend`, after its `sizes:`."""
        counts = self.sizes.get(backend, {})
        return sum(counts.get(g.name or "default", g.count) for g in self.groups)

    def node_names(self) -> list[str]:
        return [name for g in self.groups for name in g.node_names()]

    def variants(self) -> list[tuple[str, Experiment]]:
        """(variant name, experiment) for each entry of the file's `variants:`,
        in file order; empty when it has none. Each experiment is complete (its
        own name, routers and expectations; no variants of its own) and resolves
        to the same overlay, links, workload, churn and node seeds as the others
        for the same seed: only the routers (and expectations) differ."""
        return list(self.variant_set)

    def error(self, path: Path_, message: str) -> InputError:
        return self.source.error(path, message)

    def resolve(self, seed: int | None = None) -> ResolvedExperiment:
        """Every choice made: seed None means the file's seed."""
        return resolve(self, self.seed if seed is None else seed)
