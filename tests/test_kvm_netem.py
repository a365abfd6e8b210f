"""netem and htb under a real kernel: the commands orchestrator/tc.py generates
for one node, applied inside a qemu guest running Debian's stock kernel
(which has sch_netem, unlike this host's), measured inside the guest.

Needs qemu-system-x86 and Debian's linux-image-amd64, busybox-static,
iproute2, iputils-ping and iperf3 (bootstrap.sh installs them); skipped with
the reason elsewhere. The guest runs under KVM where /dev/kvm is hardware
virtualisation, else under qemu's TCG with an instruction-counting clock
(see tests/kvm/guest.py and docs/kernel-shaping.md).
"""

from __future__ import annotations

import math
import shlex

import pytest

from tests.kvm import guest as kvm_guest
from tests.kvm import netem



def in_guest(test):
    """Marks a test that boots the guest (one boot per module, shared)."""
    return pytest.mark.kvm(pytest.mark.slow(pytest.mark.timeout(900)(test)))

RTT_TOLERANCE_MS = 1.0
JITTER_TOLERANCE_MS = 0.5
LOSS_TOLERANCE = 0.02
RATE_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def measured() -> netem.Result:
    reason = kvm_guest.missing()
    if reason:
        pytest.skip(reason)
    guest = kvm_guest.prepare()
    result = netem.run(guest)
    print(f"\nkvm-netem: {guest.accelerator} ({guest.accelerator_reason}), "
          f"{result.boot_to_poweroff_s:.1f} s boot to power-off")
    return result


@in_guest
def test_the_kernel_accepts_every_generated_command(measured):
    assert measured.tc_program, "the scenario produced no tc program"
    assert measured.tc_failures == ()
    # The tree is what tc.py's docstring promises: netem leaves under htb.
    assert "qdisc htb 1: root" in measured.stats
    assert measured.stats.count("qdisc netem") == len(netem.PER_DEST) + 1


@in_guest
@pytest.mark.parametrize("name", [d.name for d in netem.destinations()])
def test_destination_gets_its_own_shape(measured, name):
    row = next(r for r in measured.rows if r.destination.name == name)
    shape = row.destination.shape
    assert row.sent == netem.PROBES
    assert abs(row.rtt_median_ms - shape.delay_ms) <= RTT_TOLERANCE_MS, row
    # netem's jitter without a distribution is uniform in +-jitter: sd = j/sqrt(3).
    assert abs(row.rtt_mdev_ms - shape.jitter_ms / math.sqrt(3)) <= JITTER_TOLERANCE_MS, row
    assert abs(row.loss - shape.loss) <= LOSS_TOLERANCE, row
    if row.destination.rate_bps is not None:
        assert row.rate_bps is not None
        assert abs(row.rate_bps / row.destination.rate_bps - 1) <= RATE_TOLERANCE, row


def test_parsing_a_report_reads_every_figure():
    """The console parser on a hand-written report (runs everywhere)."""
    console = "\n".join(
        [f"@@rc tc {i} 0" for i in range(len(netem.tc_program()))]
        + ["kernel noise", "@@begin stats a", "qdisc htb 1: root", "@@end"]
        + [line for d in netem.destinations() for line in (
            f"@@begin ping {d.name}", "median 10.5",
            "1000 packets transmitted, 970 received, 3% packet loss, time 10010ms",
            "rtt min/avg/max/mdev = 9.1/10.6/12.0/0.8 ms", "@@end")]
        + [line for d in netem.destinations() if d.rate_bps for line in (
            f"@@begin rate {d.name}", "1000 2.00 251000 3.00", "@@end")]
        + ["@@done"]
    )
    result = netem.parse(console, 1.0)
    assert result.tc_failures == ()
    assert result.stats == "qdisc htb 1: root"
    for row in result.rows:
        assert (row.sent, row.received) == (1000, 970)
        assert (row.rtt_median_ms, row.rtt_avg_ms, row.rtt_mdev_ms) == (10.5, 10.6, 0.8)
        assert row.rate_bps == (2_000_000.0 if row.destination.rate_bps else None)


def test_a_refused_or_unreported_command_is_a_failure():
    program = netem.tc_program()
    console = "\n".join(
        ["@@rc tc 0 2", "@@begin tc 0", "Error: Specified qdisc kind is unknown.", "@@end"]
        + [f"@@rc tc {i} 0" for i in range(1, len(program) - 1)]
    )
    assert netem.refused(console) == (
        f"{shlex.join(program[0])}: Error: Specified qdisc kind is unknown.",
        f"{shlex.join(program[-1])}: ",
    )
