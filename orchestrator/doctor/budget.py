"""How many routers this host can carry faithfully at once: the smaller of
what its free memory holds and what half its cores can run at rest.

Per-router figures, measured on this project's 2-core machine (shared with
other work, so rounded up):
- memory: a router process holds ~31 MiB RSS (bench/bench_process.py; 16
  routers up, 30.6 MiB each); a container adds its containerd shim and
  docker-init, so 40 MiB a router.
- CPU at rest: 1 ms per second per router, rounded up from
  bench/bench_router_cpu.py (0.6 ms/s each for 50 routers, 0.8 ms/s for 10, on the
  process backend, since a router at rest wakes only for its heartbeats; it was
  7 ms/s with the 50 ms lag ticker of issue 13).

    by_memory = (MemAvailable - 1 GiB for the controller and the OS) / 40 MiB
    by_cpu    = cores * 0.5 / 0.001
    routers   = min(by_memory, by_cpu)

Half the cores: the other half is for the workload, the controller and
scheduling slack. This is a budget at rest: a workload costs CPU per message
(bench/bench_router_cpu.py), so under load the faithful count is lower, and a
run's manifest warns when event-loop lag says the host was overloaded
(docs/running.md).
"""

from __future__ import annotations

from dataclasses import dataclass

ROUTER_MEMORY_BYTES = 40 * 2**20
ROUTER_CPU_AT_REST = 0.001  # core-seconds per second
CPU_SHARE_AT_REST = 0.5
MEMORY_RESERVE_BYTES = 2**30
FORMULA = ("min((MemAvailable - 1 GiB) / 40 MiB, cores * 0.5 / 0.001): "
           "40 MiB and 1 ms of CPU per second per router at rest")


@dataclass(frozen=True)
class RouterBudget:
    cores: int
    available_bytes: int
    by_memory: int
    by_cpu: int

    @property
    def routers(self) -> int:
        return min(self.by_memory, self.by_cpu)

    @property
    def bound(self) -> str:
        """What limits the budget: "memory" or "cpu"."""
        return "memory" if self.by_memory < self.by_cpu else "cpu"


def router_budget(cores: int, available_bytes: int) -> RouterBudget:
    by_memory = max(0, available_bytes - MEMORY_RESERVE_BYTES) // ROUTER_MEMORY_BYTES
    by_cpu = int(cores * CPU_SHARE_AT_REST / ROUTER_CPU_AT_REST)
    return RouterBudget(cores, available_bytes, by_memory, by_cpu)
