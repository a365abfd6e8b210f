"""netem and htb under a real kernel: the commands orchestrator/shaping/tc.py generates
for one node, applied inside a qemu guest running Debian's stock kernel
(which has sch_netem, unlike this host's), measured inside the guest.

Needs qemu-system-x86 and Debian's linux-image-amd64, busybox-static,
iproute2, iputils-ping and iperf3 (bootstrap.sh installs them); skipped with
the reason elsewhere. The guest runs under KVM where /dev/kvm is hardware
virtualisation, else under qemu's TCG with an instruction-counting clock
(see tests/kvm/guest.py and docs/kernel-shaping.md).
"""

from __future__ import annotations

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
          f"{result.boot_to_poweroff_s:.1f} s boot to power-off"
          + "".join(f"; {name} run again" for name in result.retries))
    return result


@in_guest
def test_the_kernel_accepts_every_generated_command(measured):
    assert all(measured.programs.values()), "a sender got no tc program"
    assert measured.tc_failures == ()
    # The trees are what tc.py's docstring promises.
    assert "qdisc htb 1: root" in measured.stats["a"]
    assert measured.stats["a"].count("qdisc netem") == len(netem.PER_DEST) + 1  # + the default
    assert "qdisc htb 1: root" in measured.stats["r"] and "netem" not in measured.stats["r"]
    assert "qdisc tbf 1: root" in measured.stats["t"]


@in_guest
@pytest.mark.parametrize("name", [link.name for link in netem.links()])
def test_each_link_gets_its_own_shape(measured, name):
    row = next(r for r in measured.rows if r.link.name == name)
    shape = row.link.expect
    assert row.sent == netem.PROBES
    assert abs(row.rtt_median_ms - shape.delay_ms) <= RTT_TOLERANCE_MS, row
    # netem's jitter without a distribution is uniform in +-jitter: its
    # quartiles are -j/2 and +j/2, so the interquartile range is j.
    assert abs(row.rtt_iqr_ms - shape.jitter_ms) <= JITTER_TOLERANCE_MS, row
    assert abs(row.loss - shape.loss) <= LOSS_TOLERANCE, row
    if row.link.rate_bps is not None:
        assert row.rate_bps is not None
        assert abs(row.rate_bps / row.link.rate_bps - 1) <= RATE_TOLERANCE, row


@in_guest
def test_the_uplink_caps_every_class_together(measured):
    assert abs(measured.uplink_bps / netem.UPLINK_BPS - 1) <= RATE_TOLERANCE, (
        f"{measured.uplink_bps:.0f} bit/s\n{measured.uplink_evidence()}")


def _a_whole_report() -> list[str]:
    """A hand-written guest console with every section, every figure in it known."""
    return (
        [f"@@rc tc {sender}-{i} 0" for sender, program in netem.tc_programs().items() for i in range(len(program))]
        + ["kernel noise", "@@begin stats a", "qdisc htb 1: root", "@@end"]
        + [line for link in netem.links() for line in (
            f"@@begin ping {link.name}", "median 10.5 9.9 11.3",
            "1000 packets transmitted, 970 received, 3% packet loss, time 10010ms",
            "rtt min/avg/max/mdev = 9.1/10.6/12.0/0.8 ms", "@@end")]
        + [line for link in netem.links() if link.rate_bps for line in (
            f"@@begin rate {link.name}", "1000 2.00 251000 3.00", "@@end")]
        + ["@@begin rate uplink", "0 1.00 1500000 2.00", "@@end"]
        + ["@@done"]
    )


def test_parsing_a_report_reads_every_figure():
    """The console parser on a hand-written report (runs everywhere)."""
    result = netem.parse("\n".join(_a_whole_report()), 1.0)
    assert result.tc_failures == ()
    assert result.stats == {"a": "qdisc htb 1: root", "r": "", "t": ""}
    assert set(result.programs) == {"a", "r", "t"}
    assert result.uplink_bps == 12_000_000.0
    for row in result.rows:
        assert (row.sent, row.received) == (1000, 970)
        assert (row.rtt_median_ms, row.rtt_avg_ms) == (10.5, 10.6)
        assert row.rtt_iqr_ms == pytest.approx(1.4)
        assert row.rate_bps == (2_000_000.0 if row.link.rate_bps else None)


def test_a_rate_measurement_run_again_is_reported():
    """The guest runs a rate measurement again when a stream did not start
    (its setup datagram lost); the report names each retry (runs everywhere)."""
    script = netem.guest_script(())
    assert script.count("while :; do") == len({link.phase for link in netem.links() if link.rate_bps}) + 1
    assert script.count("grep -q 'iperf Done'") == script.count("while :; do")
    console = "\n".join(["@@retry uplink", "@@retry phase-1", "@@retry uplink"] + _a_whole_report())
    assert netem.parse(console, 1.0).retries == ("uplink", "phase-1", "uplink")
    assert netem.parse("\n".join(_a_whole_report()), 1.0).retries == ()


def test_a_refused_or_unreported_command_is_a_failure():
    programs = netem.tc_programs()
    console = "\n".join(
        ["@@rc tc a-0 2", "@@begin tc a-0", "Error: Specified qdisc kind is unknown.", "@@end"]
        + [f"@@rc tc {sender}-{i} 0" for sender, program in programs.items() for i in range(len(program))
           if (sender, i) not in {("a", 0), ("t", len(programs["t"]) - 1)}]
    )
    assert netem.refused(console) == (
        f"[a] {shlex.join(programs['a'][0])}: Error: Specified qdisc kind is unknown.",
        f"[t] {shlex.join(programs['t'][-1])}: ",
    )


def test_a_missing_qemu_is_the_skip_reason(monkeypatch):
    real_which = kvm_guest.shutil.which
    monkeypatch.setattr(kvm_guest.shutil, "which", lambda name: None if name == kvm_guest.QEMU else real_which(name))
    reason = kvm_guest.missing()
    assert reason is not None and "qemu-system-x86" in reason


def test_modules_load_after_what_they_need(tmp_path):
    (tmp_path / "modules.dep").write_text(
        "kernel/net/bridge/bridge.ko: kernel/net/802/stp.ko kernel/net/llc/llc.ko\n"
        "kernel/net/802/stp.ko: kernel/net/llc/llc.ko\n"
        "kernel/net/llc/llc.ko:\n"
        "kernel/drivers/net/veth.ko:\n"
    )
    order = kvm_guest._module_order(tmp_path, ("veth", "bridge"))
    assert order == ["kernel/drivers/net/veth.ko", "kernel/net/llc/llc.ko", "kernel/net/802/stp.ko",
                     "kernel/net/bridge/bridge.ko"]
