"""Runs orchestrator/tc.py's egress program under Debian's stock kernel in a
KVM guest and measures what the kernel really does with it.

Inside the guest, network namespaces hang off one bridge: node `a`, four
destinations and the bridge's own address as the exempt gateway (as docker's
gateway is). Node `a`'s eth0 gets exactly the commands `tc.egress_commands`
returns for per-destination shapes, a default shape and an uplink; the
destinations answer unshaped, so a ping's RTT is the configured one-way delay
and a ping's loss is the configured loss. Then, per destination:

- RTT and loss: 1,000 pings, 10 ms apart (iputils);
- rate: iperf3 offers UDP at 1.2x the configured rate; the destination's
  eth0 rx_bytes over a 3 s window in the middle of the stream is the rate,
  counted in the bytes htb counts (Ethernet frames).

The guest reports on its serial console between `@@begin KIND NAME` and
`@@end` lines; `run()` parses them into `Measured` rows.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from node.config import LinkShape
from orchestrator import tc
from tests.kvm.cpio import CpioWriter
from tests.kvm.guest import QEMU, Guest

SUBNET = "10.0.0.0/24"
NODE = ("a", "10.0.0.1")
GATEWAY = "10.0.0.254"
PER_DEST = {
    "b": ("10.0.0.2", LinkShape(delay_ms=10, rate_bps=2_000_000)),
    "c": ("10.0.0.3", LinkShape(delay_ms=25, jitter_ms=5, loss=0.03, rate_bps=1_000_000)),
    "d": ("10.0.0.4", LinkShape(delay_ms=40, jitter_ms=2, loss=0.01, rate_bps=3_000_000)),
}
DEFAULT = ("e", "10.0.0.5", LinkShape(delay_ms=5, jitter_ms=1, loss=0.02))
UPLINK_BPS = 5_000_000
PROBES = 1000
PROBE_INTERVAL_S = 0.01
OFFERED = 1.2  # offered load / configured rate
STREAM_S = 4
WINDOW = (1.0, 2.5)  # rx_bytes window inside the stream: start, length (s)
UDP_PAYLOAD = 1400  # below the MTU: one frame per datagram
BOOT_TIMEOUT_S = 600


@dataclass(frozen=True)
class Destination:
    name: str
    ip: str
    shape: LinkShape  # what a's egress towards it is configured with
    rate_bps: int | None  # the rate its htb class allows (None: unlimited)


@dataclass(frozen=True)
class Measured:
    destination: Destination
    sent: int
    received: int
    rtt_median_ms: float
    rtt_avg_ms: float
    rtt_mdev_ms: float
    rate_bps: float | None

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent


@dataclass(frozen=True)
class Result:
    rows: tuple[Measured, ...]
    tc_program: tuple[str, ...]
    tc_failures: tuple[str, ...]  # "command: error" for each command the kernel refused
    stats: str  # `tc -s qdisc/class show` after the measurements
    boot_to_poweroff_s: float
    console: str


def destinations() -> tuple[Destination, ...]:
    rows = [Destination(name, ip, shape, shape.rate_bps) for name, (ip, shape) in PER_DEST.items()]
    rows.append(Destination(DEFAULT[0], DEFAULT[1], DEFAULT[2], UPLINK_BPS))
    rows.append(Destination("gateway", GATEWAY, LinkShape(), None))
    return tuple(rows)


def tc_program() -> list[list[str]]:
    """The commands under test, straight from the generator."""
    return tc.egress_commands(
        {ip: shape for ip, shape in PER_DEST.values()},
        UPLINK_BPS,
        default=DEFAULT[2],
        exempt=[GATEWAY],
        netem=True,
        dev="eth0",
    )


def guest_script(modules: tuple[str, ...]) -> str:
    """/init for the guest: set up, shape, measure, report, power off."""
    node, node_ip = NODE
    prefix = SUBNET.split("/")[1]
    peers = [(d.name, d.ip) for d in destinations() if d.name != "gateway"]
    lines = [
        "#!/bin/busybox sh",
        "/bin/busybox --install -s /bin",
        # busybox's shell runs its own applets (it has ip, tc and ping) before
        # PATH, so the real tools are named by path; what they exec finds them first.
        "export PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev",
        "mount -t tmpfs run /run; mount -t tmpfs tmp /tmp",
        "section() { echo \"@@begin $1 $2\"; cat \"$3\"; echo '@@end'; }",
        # The median of ping's per-reply times (an emulated CPU's stalls are
        # outliers that move the mean, not the median).
        "median() { grep -o 'time=[0-9.]*' \"$1\" | cut -d= -f2 | sort -n"
        " | awk '{v[NR]=$1} END {if (NR) print \"median\", v[int((NR+1)/2)]}'; }",
    ]
    lines += [f"insmod /modules/{module}.ko || echo '@@error insmod {module}'" for module in modules]
    lines += [
        "/usr/sbin/ip link set lo up",
        "/usr/sbin/ip link add br0 type bridge && /usr/sbin/ip link set br0 up",
        f"/usr/sbin/ip addr add {GATEWAY}/{prefix} dev br0",
    ]
    for name, ip in [(node, node_ip), *peers]:
        lines += [
            f"/usr/sbin/ip netns add {name}",
            f"/usr/sbin/ip link add v-{name} type veth peer name eth0 netns {name}",
            f"/usr/sbin/ip link set v-{name} master br0 up",
            f"/usr/sbin/ip -n {name} link set lo up",
            f"/usr/sbin/ip -n {name} addr add {ip}/{prefix} dev eth0",
            f"/usr/sbin/ip -n {name} link set eth0 up",
        ]
    lines.append("echo '@@phase shape'")
    for index, argv in enumerate(tc_program()):
        lines += [
            f"/usr/sbin/ip netns exec {node} {shlex.join(argv)} > /tmp/tc-{index} 2>&1",
            f"echo \"@@rc tc {index} $?\"; section tc {index} /tmp/tc-{index}",
        ]
    # RTT and loss, every destination at once.
    for d in destinations():
        lines.append(
            f"/usr/sbin/ip netns exec {node} ping -n -c {PROBES} -i {PROBE_INTERVAL_S} -W 1 {d.ip}"
            f" > /tmp/ping-{d.name} 2>&1 &"
        )
    lines.append("wait")
    lines.append("echo '@@phase rates'")
    # Rates: the per-destination classes together (they sum below the
    # uplink), then the default class alone (it may take the whole uplink).
    rated = [d for d in destinations() if d.rate_bps is not None]
    phases = [[d for d in rated if d.name in PER_DEST], [d for d in rated if d.name not in PER_DEST]]
    start, length = WINDOW
    for phase in phases:
        for d in phase:
            lines.append(f"/usr/sbin/ip netns exec {d.name} iperf3 -s -1 -D")
        lines.append("sleep 0.5")
        for d in phase:
            lines += [
                f"/usr/sbin/ip netns exec {d.name} sh /meter.sh {start} {length} > /tmp/rate-{d.name} &",
                f"/usr/sbin/ip netns exec {node} iperf3 -u -c {d.ip} -b {int(d.rate_bps * OFFERED)} -l {UDP_PAYLOAD}"
                f" -t {STREAM_S} > /tmp/iperf-{d.name} 2>&1 &",
            ]
        lines.append("wait")
    for d in destinations():
        lines += [f"median /tmp/ping-{d.name} > /tmp/median-{d.name}",
                  f"grep -v 'time=' /tmp/ping-{d.name} >> /tmp/median-{d.name}",
                  f"section ping {d.name} /tmp/median-{d.name}"]
    for d in rated:
        lines.append(f"section rate {d.name} /tmp/rate-{d.name}")
        lines.append(f"section iperf {d.name} /tmp/iperf-{d.name}")
    lines += [
        f"/usr/sbin/ip netns exec {node} tc -s qdisc show dev eth0 > /tmp/stats",
        f"/usr/sbin/ip netns exec {node} tc -s class show dev eth0 >> /tmp/stats",
        "section stats a /tmp/stats",
        "echo '@@done'",
        "poweroff -f",
    ]
    return "\n".join(lines) + "\n"


METER = """\
# rx_bytes of this namespace's eth0 over [$1, $1 + $2] seconds from now:
# prints "bytes_before uptime_before bytes_after uptime_after".
sleep "$1"
read b0 < /sys/class/net/eth0/statistics/rx_bytes; read t0 rest < /proc/uptime
sleep "$2"
read b1 < /sys/class/net/eth0/statistics/rx_bytes; read t1 rest < /proc/uptime
echo "$b0 $t0 $b1 $t1"
"""


def _scenario_archive(path: Path, guest: Guest) -> None:
    with path.open("wb") as out:
        archive = CpioWriter(out)
        archive.file("init", guest_script(guest.modules).encode(), 0o755)
        archive.file("meter.sh", METER.encode(), 0o755)
        archive.close()


def qemu_argv(guest: Guest, initrd: Path) -> list[str]:
    if guest.accelerator == "kvm":
        cpu = ["-accel", "kvm", "-cpu", "host", "-smp", "2"]
    else:
        cpu = ["-accel", "tcg", "-cpu", "max", "-smp", "1", "-icount", "shift=2,sleep=off"]
    return [
        QEMU, *cpu, "-m", "512M",
        "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
        "-kernel", str(guest.kernel), "-initrd", str(initrd),
        "-append", "console=ttyS0 quiet panic=-1 rdinit=/init",
    ]


def run(guest: Guest) -> Result:
    """Boot the guest on a fresh scenario, wait for it to power off, parse."""
    with tempfile.TemporaryDirectory(prefix="kvm-netem-") as tmp:
        scenario = Path(tmp) / "scenario.cpio"
        _scenario_archive(scenario, guest)
        initrd = Path(tmp) / "initrd.cpio"
        # Two newc archives back to back; the base one ends 4-byte aligned.
        initrd.write_bytes(guest.base_initramfs.read_bytes() + scenario.read_bytes())
        began = time.monotonic()
        done = subprocess.run(qemu_argv(guest, initrd), capture_output=True, timeout=BOOT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
        elapsed = time.monotonic() - began
    console = done.stdout.decode(errors="replace").replace("\r", "")
    if "@@done" not in console:
        raise GuestError(f"the guest did not finish (qemu exit {done.returncode}):\n{console[-4000:]}"
                         f"\n{done.stderr.decode(errors='replace')[-2000:]}")
    return parse(console, elapsed)


class GuestError(RuntimeError):
    """The guest did not boot, or stopped before reporting."""


def _sections(console: str) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], int]]:
    sections: dict[tuple[str, str], str] = {}
    codes: dict[tuple[str, str], int] = {}
    current: tuple[str, str] | None = None
    body: list[str] = []
    for line in console.splitlines():
        if line.startswith("@@begin "):
            _, kind, name = line.split()
            current, body = (kind, name), []
        elif line == "@@end" and current is not None:
            sections[current] = "\n".join(body)
            current = None
        elif line.startswith("@@rc "):
            _, kind, name, code = line.split()
            codes[(kind, name)] = int(code)
        elif current is not None:
            body.append(line)
    return sections, codes


def _ping(text: str) -> tuple[int, int, float, float, float]:
    """(sent, received, median, avg, mdev ms) from iputils ping's summary and
    the guest's median line."""
    sent = received = 0
    median = avg = mdev = float("nan")
    for line in text.splitlines():
        if line.startswith("median "):
            median = float(line.split()[1])
        elif "packets transmitted" in line:
            parts = line.split(",")
            sent = int(parts[0].split()[0])
            received = int(parts[1].split()[0])
        elif line.startswith("rtt ") or line.startswith("round-trip"):
            values = line.split("=")[1].split()[0].split("/")
            avg, mdev = float(values[1]), float(values[3])
    if not sent:
        raise GuestError(f"no ping summary in:\n{text}")
    return sent, received, median, avg, mdev


