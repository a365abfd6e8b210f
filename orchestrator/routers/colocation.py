"""Identity density (a group's `identities_per_host`) on the real backends:
what they can pack, checked before anything starts.

A packed identity shares its host's IP address with the other identities
there, each on ports of its own (`Backend.set_host`): on the process
backend one loopback address, on docker one network namespace (the first
identity's container; the others join it, `network_mode="container:..."`).
That address is what P6 (IP colocation) scores. What cannot work that way
is refused, naming the file and the group or timeline entry:

- a backend without `shared_hosts` (swarm: tasks on different engines
  cannot share a namespace);
- foreign routers: their contract listens on one fixed port;
- more than MAX_PER_HOST identities on one host (their ports would run into
  the control ports);
- churn of a packed identity: the identities of a host share one network
  namespace, so a partition or a restart of the first one would hit them all.
"""

from __future__ import annotations

from collections import Counter

from orchestrator.backends.api import Backend
from orchestrator.errors import InputError
from orchestrator.experiment.model import ResolvedExperiment
from orchestrator.routers.kinds import kind_of

MAX_PER_HOST = 256  # identities on one host: ports PEER_PORT + k, CONTROL_PORT + k for k < 256


def check_packing(resolved: ResolvedExperiment, backend: type[Backend] | Backend) -> None:
    """InputError for the first packing this backend cannot run."""
    packed = [n for n in resolved.nodes if n.host is not None]
    if not packed:
        return
    where = f"{resolved.source}: group {packed[0].group!r}: identities_per_host"
    if not backend.capabilities.shared_hosts:
        raise InputError(f"{where}: the {backend.name} backend gives every node its own address; several identities "
                         "on one host run in the simulator (`testbed sim`) and on the process and docker backends")
    for spec in packed:
        if kind_of(spec.router).foreign:
            raise InputError(f"{resolved.source}: group {spec.group!r}: identities_per_host: router {spec.router!r} "
                             "listens on its contract's one fixed port, so only our routers share a host")
    sizes = Counter(n.host for n in packed)
    host, size = sizes.most_common(1)[0]
    if size > MAX_PER_HOST:
        group = next(n.group for n in packed if n.host == host)
        raise InputError(f"{resolved.source}: group {group!r}: identities_per_host: {size} identities on one host; "
                         f"the real backends pack at most {MAX_PER_HOST}")
    hosted = {n.name for n in packed}
    for action in resolved.churn:
        named = sorted(hosted.intersection(action.nodes))
        if named:
            raise InputError(f"{resolved.source}: {action.source or 'churn'}: {action.action} of {named[0]}, an identity packed "
                             "on a shared host (identities_per_host): its host's identities share one network "
                             "namespace, so the real backends cannot churn one alone (the simulator can)")
