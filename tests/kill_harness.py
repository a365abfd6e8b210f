"""The randomized kill test of the docker backend, shared by the CI test
(tests/test_docker_killtest.py, 12 tries) and the bench script
(bench/bench_teardown.py, 50 tries).

One try: pick a command (`up`, `run` or `down`) and a moment with a seeded
RNG, SIGKILL the CLI at that moment, then run `testbed down --all` under the
same state directory and count what is left of everything that state
directory made: containers, networks, volumes, live network namespaces,
delay lines (processes), iptables rules (the delay line's and the own
bridge's), own bridges and state records. The moments are printed so that a failing try can be replayed.

A network namespace counts as left when its file under /var/run/docker/netns
is still an nsfs mount (an unmounted file is Docker's own bookkeeping, which
its garbage collector removes within about a minute), or, for an own bridge's
containers (no Docker sandbox), when a process or a mount still holds it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.shaping import delayline

from orchestrator.host import iptables

from orchestrator.backends.docker import own_bridge
from orchestrator.dockerapi.names import LABEL_STATE

TESTBED = Path(sys.executable).parent / "testbed"
COMMANDS = ("up", "run", "down")
# How long each command usually takes here with EXPERIMENT: the kill moment is
# drawn uniformly from [0, this].
SPAN_S = {"up": 8.0, "run": 14.0, "down": 6.0}

EXPERIMENT = """\
name: kill
seed: 5
nodes:
  count: 6
  router: gossipsub
  router_params: {D: 3, D_low: 2, D_high: 6}
  topics: [t]
  resources: {memory: 96m}
overlay:
  type: random_regular
  degree: 3
links:
  latency: {model: constant, ms: 5}
workload:
  messages: 10
  interval: 200ms
  size: 64
  publishers: {nodes: [n0]}
linger: 1s
"""


def labelled(state: Path) -> dict[str, list[str]]:
    """Names of the Docker objects made under state directory `state`."""
    flt = f"label={LABEL_STATE}={state.resolve()}"
    out = {}
    for kind in ("container", "network", "volume"):
        cmd = ["docker", kind, "ls", "--filter", flt, "--format", "{{.Name}}" if kind != "container" else "{{.Names}}"]
        if kind == "container":
            cmd.insert(3, "-a")
        out[kind] = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    return out


def host_side(state: Path) -> dict[str, list[str]]:
    """What state directory `state` made on the host outside Docker: delay
    line processes, iptables rules, own bridges."""
    scope = str(state.resolve())
    return {"delay lines": [line.describe() for line in delayline.admitted(None, scope)],
            "iptables rules": [rule.describe() for rule in iptables.admitted(None, None, scope)],
            "bridges": [name for name, _ in own_bridge.admitted(None, scope)]}


def netns_keys(state: Path) -> set[str]:
    """The network namespaces of the containers made under `state` now: a
    Docker sandbox's file (a Docker network's containers), else the
    namespace's identity, "net:[inode]", read from the container's init (an
    own bridge's containers have no sandbox: docker_wiring.py)."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL_STATE}={state.resolve()}"],
                         capture_output=True, text=True, check=True).stdout.split()
    if not ids:
        return set()
    out = subprocess.run(["docker", "inspect", "-f", "{{.NetworkSettings.SandboxKey}} {{.State.Pid}}", *ids],
                         capture_output=True, text=True).stdout.splitlines()
    keys = set()
    for line in out:
        key, _, pid = line.rpartition(" ")
        if key.startswith("/"):
            keys.add(key)
        elif pid.isdigit() and int(pid) > 0:
            try:
                keys.add(os.readlink(f"/proc/{pid}/ns/net"))
            except OSError:
                pass  # it exited meanwhile
    return keys


def live_netns(keys: set[str]) -> list[str]:
    """The namespaces among `keys` still alive: a file still mounted, or an
    identity that some process is in or some nsfs mount holds."""
    mounted = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split()
        if len(parts) > 4:
            mounted.update((parts[3], parts[4]))
    held = set()
    for ns in Path("/proc").glob("[0-9]*/ns/net"):
        try:
            held.add(os.readlink(ns))
        except OSError:
            pass
    return sorted(k for k in keys if k in mounted or (not k.startswith("/") and k in held))


def records(state: Path) -> list[str]:
    beds = state / "testbeds"
    return sorted(d.name for d in beds.iterdir() if (d / "testbed.json").exists()) if beds.is_dir() else []


@dataclass
class NetnsWatch:
    """Collects the namespace files of a state directory's containers while a
    try runs (the killed CLI cannot tell us)."""

    state: Path
    keys: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> NetnsWatch:
        def loop() -> None:
            while not self._stop.is_set():
                self.keys |= netns_keys(self.state)
                self._stop.wait(0.3)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.keys |= netns_keys(self.state)


@dataclass(frozen=True)
class TryResult:
    index: int
    command: str
    kill_at_s: float
    killed: bool  # False: the command had already finished
    down_rc: int
    left: dict[str, list[str]]

    @property
    def clean(self) -> bool:
        return self.down_rc == 0 and not any(self.left.values())

    def line(self) -> str:
        what = "killed" if self.killed else "finished first"
        left = "; ".join(f"{k}: {', '.join(v)}" for k, v in self.left.items() if v) or "nothing left"
        return (f"try {self.index:2d}: SIGKILL `{self.command}` at {self.kill_at_s:5.2f} s ({what}); "
                f"down --all exit {self.down_rc}; {left}")


def _kill_at(argv: list[str], env: dict[str, str], at_s: float) -> bool:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=at_s)
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


def one_try(index: int, rng: random.Random, work: Path) -> TryResult:
    state = work / f"state-{index}"
    env = {**os.environ, "TESTBED_STATE_DIR": str(state)}
    exp = work / "kill.yaml"
    if not exp.exists():
        exp.write_text(EXPERIMENT)
    command = rng.choice(COMMANDS)
    at = round(rng.uniform(0.0, SPAN_S[command]), 2)
    name = f"kill-{index}"
    up = [str(TESTBED), "up", str(exp), "--backend", "docker", "--name", name, "--out", str(work / f"run-{index}")]
    with NetnsWatch(state) as watch:
        if command == "up":
            killed = _kill_at(up, env, at)
        elif command == "run":
            killed = _kill_at([str(TESTBED), "run", str(exp), "--backend", "docker", "--no-report",
                               "--out", str(work / f"run-{index}")], env, at)
        else:
            subprocess.run(up, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
            killed = _kill_at([str(TESTBED), "down", name], env, at)
    down = subprocess.run([str(TESTBED), "down", "--all"], env=env, capture_output=True, text=True, timeout=300)
    left = labelled(state)
    left["netns"] = live_netns(watch.keys)
    left.update(host_side(state))
    left["records"] = records(state)
    return TryResult(index, command, at, killed, down.returncode, left)


def kill_tries(tries: int, seed: int, work: Path, report=print) -> list[TryResult]:
    rng = random.Random(seed)
    report(f"randomized SIGKILL test: {tries} tries, seed {seed}")
    results = []
    for i in range(tries):
        t = time.monotonic()
        result = one_try(i, rng, work)
        report(result.line() + f" [{time.monotonic() - t:.1f} s]")
        results.append(result)
    return results
