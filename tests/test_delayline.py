"""The delay line (orchestrator/shaping/delayline.py and its native process,
orchestrator/shaping/native/delayline): the table it is given, how teardown finds
it, and, where this host can run it (root, NFQUEUE, the built binary), what
it does to real packets between two network namespaces on a bridge: ping's
round trip is the delay asked for one direction, a reload changes it in
place, loss drops the share asked, and ending it removes its rule and its
process."""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import uuid
from pathlib import Path

import pytest

from node.config import LinkShape
from orchestrator.shaping import delayline
from orchestrator.host import iptables


def test_a_rule_is_one_table_line_in_microseconds_and_ppm():
    rule = delayline.Rule("10.0.0.1", "*", LinkShape(delay_ms=12.5, jitter_ms=1, loss=0.03))
    assert rule.line() == "10.0.0.1 * 12500 1000 30000"


def _line(tmp_path: Path, monkeypatch, running: bool = True) -> tuple[delayline.DelayLine, list[int]]:
    line = delayline.DelayLine(tmp_path / "testbeds" / "tb" / "delay-line", "tb:0")
    line.directory.mkdir(parents=True)
    hups: list[int] = []
    fake = delayline.Running(4242, 31000, line.table.resolve())
    monkeypatch.setattr(delayline.DelayLine, "running", lambda self: fake if running else None)
    monkeypatch.setattr(delayline.os, "kill", lambda pid, sig: hups.append(pid) if sig == signal.SIGHUP else None)
    return line, hups


def test_setting_a_source_replaces_its_rules_only_and_signals_the_process(tmp_path, monkeypatch):
    line, hups = _line(tmp_path, monkeypatch)
    line.set_source("10.0.0.1", {"10.0.0.2": LinkShape(delay_ms=10), "*": LinkShape(delay_ms=5, loss=0.5)})
    line.set_source("10.0.0.3", {"10.0.0.1": LinkShape(delay_ms=1, jitter_ms=0.5)})
    line.set_source("10.0.0.1", {"10.0.0.2": LinkShape(delay_ms=20), "10.0.0.3": LinkShape(rate_bps=1000)})
    rules = [row for row in line.table.read_text().splitlines() if not row.startswith("#")]
    # 10.0.0.1's old rules are gone; a rate-only shape is not the delay line's
    assert sorted(rules) == ["10.0.0.1 10.0.0.2 20000 0 0", "10.0.0.3 10.0.0.1 1000 500 0"]
    assert hups == [4242, 4242, 4242]
    # another process (a later CLI) reads the table back before changing it
    again = delayline.DelayLine(line.directory, "tb:0")
    again.set_source("10.0.0.3", {})
    assert [row for row in line.table.read_text().splitlines() if not row.startswith("#")] == [
        "10.0.0.1 10.0.0.2 20000 0 0"]


def test_shaping_without_a_running_delay_line_is_an_error_naming_its_log(tmp_path, monkeypatch):
    line, _ = _line(tmp_path, monkeypatch, running=False)
    with pytest.raises(delayline.TestbedError, match=r"not running.*delay-line/log"):
        line.set_source("10.0.0.1", {"*": LinkShape(delay_ms=1)})


def test_a_running_delay_line_names_its_testbed_and_state_directory_by_its_table():
    found = delayline.Running(7, 31001, Path("/state/dir/testbeds/bed-1/delay-line/table"))
    assert (found.testbed, found.state) == ("bed-1", "/state/dir")


LISTINGS = {
    "raw": """\
-P PREROUTING ACCEPT
-A PREROUTING -d 10.200.0.0/24 -i br-1 -m addrtype ! --dst-type LOCAL -m comment --comment "gossip-testbed a:{a}" -j CT --notrack
""",
    "mangle": """\
-P FORWARD ACCEPT
-A FORWARD -i br-1 -o br-1 -m comment --comment "gossip-testbed a:{a}" -j NFQUEUE --queue-num 31005
-A FORWARD -i br-2 -o br-2 -m comment --comment "gossip-testbed b:{b}" -j NFQUEUE --queue-num 31006
-A FORWARD -i br-3 -o br-3 -m comment --comment "someone else's" -j NFQUEUE --queue-num 31007
""",
    "filter": """\
-P FORWARD DROP
-A FORWARD -i gtb1 -o gtb1 -m comment --comment "gossip-testbed-bridge a:{a}" -j ACCEPT
-A FORWARD -j DOCKER-USER
""",
}


def test_teardown_admits_rules_and_processes_by_testbed_and_state(monkeypatch):
    a, b = iptables.tag_of("a", "/s1").split(":")[1], iptables.tag_of("b", "/s2").split(":")[1]
    monkeypatch.setattr(iptables.os, "geteuid", lambda: 0)
    monkeypatch.setattr(iptables.shutil, "which", lambda name: "/usr/sbin/" + name)
    monkeypatch.setattr(iptables, "run", lambda table, action, spec, check=True: subprocess.CompletedProcess(
        [], 0, LISTINGS.get(table, "").format(a=a, b=b), ""))
    processes = [delayline.Running(11, 31005, Path("/s1/testbeds/a/delay-line/table")),
                 delayline.Running(12, 31006, Path("/s2/testbeds/b/delay-line/table"))]
    monkeypatch.setattr(delayline, "find_running", lambda: processes)
    rules, lines = iptables.admitted(None, "a", "/s1"), delayline.admitted("a", "/s1")
    assert [(r.table, r.spec[0], r.owner, r.tag) for r in rules] == [
        ("raw", "PREROUTING", iptables.DELAY_LINE, f"a:{a}"), ("mangle", "FORWARD", iptables.DELAY_LINE, f"a:{a}"),
        ("filter", "FORWARD", iptables.BRIDGE, f"a:{a}")]
    # what deletes a rule is what `iptables -S` listed, comment and all
    assert rules[1].command() == (f"iptables -t mangle -D FORWARD -i br-1 -o br-1 -m comment --comment "
                                  f"'gossip-testbed a:{a}' -j NFQUEUE --queue-num 31005")
    assert [r.tag for r in iptables.admitted(iptables.BRIDGE, None, None)] == [f"a:{a}"]
    assert [r.pid for r in lines] == [11]
    assert [r.spec[-1] for r in iptables.admitted(iptables.DELAY_LINE, None, "/s2")] == ["31006"]
    assert [r.pid for r in delayline.admitted(None, None)] == [11, 12]  # `testbed gc`: any state directory
    assert iptables.admitted(None, "a", "/s2") == [] and delayline.admitted("a", "/s2") == []


