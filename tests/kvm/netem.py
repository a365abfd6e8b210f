"""Runs orchestrator/shaping/tc.py's egress program under Debian's stock kernel in a
KVM guest and measures what the kernel really does with it.

Inside the guest, network namespaces hang off one bridge, whose own address
is the exempt gateway (as docker's is). Three senders get exactly the
commands `tc.egress_commands` returns for them:

- a, the netem path: per-destination shapes for b, c and d, a default shape
  (for e) and an uplink;
- r, the "userspace+htb" path (netem=False): only b's rate reaches the kernel;
- t, only an uplink: a single tbf.

Destinations answer unshaped, so a ping's RTT is the one-way delay the
kernel applies and a ping's loss is the loss it applies. Per link:

- RTT and loss: 1,000 pings, 10 ms apart (iputils), all links at once;
- rate: iperf3 offers UDP at 1.2x the configured rate; the destination's
  eth0 rx_bytes over a 2.5 s window, from 1 s after the stream arrives, is the rate, counted
  in the bytes htb and tbf count (Ethernet frames);
- a's uplink: a sends to b, c, d and e at once, each at 1.2x its own cap;
  the sum of their rates is what the uplink lets through.

The guest reports on its serial console between `@@begin KIND NAME` and
`@@end` lines; `run()` parses them into `Measured` rows.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from node.config import LinkShape
from orchestrator.shaping import tc
from tests.kvm.cpio import CpioWriter
from tests.kvm import guest as kvm_guest
from tests.kvm.guest import QEMU, Guest

SUBNET = "10.0.0.0/24"
GATEWAY = "10.0.0.254"  # the bridge's own address: exempt, as docker's gateway is
HOSTS = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "d": "10.0.0.4", "e": "10.0.0.5",
         "r": "10.0.0.11", "t": "10.0.0.12"}
# Sender a, the netem path: three destinations with their own shapes, every
# other one (e) with the default shape, all under an uplink.
PER_DEST = {
    "b": LinkShape(delay_ms=10, rate_bps=2_000_000),
    "c": LinkShape(delay_ms=25, jitter_ms=5, loss=0.03, rate_bps=1_000_000),
    "d": LinkShape(delay_ms=40, jitter_ms=2, loss=0.01, rate_bps=3_000_000),
}
DEFAULT = LinkShape(delay_ms=5, jitter_ms=1, loss=0.02)
UPLINK_BPS = 8_000_000  # above b+c+d's rates, below their sum with e's
# Sender r, the "userspace+htb" path: the kernel gets the rate only.
RATE_ONLY = LinkShape(delay_ms=10, loss=0.05, rate_bps=1_500_000)
# Sender t: only an uplink, which tc.py turns into one tbf.
TBF_UPLINK_BPS = 2_500_000
PROBES = 1000
PROBE_INTERVAL_S = 0.01
OFFERED = 1.2  # offered load / configured rate
STREAM_S = 4
WINDOW = (1.0, 2.5)  # rx_bytes window after the stream arrives: start, length (s)
UDP_PAYLOAD = 1400  # below the MTU: one frame per datagram
STREAM_ARRIVED = 8 * UDP_PAYLOAD  # bytes that mean datagrams, not iperf3's control connection
RX_BYTES = "/sys/class/net/eth0/statistics/rx_bytes"  # a namespace's own, under `ip netns exec`
BOOT_TIMEOUT_S = 600
ATTEMPTS = 3  # runs of one rate measurement before its figure stands as measured


@dataclass(frozen=True)
class Link:
    """One sender -> destination pair and what the kernel should do to it."""

    sender: str
    dest: str
    ip: str
    expect: LinkShape  # the delay/jitter/loss the kernel should apply
    rate_bps: int | None  # the rate it should allow (None: not measured)
    phase: int  # rate measurements in the same phase run together

    @property
    def name(self) -> str:
        return f"{self.sender}-{self.dest}"


@dataclass(frozen=True)
class Measured:
    link: Link
    sent: int
    received: int
    rtt_median_ms: float
    rtt_avg_ms: float
    rtt_iqr_ms: float  # interquartile range: jitter +-j (uniform) gives j
    rate_bps: float | None

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent


@dataclass(frozen=True)
class Result:
    rows: tuple[Measured, ...]
    programs: dict[str, tuple[str, ...]]  # sender -> its tc command lines
    tc_failures: tuple[str, ...]  # "command: error" for each command the kernel refused
    stats: dict[str, str]  # sender -> `tc -s qdisc/class show` after the measurements
    uplink_bps: float  # what a sent to b, c, d and e together, each offered more than it may take
    boot_to_poweroff_s: float
    console: str
    uplink_streams: dict[str, str] = field(default_factory=dict)  # dest -> its iperf3 client's output
    retries: tuple[str, ...] = ()  # one entry per rate measurement run again ("phase-1", "uplink")

    def uplink_evidence(self) -> str:
        """What a failed uplink figure is read against: each stream's iperf3
        report and a's qdisc and class counters."""
        streams = "\n".join(f"-- a -> {dest}:\n{text}" for dest, text in sorted(self.uplink_streams.items()))
        return f"{streams}\n-- a's tc -s:\n{self.stats.get('a', '')}"


