"""Foreign routers end to end, with the contract stand-in (our router under
the gossipsub-interop contract, tests/contract_standin.py) as the third
implementation: 4 of our routers and 2 stand-ins, 20 ms links, one churn
event; every live subscriber receives every message, checked from the
analysis summary (which reads the converted traces).

- docker: the stand-ins as bare `{image, contract}` containers (script only,
  no control endpoint, their publishes in their scripts), run with the
  installed `testbed` command;
- process: the stand-ins as adapters with our `--config` extensions (control
  endpoint, live publishes), through the controller in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from node.trace.file import read_trace
from node.trace.vocab import TraceType
from orchestrator.experiment.spec import parse_experiment
from orchestrator.backends.process.backend import ProcessBackend
from orchestrator.run.runs import run_experiment
from orchestrator.records.state import StateStore
from tests.contract_standin import STANDIN, build_standin_image, register_standin
from tests.docker_fixtures import *  # noqa: F403
from tests.docker_fixtures import needs_docker

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(ROOT / ".venv" / "bin" / "testbed")

MIXED = """\
name: contract-mixed
seed: 5
groups:
  - {{name: ours, count: 4, router: gossipsub, router_params: {{D: 3, D_low: 2, D_high: 5}}}}
  - {{name: stand, count: 2, router: {router}, router_params: {{D: 3, D_low: 2, D_high: 5}}}}
overlay: {{type: random_regular, degree: 3}}
links: {{latency: 20}}
wire: {{message_id: first-8-bytes}}
workload: {{messages: 6, interval: 1s, start: 0.5s, size: 100, publishers: {{nodes: [ours-0, stand-1]}}}}
churn:
  timeline:
    - {{at: 1.2s, action: kill, select: {{nodes: [stand-0]}}, for: 1.5s}}
linger: 3s
"""


def summary(run_dir: Path) -> dict:
    proc = subprocess.run([TESTBED, "analyze", str(run_dir), "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads((run_dir / "summary.json").read_text())


def check_every_live_subscriber(run_dir: Path) -> None:
    s = summary(run_dir)
    assert s["messages"] == 6 and s["messages_complete"] == 6, s
    assert s["delivery_ratio"] == 1.0 and s["messages_lost"] == 0, s
    topo = json.loads((run_dir / "topology.json").read_text())
    impl = {n["name"]: n["implementation"] for n in topo["nodes"]}
    assert impl["ours-0"] == "gossip-testbed" and impl["stand-0"] != "gossip-testbed"
    for node, publishes in (("stand-0", False), ("stand-1", True)):
        kinds = {TraceType(e.type) for e in read_trace(run_dir / "traces" / f"{node}.pb")}
        assert {TraceType.JOIN, TraceType.DELIVER_MESSAGE} <= kinds
        assert (TraceType.PUBLISH_MESSAGE in kinds) == publishes
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {"node_down", "node_up"} <= {e["kind"] for e in events if e.get("node") == "stand-0"}


@needs_docker
@pytest.mark.docker
@pytest.mark.slow
def test_standin_as_a_bare_image_on_docker(node_image, tmp_path):
    image = build_standin_image(node_image)
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED.format(router=f'{{image: "{image}", contract: gossipsub-interop}}'))
    run_dir = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([TESTBED, "run", str(path), "--backend", "docker", "--out", str(run_dir), "--no-report",
                           "--json"], capture_output=True, text=True, timeout=1500, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_every_live_subscriber(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    facts = manifest["node_facts"]
    assert facts["stand-1"]["implementation"] == f"image:{image}"
    path = manifest["shaping"]["path"]
    if path == "userspace+htb":  # no netem and no delay line: the shaping proxy, after every start
        assert facts["stand-1"]["links_shaped_by"] == "shaping proxy (user space, per destination)"
        assert set(manifest["shaping_proxies"]) == {"stand-0", "stand-1"}
    else:  # the kernel's path shapes foreign containers like ours
        assert facts["stand-1"]["links_shaped_by"] == {"netem": "kernel tc",
                                                       "delayline+htb": "host delay line (NFQUEUE)"}[path]
        assert "shaping_proxies" not in manifest
    assert manifest["foreign_outputs"]["stand-0"]["starts"] == 2  # killed and started again: two PeerID lines
    scripted = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert all(e.get("scripted") for e in scripted if e["kind"] == "publish" and e["node"] == "stand-1")


@pytest.mark.slow
def test_standin_as_an_adapter_on_the_process_backend(tmp_path, monkeypatch):
    register_standin(monkeypatch)
    state = StateStore(tmp_path / "state")
    resolved = parse_experiment(textwrap.dedent(MIXED.format(router=STANDIN)), "mixed.yaml").resolve(5)
    run_dir = tmp_path / "run"
    try:
        run_experiment(resolved, None, "process", run_dir, state)
    finally:
        ProcessBackend.cleanup(None, state)
    check_every_live_subscriber(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["node_facts"]["stand-0"]["links_shaped_by"] == "unshaped"
    assert any("foreign nodes ask for latency" in w for w in manifest["warnings"])
    assert (run_dir / "nodes" / "stand-0" / "stdout.ndjson").is_file()


LIVE = """\
name: contract-live
seed: 6
groups:
  - {{name: ours, count: 2, router: gossipsub, router_params: {{D: 2, D_low: 1, D_high: 3}}}}
  - {{name: stand, count: 1, router: {router}, router_params: {{D: 2, D_low: 1, D_high: 3}}}}
overlay: {{type: full}}
links: {{latency: 5}}
wire: {{message_id: first-8-bytes}}
"""


@needs_docker
@pytest.mark.docker
@pytest.mark.slow
def test_live_publish_through_a_bare_image_is_refused(node_image, tmp_path):
    """`testbed publish` to a bare image (no control endpoint) exits 2 naming
    it; the default publisher skips it; the testbed goes down cleanly."""
    image = build_standin_image(node_image)
    path = tmp_path / "live.yaml"
    path.write_text(LIVE.format(router=f'{{image: "{image}", contract: gossipsub-interop}}'))
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}

    def testbed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([TESTBED, *args], capture_output=True, text=True, timeout=600, env=env)

    up = testbed("up", str(path), "--backend", "docker", "--out", str(tmp_path / "run"), "--json")
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        refused = testbed("publish", "contract-live", "--node", "stand-0", "--topic", "t")
        assert refused.returncode == 2, refused.stderr
        assert "stand-0 is a bare gossipsub-interop image" in refused.stderr and "Traceback" not in refused.stderr
        default = testbed("publish", "contract-live", "--json")
        assert default.returncode == 0, default.stderr
        assert json.loads(default.stdout)["node"].startswith("ours-")
    finally:
        down = testbed("down", "contract-live", "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(testbed("status", "--json").stdout) == []