def _rate(text: str) -> float:
    b0, t0, b1, t1 = (float(value) for value in text.split())
    return (b1 - b0) * 8 / (t1 - t0)


def refused(console: str) -> tuple[str, ...]:
    """"command: error" for each generated tc command that did not exit 0."""
    sections, codes = _sections(console)
    return tuple(
        f"{shlex.join(argv)}: {sections.get(('tc', str(index)), '').strip()}"
        for index, argv in enumerate(tc_program())
        if codes.get(("tc", str(index))) != 0
    )


def parse(console: str, elapsed: float) -> Result:
    sections, _ = _sections(console)
    rows = []
    for d in destinations():
        sent, received, median, avg, mdev = _ping(sections[("ping", d.name)])
        rate = _rate(sections[("rate", d.name)]) if d.rate_bps is not None else None
        rows.append(Measured(d, sent, received, median, avg, mdev, rate))
    return Result(tuple(rows), tuple(shlex.join(argv) for argv in tc_program()), refused(console),
                  sections.get(("stats", "a"), ""), elapsed, console)


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    from tests.kvm import guest as guest_module

    reason = guest_module.missing()
    if reason:
        print(f"kvm-netem: cannot run: {reason}", file=sys.stderr)
        return 3
    guest = guest_module.prepare()
    result = run(guest)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(result.console)
    table = Table(title=f"netem under Linux {guest.release}, qemu {guest.accelerator} "
                        f"({result.boot_to_poweroff_s:.1f} s boot to power-off)")
    for column in ("dest", "delay/jitter", "RTT median", "avg", "mdev", "loss set", "loss seen", "rate set", "rate seen"):
        table.add_column(column, justify="right")
    for row in result.rows:
        shape = row.destination.shape
        set_rate = row.destination.rate_bps
        table.add_row(
            row.destination.name, f"{shape.delay_ms:g}/{shape.jitter_ms:g} ms",
            f"{row.rtt_median_ms:.3f} ms", f"{row.rtt_avg_ms:.3f} ms", f"{row.rtt_mdev_ms:.3f} ms",
            f"{shape.loss:.1%}", f"{row.loss:.1%} ({row.sent - row.received}/{row.sent})",
            f"{set_rate / 1e6:g} Mbit/s" if set_rate else "-",
            f"{row.rate_bps / 1e6:.3f} Mbit/s" if row.rate_bps is not None else "-",
        )
    console = Console(width=140)
    console.print(f"accelerator: {guest.accelerator_reason}")
    console.print(table)
    for failure in result.tc_failures:
        console.print(f"[red]tc refused[/]: {failure}")
    return 1 if result.tc_failures else 0


if __name__ == "__main__":
    sys.exit(main())
