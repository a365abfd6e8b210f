"""Per-link delay, jitter and loss in the host's kernel path where the kernel
has no sch_netem: a delay line (orchestrator/shaping/native/delayline, `gtb-delayline`)
that holds every frame crossing a testbed's bridge for its link's delay.

Why: without netem the routers delayed their own frames, which cost each of
them about 1 ms of CPU per delivered message (docs/wire.md, fourth pass), and
foreign routers needed a shaping proxy beside them. Here one native process per
testbed does it for every router: an iptables rule in mangle FORWARD hands each
IPv4 packet from the bridge to the bridge (br_netfilter) to NFQUEUE queue Q;
the delay line gives each packet its verdict when it is due (or drops it, for
loss). The rule has no bypass: with the delay line gone nothing crosses, so a
dead delay line cannot pass as an unshaped but healthy run.

Where things are, so that any later CLI process (and `testbed gc`, with no
record at all) finds them: the delay line's files (its table, the statistics
it rewrites every second, its log) are in the testbed's state directory,
`<state>/testbeds/<testbed>/delay-line/`, and its command line names its
table, so the process itself says whose it is; the rule's comment is
`gossip-testbed <testbed>:<hash of the state directory>`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.atomic import write_atomic
from node.config import LinkShape
from orchestrator.dockerapi.client import cache_dir
from orchestrator.host import iptables
from orchestrator.errors import BackendUnavailable, TestbedError
from orchestrator.host.procs import proc_alive, proc_cmdline, terminate

BINARY = "gtb-delayline"
CRATE_DIR = Path(__file__).resolve().parent / "native" / "delayline"
QUEUES = range(31000, 32000)  # NFQUEUE numbers we use; the start is fixed by the tag
QUEUE_LIST = Path("/proc/net/netfilter/nfnetlink_queue")  # queues bound on this host
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
BUILD_TIMEOUT_S = 600
RT_PRIORITY = 20  # SCHED_FIFO: above every normal process, below the kernel's interrupt threads (50)
LATE_WARN_US = 1000  # a delay line releasing packets later than this at p99 makes the latencies untrue


def target_dir() -> Path:
    return cache_dir() / "delayline" / "target"


def binary_path() -> Path:
    return target_dir() / "release" / BINARY


def build() -> Path:
    """The delay line, built (or found up to date) by cargo in the cache. It
    has no dependencies: `--offline` never reaches a registry."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not Path(cargo).exists():
        raise BackendUnavailable(f"building {BINARY} needs cargo (rustup installs it)")
    cmd = [cargo, "build", "--release", "--offline", "--locked", "--manifest-path", str(CRATE_DIR / "Cargo.toml")]
    result = subprocess.run(cmd, env={**os.environ, "CARGO_TARGET_DIR": str(target_dir())},
                            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if result.returncode != 0:
        raise TestbedError(f"cargo build of {BINARY} failed:\n{result.stderr.strip()[-3000:]}")
    return binary_path()


def unavailable() -> str | None:
    """Why this host cannot run a delay line, or None."""
    if os.geteuid() != 0:
        return "the delay line needs root (iptables, NFQUEUE)"
    if shutil.which("iptables") is None:
        return "the delay line needs iptables"
    if not QUEUE_LIST.exists():
        return f"the kernel has no NFQUEUE ({QUEUE_LIST} is missing)"
    if not binary_path().is_file():
        return f"{BINARY} is not built ({binary_path()}; ./bootstrap.sh builds it where cargo is)"
    return None


@dataclass(frozen=True)
class Rule:
    """One table line: frames from src to dst (`*`: src's default) get `shape`."""

    src: str
    dst: str
    shape: LinkShape

    def line(self) -> str:
        s = self.shape
        return (f"{self.src} {self.dst} {round(s.delay_ms * 1000)} {round(s.jitter_ms * 1000)} "
                f"{round(s.loss * 1_000_000)}")


@dataclass(frozen=True)
class Running:
    """A delay line process found on this host."""

    pid: int
    queue: int
    table: Path  # <state>/testbeds/<testbed>/delay-line/table

    @property
    def testbed(self) -> str:
        return self.table.parents[1].name

    @property
    def state(self) -> str:
        return str(self.table.parents[3])

    def describe(self) -> str:
        return f"delay line of testbed {self.testbed} (pid {self.pid}, NFQUEUE {self.queue})"


class DelayLine:
    """The delay line of one testbed, run from `directory` (its table, stats
    and log); `tag` names it in its rule's comment."""

    def __init__(self, directory: Path, tag: str) -> None:
        self.directory = directory
        self.tag = tag
        self.table = directory / "table"
        self.stats_path = directory / "stats.json"
        self._rules: dict[str, list[Rule]] | None = None  # by source address, read from the table once
        self._found: Running | None = None

    # ------------------------------------------------------------ lifecycle

    def running(self) -> Running | None:
        """The process running from this directory: the one found before
        while it lives (a scan of /proc for each of 250 nodes' shaping
        would read every process's command line 250 times)."""
        if self._found is None or _running_at(self._found.pid) != self._found:
            self._found = next((r for r in find_running() if r.table == self.table.resolve()), None)
        return self._found

    def ensure(self, bridge: str, subnet: str, seed: int) -> Running:
        """The running delay line of this directory, started (and its rules
        for `bridge` and `subnet` added) when there is none."""
        found = self.running()
        if found is not None:
            return found
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.table.exists():
            write_atomic(self.table, "# src dst delay_us jitter_us loss_ppm\n")
        used = bound_queues()
        start = zlib.crc32(self.tag.encode()) % len(QUEUES)
        errors: list[str] = []
        for i in range(len(QUEUES)):
            queue = QUEUES[(start + i) % len(QUEUES)]
            if queue in used:
                continue
            pid, error = self._spawn(queue, seed)
            if pid is not None:
                for rule in _rules_for(bridge, subnet, queue, self.tag):
                    iptables.run(rule.table, "-I" if rule.table == "raw" else "-A", rule.spec)
                self._found = Running(pid, queue, self.table.resolve())
                return self._found
            errors.append(f"queue {queue}: {error}")
            if len(errors) >= 3:
                break
        raise TestbedError(f"{BINARY} could not start: {'; '.join(errors)} (log: {self.directory / 'log'})")

    def _spawn(self, queue: int, seed: int) -> tuple[int | None, str]:
        log = (self.directory / "log").open("ab")
        proc = subprocess.Popen(
            [str(binary_path()), "--queue", str(queue), "--table", str(self.table.resolve()),
             "--stats", str(self.stats_path.resolve()), "--seed", str(seed)],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        log.close()
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        os.set_blocking(proc.stdout.fileno(), False)
        line = b""
        while time.monotonic() < deadline and proc.poll() is None and not line.endswith(b"\n"):
            line += proc.stdout.read() or b""
            time.sleep(0.01)
        proc.stdout.close()
        if line.startswith(b"ready"):
            self._prioritise(proc.pid)
            return proc.pid, ""
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        tail = (self.directory / "log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {proc.returncode}: {tail[0]}"

    def _prioritise(self, pid: int) -> None:
        """Real-time scheduling (SCHED_FIFO), as netem's timers have in the
        kernel: at normal priority the delay line waits for the CPU behind
        the routers it shapes, and every packet is late by that wait (6 ms
        at p99 in the demo, against a few microseconds). What was set, or why
        not, goes into its statistics."""
        try:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
            what = f"SCHED_FIFO {RT_PRIORITY}"
        except OSError as exc:
            what = f"normal (SCHED_FIFO refused: {exc.strerror})"
        write_atomic(self.directory / "scheduling", what + "\n")

    def set_source(self, src: str, per_dest: Mapping[str, LinkShape]) -> None:
        """Replace every rule of frames from `src` (`*` in per_dest: its
        default) and tell the running delay line to read the table again."""
        rules = self._load()
        rules[src] = [Rule(src, dst, shape) for dst, shape in sorted(per_dest.items())
                      if shape.delay_ms or shape.jitter_ms or shape.loss]
        text = "# src dst delay_us jitter_us loss_ppm\n" + "".join(
            rule.line() + "\n" for src_rules in rules.values() for rule in src_rules)
        write_atomic(self.table, text)
        found = self.running()
        if found is None:
            raise TestbedError(f"the delay line of {self.directory} is not running: links cannot be shaped "
                               f"(its log: {self.directory / 'log'})")
        os.kill(found.pid, signal.SIGHUP)

    def _load(self) -> dict[str, list[Rule]]:
        if self._rules is None:
            self._rules = {}
            lines = self.table.read_text().splitlines() if self.table.exists() else []
            for line in lines:
                fields = line.split()
                if len(fields) != 5 or line.startswith("#"):
                    continue
                shape = LinkShape(delay_ms=int(fields[2]) / 1000, jitter_ms=int(fields[3]) / 1000,
                                  loss=int(fields[4]) / 1_000_000)
                self._rules.setdefault(fields[0], []).append(Rule(fields[0], fields[1], shape))
        return self._rules

    def end(self, keep_log: Path) -> tuple[dict[str, Any] | None, bool]:
        """Remove the rules, end the delay line, keep its log at `keep_log`
        and remove its directory: (its final statistics, whether it was
        still running)."""
        found = self.running()
        for rule in iptables.our_rules():
            if rule.owner == iptables.DELAY_LINE and rule.tag == self.tag:
                iptables.remove(rule)  # what is left, `teardown` finds and reports
        if found is not None:
            end_process(found.pid)
        stats = self.stats()
        if (self.directory / "log").exists():
            shutil.copyfile(self.directory / "log", keep_log)
        forget(self.directory)
        return stats, found is not None

    def stats(self) -> dict[str, Any] | None:
        """What the delay line last wrote about itself and how it was
        scheduled (None: nothing yet)."""
        try:
            stats = json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return None
        scheduling = self.directory / "scheduling"
        return {**stats, "scheduling": scheduling.read_text().strip()} if scheduling.exists() else stats


def warning(stats: Mapping[str, Any] | None, alive_at_end: bool) -> str | None:
    """A fidelity warning for the manifest when the delay line did not do
    what was asked: it was gone before the testbed ended it, it released
    packets late, or the kernel could not queue packets to it."""
    if stats is None:
        return "the delay line wrote no statistics: link delays, jitter and loss are unverified"
    problems = []
    if not alive_at_end:
        problems.append("it had exited before the end of the run (nothing crossed the bridge after that)")
    late = (stats.get("late_us") or {}).get("p99", 0)
    if late > LATE_WARN_US:
        problems.append(f"it released packets {late / 1000:.1f} ms late at p99 (host overloaded?)")
    if stats.get("enobufs"):
        problems.append(f"the kernel could not queue packets to it {stats['enobufs']} time(s) (packets lost)")
    if not problems:
        return None
    return "delay line: " + "; ".join(problems) + ": link latencies are not as configured"


# ------------------------------------------------------------ host-wide view


def bound_queues() -> set[int]:
    """NFQUEUE numbers some process has bound on this host."""
    try:
        lines = QUEUE_LIST.read_text().splitlines()
    except OSError:
        return set()
    return {int(line.split()[0]) for line in lines if line.split()}


def _rules_for(bridge: str, subnet: str, queue: int, tag: str) -> list[iptables.IptablesRule]:
    """Frames between two containers untracked (connection tracking drops
    every held packet of a new flow but the first: the flow's entry is only
    made at the first verdict), then queued to the delay line."""
    comment = iptables.comment(iptables.DELAY_LINE, tag)
    return [
        iptables.IptablesRule("raw", ("PREROUTING", "-i", bridge, "-d", subnet, "-m", "addrtype", "!", "--dst-type",
                                      "LOCAL", *comment, "-j", "CT", "--notrack"), iptables.DELAY_LINE, tag),
        iptables.IptablesRule("mangle", ("FORWARD", "-i", bridge, "-o", bridge, *comment,
                                         "-j", "NFQUEUE", "--queue-num", str(queue)), iptables.DELAY_LINE, tag),
    ]


def find_running() -> list[Running]:
    """Every delay line process on this host."""
    found = (_running_at(int(entry.name)) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [r for r in found if r is not None]


def _running_at(pid: int) -> Running | None:
    """The delay line with this pid, from its command line (None: not one)."""
    argv = proc_cmdline(pid)
    if not argv or not argv[0].endswith(BINARY) or not proc_alive(pid):
        return None
    args = dict(zip(argv[1::2], argv[2::2], strict=False))
    try:
        return Running(pid, int(args["--queue"]), Path(args["--table"]))
    except (KeyError, ValueError):
        return None


def admitted(testbed: str | None, state: str | None) -> list[Running]:
    """The processes of `testbed` (None: every testbed) made under the state
    directory `state` (None: any), as a teardown Scope says (their rules:
    iptables.admitted)."""
    return [r for r in find_running()
            if (testbed is None or r.testbed == testbed) and (state is None or r.state == state)]


def forget(directory: Path) -> None:
    """Remove a delay line's directory, and its testbed's directory when
    nothing else is in it (a backend used without a testbed record)."""
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        directory.parent.rmdir()


def end_process(pid: int) -> bool:
    """SIGTERM (the delay line releases what it holds and writes its final
    statistics), SIGKILL after STOP_TIMEOUT_S; whether it is gone."""
    terminate([(pid, None)], STOP_TIMEOUT_S)
    return not proc_alive(pid)
