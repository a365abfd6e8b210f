"""The host's iptables rules a testbed adds, found again by their comments.

Why one module: two parts of the docker backend add rules on the host (the
delay line's, orchestrator/shaping/delayline.py, and the own bridge's,
orchestrator/backends/docker/own_bridge.py), and `down`, `down --all` and `gc` must find
both with no record at all, even after a killed CLI. Every rule we add
carries the comment `<owner> <testbed>:<hash of the state directory>`, where
the owner names the part that added it; nothing without such a comment is
ever removed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import zlib
from dataclasses import dataclass

from orchestrator.errors import TestbedError

DELAY_LINE = "gossip-testbed"  # owner of the delay line's rules (the comment's first word)
BRIDGE = "gossip-testbed-bridge"  # owner of an own bridge's rules
OWNERS = (DELAY_LINE, BRIDGE)
CHAINS = (("raw", "PREROUTING"), ("mangle", "FORWARD"), ("filter", "FORWARD"))  # where we add rules
LOCK_WAIT_S = "10"  # `iptables -w`: wait for the xtables lock instead of failing


def tag_of(testbed: str, state_scope: str) -> str:
    """A comment's tag: the testbed and a hash of its state directory."""
    return f"{testbed}:{zlib.crc32(state_scope.encode()):08x}"


@dataclass(frozen=True)
class IptablesRule:
    """One of our rules, as `iptables -S` lists it (chain first)."""

    table: str
    spec: tuple[str, ...]
    owner: str  # DELAY_LINE or BRIDGE
    tag: str  # "<testbed>:<state directory hash>"

    @property
    def testbed(self) -> str:
        return self.tag.rpartition(":")[0]

    def describe(self) -> str:
        return f"iptables rule in {self.table} {self.spec[0]} ({self.owner} {self.tag})"

    def command(self) -> str:
        return shlex.join(["iptables", "-t", self.table, "-D", *self.spec])


def comment(owner: str, tag: str) -> tuple[str, ...]:
    return ("-m", "comment", "--comment", f"{owner} {tag}")


def run(table: str, action: str, spec: tuple[str, ...] | list[str], check: bool = True
        ) -> subprocess.CompletedProcess[str]:
    argv = ["iptables", "-w", LOCK_WAIT_S, "-t", table, action, *spec]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise TestbedError(f"{shlex.join(argv)}: {result.stderr.strip()}")
    return result


def our_rules() -> list[IptablesRule]:
    """Every rule of ours on this host (any testbed's, any owner's)."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return []
    rules = []
    for table, chain in CHAINS:
        for line in run(table, "-S", [chain], check=False).stdout.splitlines():
            words = shlex.split(line)
            if words[:1] != ["-A"] or "--comment" not in words[:-1]:
                continue
            owner, _, tag = words[words.index("--comment") + 1].partition(" ")
            if owner in OWNERS and tag:
                rules.append(IptablesRule(table, tuple(words[1:]), owner, tag))
    return rules


def remove(rule: IptablesRule) -> str | None:
    """Delete one rule: None, or why it could not be."""
    result = run(rule.table, "-D", rule.spec, check=False)
    return None if result.returncode == 0 else (result.stderr.strip() or f"iptables exited {result.returncode}")


def admits(tag: str, testbed: str | None, state: str | None) -> bool:
    """Whether a tag is of `testbed` (None: every testbed) made under the
    state directory `state` (None: any), as a teardown Scope says."""
    name, _, digest = tag.rpartition(":")
    return (testbed is None or name == testbed) and (state is None or digest == tag_of("", state).lstrip(":"))


def admitted(owner: str | None, testbed: str | None, state: str | None) -> list[IptablesRule]:
    """`owner`'s rules (None: any owner's) that `admits` for `testbed` and `state`."""
    return [r for r in our_rules() if owner in (None, r.owner) and admits(r.tag, testbed, state)]