def links() -> tuple[Link, ...]:
    rows = [Link("a", name, HOSTS[name], shape, shape.rate_bps, 1) for name, shape in PER_DEST.items()]
    rows += [
        Link("a", "e", HOSTS["e"], DEFAULT, UPLINK_BPS, 2),
        Link("a", "gateway", GATEWAY, LinkShape(), None, 0),
        # Receivers b and c are idle in phase 2.
        Link("r", "b", HOSTS["b"], LinkShape(), RATE_ONLY.rate_bps, 2),
        Link("t", "c", HOSTS["c"], LinkShape(), TBF_UPLINK_BPS, 2),
    ]
    return tuple(rows)


def tc_programs() -> dict[str, list[list[str]]]:
    """The commands under test for each sender, straight from the generator."""
    return {
        "a": tc.egress_commands({HOSTS[name]: shape for name, shape in PER_DEST.items()}, UPLINK_BPS,
                                default=DEFAULT, exempt=[GATEWAY], netem=True, dev="eth0"),
        "r": tc.egress_commands({HOSTS["b"]: RATE_ONLY}, None, exempt=[GATEWAY], netem=False, dev="eth0"),
        "t": tc.egress_commands({}, TBF_UPLINK_BPS, exempt=[GATEWAY], netem=True, dev="eth0"),
    }