def test_the_manifest_warns_when_the_delay_line_did_not_shape_as_asked():
    good = {"late_us": {"p50": 40, "p99": 300, "max": 2000}, "enobufs": 0}
    assert delayline.warning(good, alive_at_end=True) is None
    assert "exited before the end" in delayline.warning(good, alive_at_end=False)
    assert "2.5 ms late" in delayline.warning({**good, "late_us": {"p99": 2500}}, alive_at_end=True)
    assert "could not queue packets to it 3 time(s)" in delayline.warning({**good, "enobufs": 3}, True)
    assert "unverified" in delayline.warning(None, alive_at_end=True)


# ------------------------------------------------------------ on real packets

def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a bridge, network namespaces, iptables)"
    if shutil.which("ip") is None or shutil.which("ping") is None:
        return "needs ip (iproute2) and ping"
    if not delayline.QUEUE_LIST.exists():
        return "the kernel has no NFQUEUE"
    if not delayline.binary_path().is_file():
        if shutil.which("cargo") is None:
            return "gtb-delayline is not built and cargo is missing"
        delayline.build()
    return None


@pytest.fixture
def bridge(tmp_path):
    """Two namespaces, a (10.93.x.1) and b (10.93.x.2), on a bridge of their own."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    br, subnet = f"gtbq{tag}", f"10.93.{int(tag[:2], 16)}"
    names = {"a": f"gtbqa{tag}", "b": f"gtbqb{tag}"}
    script = [f"link add {br} type bridge", f"link set {br} up"]
    for i, (who, ns) in enumerate(names.items(), start=1):
        subprocess.run(["ip", "netns", "add", ns], check=True)
        script += [f"link add v{who}{tag} type veth peer name eth0 netns {ns}", f"link set v{who}{tag} master {br} up",
                   f"-n {ns} addr add {subnet}.{i}/24 dev eth0", f"-n {ns} link set eth0 up"]
    try:
        for command in script:
            subprocess.run(["ip", *command.split()], check=True)
        subprocess.run(["iptables", "-w", "-I", "FORWARD", "-i", br, "-o", br, "-j", "ACCEPT"], check=True)
        yield br, names, {"a": f"{subnet}.1", "b": f"{subnet}.2"}, tmp_path
    finally:
        subprocess.run(["iptables", "-w", "-D", "FORWARD", "-i", br, "-o", br, "-j", "ACCEPT"], capture_output=True)
        subprocess.run(["ip", "link", "del", br], capture_output=True)
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _ping(ns: str, ip: str, count: int, interval: float = 0.02) -> tuple[list[float], int]:
    argv = ["ip", "netns", "exec", ns, "ping", "-n", "-c", str(count), "-i", str(interval), "-W", "1", ip]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    rtts = [float(m) for m in re.findall(r"time=([0-9.]+)", out)]
    return rtts, count - len(rtts)


def test_real_packets_get_the_delay_and_loss_asked_and_ending_leaves_nothing(bridge):
    br, ns, ip, tmp = bridge
    line = delayline.DelayLine(tmp / "testbeds" / "tb" / "delay-line", iptables.tag_of("tb", str(tmp)))
    running = line.ensure(br, ip["a"].rsplit(".", 1)[0] + ".0/24", seed=7)
    try:
        assert sorted(r.table for r in iptables.our_rules() if r.tag == line.tag) == ["mangle", "raw"]
        line.set_source(ip["a"], {ip["b"]: LinkShape(delay_ms=20)})
        rtts, lost = _ping(ns["a"], ip["b"], 20)
        assert lost == 0 and 20 <= statistics.median(rtts) <= 24, rtts  # b -> a has no rule: unshaped
        line.set_source(ip["a"], {"*": LinkShape(delay_ms=5)})  # a reload, the process unchanged
        rtts, lost = _ping(ns["a"], ip["b"], 20)
        assert lost == 0 and 5 <= statistics.median(rtts) <= 9, rtts
        assert line.running() == running
        line.set_source(ip["b"], {ip["a"]: LinkShape(loss=0.3)})  # replies lost: the ping is lost
        _, lost = _ping(ns["a"], ip["b"], 300, interval=0.005)
        assert 45 <= lost <= 135, lost
    finally:
        stats, alive = line.end(keep_log=tmp / "kept.log")
    assert alive and stats is not None and not stats["running"]
    assert "bound" in (tmp / "kept.log").read_text() and not line.directory.parent.exists()
    assert stats["dropped_loss"] == lost and stats["seed"] == 7 and stats["packets"] >= 680
    assert line.running() is None
    assert not any(r.tag == line.tag for r in iptables.our_rules())
    _, lost = _ping(ns["a"], ip["b"], 3)
    assert lost == 0  # with the rule gone, frames cross unqueued again
