"""Conformance with a gossipsub-interop node we did not write as our router:
the minimal contract node (tests/contract-node, written from test-plans'
implementation.md alone: it reads only --params, signs nothing, prints only
the contract's lines and exits when its script ends) as a bare
`{image, contract}` group, next to 6 of our routers and 3 rust-libp2p
adapters, on 20 ms links, one image node killed and started again.

What it shows: the experiment needs no wire section (next to bare images
the contract's unsigned wire is the default); the image nodes live as long
as the run (their scripts end with a waitUntil past its end: none left
early); and every live subscriber, of every implementation, receives every
message, checked from the converted traces by the analysis.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from node.trace.file import read_trace
from node.trace.vocab import TraceType
from orchestrator.images.rust import toolchain_problem
from tests.docker_fixtures import *  # noqa: F403
from tests.docker_fixtures import needs_docker

ROOT = Path(__file__).resolve().parent.parent
TESTBED = str(ROOT / ".venv" / "bin" / "testbed")
NO_CARGO = toolchain_problem()

MIXED = """\
name: contract-node-mixed
seed: 11
groups:
  - {{name: ours, count: 6, router: gossipsub, router_params: &mesh {{D: 4, D_low: 3, D_high: 6}}}}
  - {{name: rust, count: 3, router: rust-libp2p, router_params: *mesh}}
  - {{name: img, count: 4, router: {{image: "{image}", contract: gossipsub-interop}}, router_params: *mesh}}
overlay: {{type: random_regular, degree: 4}}
links: {{latency: 20}}
workload: {{messages: 9, interval: 1s, start: 1s, size: 200, publishers: {{nodes: [ours-0, rust-0, img-1]}}}}
churn:
  timeline:
    - {{at: 2.5s, action: kill, select: {{nodes: [img-0]}}, for: 3s}}
linger: 4s
"""


@pytest.fixture(scope="module")
def contract_image(node_image):
    if NO_CARGO is not None:
        pytest.skip(NO_CARGO)
    import docker  # noqa: PLC0415

    from tests.contract_node import contract_node_image  # noqa: PLC0415

    return contract_node_image(docker.from_env())


@needs_docker
@pytest.mark.docker
@pytest.mark.slow
def test_contract_node_with_ours_and_rust_libp2p(contract_image, tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED.format(image=contract_image))
    run_dir = tmp_path / "run"
    env = {**os.environ, "TESTBED_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run([TESTBED, "run", str(path), "--backend", "docker", "--out", str(run_dir), "--no-report",
                           "--json"], capture_output=True, text=True, timeout=2400, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    wire = yaml.safe_load((run_dir / "experiment.resolved.yaml").read_text())["wire"]
    assert (wire["authenticity"], wire["message_id"]) == ("anonymous", "first-8-bytes")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "left_early" not in manifest, manifest["left_early"]
    assert manifest["foreign_outputs"]["img-0"]["starts"] == 2  # killed and started again: two PeerID lines
    for node in ("img-0", "img-1", "img-2", "img-3"):
        script = json.loads((run_dir / "nodes" / node / "params.json").read_text())["script"]
        assert script[-1]["type"] == "waitUntil" and script[-1]["elapsedSeconds"] > 9 + 4

    proc = subprocess.run([TESTBED, "analyze", str(run_dir), "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["messages"] == 9 and s["messages_complete"] == 9, s
    assert s["delivery_ratio"] == 1.0 and s["messages_lost"] == 0, s
    topo = {n["name"]: n["implementation"] for n in json.loads((run_dir / "topology.json").read_text())["nodes"]}
    assert topo["img-0"] == f"image:{contract_image}" and topo["rust-0"] == "rust-libp2p"
    for node in ("img-0", "img-2"):
        kinds = {TraceType(e.type) for e in read_trace(run_dir / "traces" / f"{node}.pb")}
        assert {TraceType.JOIN, TraceType.DELIVER_MESSAGE} <= kinds, node
    # the contract node's stdout is the contract's lines only: nothing dropped, no extension lines
    outputs = manifest["foreign_outputs"]
    assert all(outputs[f"img-{i}"]["garbage"] == 0 and outputs[f"img-{i}"]["unknown"] == {} for i in range(4)), outputs