def guest_script(modules: tuple[str, ...]) -> str:
    """/init for the guest: set up, shape, measure, report, power off."""
    ip = "/usr/sbin/ip"
    prefix = SUBNET.split("/")[1]
    lines = [
        "#!/bin/busybox sh",
        "/bin/busybox --install -s /bin",
        # busybox's shell runs its own applets (it has ip, tc and ping) before
        # PATH, so the real tools are named by path; what they exec finds them first.
        "export PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev",
        "mount -t tmpfs run /run; mount -t tmpfs tmp /tmp",
        "section() { echo \"@@begin $1 $2\"; cat \"$3\"; echo '@@end'; }",
        # The median and quartiles of ping's per-reply times (an emulated CPU's
        # stalls are outliers that move the mean and ping's mdev, not these).
        "median() { grep -o 'time=[0-9.]*' \"$1\" | cut -d= -f2 | sort -n"
        " | awk '{v[NR]=$1} END {if (NR) print \"median\", v[int((NR+1)/2)], v[int((NR+3)/4)], v[int((3*NR+1)/4)]}'; }",
        # Whether iperf3's server (TCP 5201, 0x1451) listens in netns $1, and
        # waits of up to 10 s for it to (not) listen: a fixed pause lost a
        # whole rate phase when the host was loaded and the guest slow.
        f"listening() {{ {ip} netns exec \"$1\" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"
        " | grep -qE ':1451 [0-9A-F]+:0000 0A'; }",
        "await_listening() { i=0; while ! listening \"$1\" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }",
        "await_closed() { i=0; while listening \"$1\" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }",
    ]
    lines += [f"insmod /modules/{module}.ko || echo '@@error insmod {module}'" for module in modules]
    lines += [
        f"{ip} link set lo up",
        f"{ip} link add br0 type bridge && {ip} link set br0 up",
        f"{ip} addr add {GATEWAY}/{prefix} dev br0",
    ]
    for name, address in HOSTS.items():
        lines += [
            f"{ip} netns add {name}",
            f"{ip} link add v-{name} type veth peer name eth0 netns {name}",
            f"{ip} link set v-{name} master br0 up",
            f"{ip} -n {name} link set lo up",
            f"{ip} -n {name} addr add {address}/{prefix} dev eth0",
            f"{ip} -n {name} link set eth0 up",
        ]
    lines.append("echo '@@phase shape'")
    for sender, program in tc_programs().items():
        for index, argv in enumerate(program):
            out = f"/tmp/tc-{sender}-{index}"
            lines += [
                f"{ip} netns exec {sender} {shlex.join(argv)} > {out} 2>&1",
                f"echo \"@@rc tc {sender}-{index} $?\"; section tc {sender}-{index} {out}",
            ]
    lines.append("echo '@@phase pings'")
    for link in links():
        lines.append(f"{ip} netns exec {link.sender} ping -n -c {PROBES} -i {PROBE_INTERVAL_S} -W 1 {link.ip}"
                     f" > /tmp/ping-{link.name} 2>&1 &")
    lines.append("wait")
    lines.append("echo '@@phase rates'")
    rated = [link for link in links() if link.rate_bps is not None]
    meter = f"sh /meter.sh {WINDOW[0]} {WINDOW[1]} {STREAM_ARRIVED}"
    def servers(batch: list[Link]) -> list[str]:
        return ([line for link in batch
                 for line in (f"await_closed {link.dest}", f"{ip} netns exec {link.dest} iperf3 -s -1 -D")]
                + [f"await_listening {link.dest}" for link in batch])

    def client(link: Link, out: str) -> str:
        return (f"{ip} netns exec {link.sender} iperf3 -u -c {link.ip} -b {int(link.rate_bps * OFFERED)}"
                f" -l {UDP_PAYLOAD} -t {STREAM_S} > {out} 2>&1 &")

    for phase in sorted({link.phase for link in rated}):
        batch = [link for link in rated if link.phase == phase]
        attempt = servers(batch)
        for link in batch:
            attempt += [f"{ip} netns exec {link.dest} {meter} {RX_BYTES} > /tmp/rate-{link.name} &",
                        client(link, f"/tmp/iperf-{link.name}")]
        lines += _until_every_stream_ran(f"phase-{phase}", attempt, [f"/tmp/iperf-{link.name}" for link in batch])
    # a's uplink: every class of a at once, each offered 1.2x its own cap.
    uplink = [link for link in rated if link.sender == "a"]
    # One window for the sum, once every stream has arrived: what the bridge
    # sends down each destination's veth is what that destination receives.
    counters = " ".join(f"/sys/class/net/v-{link.dest}/statistics/tx_bytes" for link in uplink)
    attempt = servers(uplink) + [f"{meter} {counters} > /tmp/rate-uplink &"]
    attempt += [client(link, f"/tmp/iperf-uplink-{link.dest}") for link in uplink]
    lines += _until_every_stream_ran("uplink", attempt, [f"/tmp/iperf-uplink-{link.dest}" for link in uplink])
    lines.append("section rate uplink /tmp/rate-uplink")
    lines += [f"section iperf uplink-{link.dest} /tmp/iperf-uplink-{link.dest}" for link in uplink]
    for link in links():
        lines += [f"median /tmp/ping-{link.name} > /tmp/median-{link.name}",
                  f"grep -v 'time=' /tmp/ping-{link.name} >> /tmp/median-{link.name}",
                  f"section ping {link.name} /tmp/median-{link.name}"]
    for link in rated:
        lines.append(f"section rate {link.name} /tmp/rate-{link.name}")
        lines.append(f"section iperf {link.name} /tmp/iperf-{link.name}")
    for sender in tc_programs():
        lines += [
            f"{ip} netns exec {sender} tc -s qdisc show dev eth0 > /tmp/stats-{sender}",
            f"{ip} netns exec {sender} tc -s class show dev eth0 >> /tmp/stats-{sender}",
            f"section stats {sender} /tmp/stats-{sender}",
        ]
    lines += ["echo '@@done'", "poweroff -f"]
    return "\n".join(lines) + "\n"


