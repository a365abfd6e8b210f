"""`testbed doctor`: what this host offers the testbed and what each missing
piece costs, before a run rather than in a red banner after it.

facts.py gathers (all I/O, through a fakeable Host), assess.py judges (pure),
budget.py turns free memory and cores into a router count, lockcheck.py
compares the environment with requirements.lock.
"""

from __future__ import annotations

from orchestrator.doctor.assess import Check, Report, assess
from orchestrator.doctor.facts import Host, HostFacts, gather

__all__ = ["Check", "Host", "HostFacts", "Report", "assess", "gather"]