def _until_every_stream_ran(name: str, attempt: list[str], outputs: list[str]) -> list[str]:
    """Shell lines that run one rate measurement (`attempt`: servers, meters,
    clients in the background) again, up to ATTEMPTS times, until every
    iperf3 client in it reports "iperf Done.".

    A UDP stream starts with one datagram to the server and its answer; where
    the link drops it (c loses 3 %, r's link 5 %; CI lost a -> c's during the
    uplink), the client gives up after 30 s with "unable to read from stream
    socket" and the window meters the other streams alone, or none. Each
    retry is reported (`@@retry NAME`), and Result.retries lists them."""
    return [
        "attempt=0",
        "while :; do",
        "attempt=$((attempt + 1))",
        *attempt,
        "wait",
        f"complete=1; for f in {' '.join(outputs)}; do grep -q 'iperf Done' \"$f\" || complete=0; done",
        f"if [ $complete = 1 ] || [ $attempt -ge {ATTEMPTS} ]; then break; fi",
        f"echo '@@retry {name}'",
        "done",
    ]


METER = """\
# Bytes through the counters named after $3 (rx_bytes or tx_bytes files) over
# [$1, $1 + $2] seconds from the moment every stream has arrived (each counter
# $3 bytes above where it stood when the meter started): prints
# "bytes_before uptime_before bytes_after uptime_after", summed over counters.
# Timed from the streams, not from the meter's start, because iperf3 opens a
# TCP control connection over the shaped link first: a lost SYN puts a stream
# back by 1 s (TCP's first retransmission), which a window fixed from the
# start measured as idle (CI: a-c, 3 % loss, 0.92 of its rate).
settle=$1 length=$2 arrived=$3; shift 3
total() { sum=0; for f in "$@"; do read v < "$f"; sum=$((sum + v)); done; echo $sum; }
n=0; for f in "$@"; do n=$((n + 1)); read v < "$f"; eval "base$n=$v"; done
n=0
for f in "$@"; do
    n=$((n + 1)); eval "base=\\$base$n"; v=$base; i=0
    while [ $((v - base)) -lt "$arrived" ] && [ $i -lt 1000 ]; do sleep 0.01; read v < "$f"; i=$((i + 1)); done
done
sleep "$settle"
b0=$(total "$@"); read t0 rest < /proc/uptime
sleep "$length"
b1=$(total "$@"); read t1 rest < /proc/uptime
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
        try:
            done = subprocess.run(qemu_argv(guest, initrd), capture_output=True, timeout=BOOT_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:  # qemu has been killed
            console = (exc.stdout or b"").decode(errors="replace").replace("\r", "")
            raise GuestError(f"the guest ({guest.accelerator}) did not power off within {BOOT_TIMEOUT_S} s:\n"
                             f"{console[-4000:]}") from None
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
    """(sent, received, median, avg, interquartile range ms) from iputils
    ping's summary and the guest's median line."""
    sent = received = 0
    median = avg = iqr = float("nan")
    for line in text.splitlines():
        if line.startswith("median "):
            _, mid, q1, q3 = line.split()
            median, iqr = float(mid), float(q3) - float(q1)
        elif "packets transmitted" in line:
            parts = line.split(",")
            sent = int(parts[0].split()[0])
            received = int(parts[1].split()[0])
        elif line.startswith("rtt ") or line.startswith("round-trip"):
            values = line.split("=")[1].split()[0].split("/")
            avg = float(values[1])
    if not sent:
        raise GuestError(f"no ping summary in:\n{text}")
    return sent, received, median, avg, iqr


def _rate(text: str) -> float:
    b0, t0, b1, t1 = (float(value) for value in text.split())
    return (b1 - b0) * 8 / (t1 - t0)


def refused(console: str) -> tuple[str, ...]:
    """"command: error" for each generated tc command that did not exit 0."""
    sections, codes = _sections(console)
    return tuple(
        f"[{sender}] {shlex.join(argv)}: {sections.get(('tc', f'{sender}-{index}'), '').strip()}"
        for sender, program in tc_programs().items()
        for index, argv in enumerate(program)
        if codes.get(("tc", f"{sender}-{index}")) != 0
    )


def parse(console: str, elapsed: float) -> Result:
    sections, _ = _sections(console)
    rows = []
    for link in links():
        sent, received, median, avg, iqr = _ping(sections[("ping", link.name)])
        rate = _rate(sections[("rate", link.name)]) if link.rate_bps is not None else None
        rows.append(Measured(link, sent, received, median, avg, iqr, rate))
    programs = {sender: tuple(shlex.join(argv) for argv in program) for sender, program in tc_programs().items()}
    stats = {sender: sections.get(("stats", sender), "") for sender in programs}
    uplink = _rate(sections[("rate", "uplink")])
    streams = {link.dest: sections.get(("iperf", f"uplink-{link.dest}"), "(no output)")
               for link in links() if link.sender == "a" and link.rate_bps is not None}
    retries = tuple(line.split()[1] for line in console.splitlines() if line.startswith("@@retry "))
    return Result(tuple(rows), programs, refused(console), stats, uplink, elapsed, console, streams, retries)


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    reason = kvm_guest.missing()
    if reason:
        print(f"kvm-netem: cannot run: {reason}", file=sys.stderr)
        return 3
    guest = kvm_guest.prepare()
    result = run(guest)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(result.console)
    table = Table(title=f"netem under Linux {guest.release}, qemu {guest.accelerator} "
                        f"({result.boot_to_poweroff_s:.1f} s boot to power-off)")
    for column in ("link", "delay/jitter", "RTT median", "avg", "IQR", "loss set", "loss seen", "rate set", "rate seen"):
        table.add_column(column, justify="right")
    for row in result.rows:
        shape = row.link.expect
        set_rate = row.link.rate_bps
        table.add_row(
            row.link.name, f"{shape.delay_ms:g}/{shape.jitter_ms:g} ms",
            f"{row.rtt_median_ms:.3f} ms", f"{row.rtt_avg_ms:.3f} ms", f"{row.rtt_iqr_ms:.3f} ms",
            f"{shape.loss:.1%}", f"{row.loss:.1%} ({row.sent - row.received}/{row.sent})",
            f"{set_rate / 1e6:g} Mbit/s" if set_rate else "-",
            f"{row.rate_bps / 1e6:.3f} Mbit/s" if row.rate_bps is not None else "-",
        )
    console = Console(width=140)
    console.print(f"accelerator: {guest.accelerator_reason}")
    console.print(table)
    console.print(f"a's uplink: set {UPLINK_BPS / 1e6:g} Mbit/s, seen {result.uplink_bps / 1e6:.3f} Mbit/s "
                  "(b, c, d and e at once)")
    for name in result.retries:
        console.print(f"rate measurement {name} run again: an iperf3 stream did not start")
    for failure in result.tc_failures:
        console.print(f"[red]tc refused[/]: {failure}")
    return 1 if result.tc_failures else 0


if __name__ == "__main__":
    sys.exit(main())
