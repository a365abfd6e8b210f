"""Router and score parameters for foreign routers: the specs' names in the
file, go's in the script, and what a kind cannot take refused by `testbed
validate` at FILE:LINE (exit 2), never dropped. Each kind's set is checked
against what its adapter's source actually maps."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from node.interop.go_params import GO_NAMES, OPTION_NAMES, SCORE_GO_NAMES, SCORE_NAMES, go_peer_score
from orchestrator.experiment.spec import load_experiment
from orchestrator.routers.foreign_params import PY_TAKES, RUST_TAKES
from orchestrator.routers.interop_script import node_script
from orchestrator.routers.kinds import ADAPTERS, image_router, kind_of
from orchestrator.routers.nodeconfigs import dials
from test_experiment_errors import assert_error, run_validate

ROOT = Path(__file__).resolve().parent.parent
TESTBED = Path(sys.executable).with_name("testbed")
BARE = '{image: "example/go-node:1", contract: gossipsub-interop}'

FILE = """\
name: t
groups:
  - {name: ours, count: 2, router: gossipsub-v1.2, topics: [t]}
  - name: them
    count: 2
    router: ROUTER
    topics: [t]
    router_params:
PARAMS
overlay: {type: full}
links:
  latency: {model: constant, ms: 20}
wire: {message_id: first-8-bytes, authenticity: AUTH}
workload:
  messages: 5
  interval: 0.5
  size: 16
  publishers: {nodes: [ours-0]}
"""


def file_for(router: str, params: str) -> str:
    auth = "anonymous" if router.startswith("{") else "strict"
    body = "".join(f"      {line}\n" for line in params.splitlines())
    return FILE.replace("ROUTER", router).replace("PARAMS\n", body).replace("AUTH", auth)


def init_of(tmp_path: Path, router: str, params: str) -> dict:
    path = tmp_path / "x.yaml"
    path.write_text(file_for(router, params))
    resolved = load_experiment(path).resolve(1)
    return node_script(resolved, "them-0", dials(resolved))[0]


def test_rust_takes_v11_v12_router_and_score_parameters_in_go_names(tmp_path):
    init = init_of(tmp_path, "rust-libp2p", "PruneBackoff: 30\nD_out: 1\nFloodPublish: false\n"
                   "IDontWantMessageThreshold: 2000\nGossipThreshold: -20\nTimeInMeshWeight: 0.5\n"
                   "TimeInMeshCap: 10\nMeshMessageDeliveryWindow: 0.01")
    go = init["gossipSubParams"]
    assert (go["PruneBackoff"], go["Dout"], go["FloodPublish"], go["IDontWantMessageThreshold"]) == (
        30_000_000_000, 1, False, 2000)
    assert "Dscore" not in go and "MaxIDontWantLength" not in go  # unset / not rust's
    assert init["peerScoreThresholds"]["GossipThreshold"] == -20.0
    topic = init["peerScoreParams"]["Topics"]["t"]
    assert (topic["TimeInMeshWeight"], topic["TimeInMeshCap"], topic["MeshMessageDeliveriesWindow"]) == (
        0.5, 10.0, 10_000_000)
    assert init["peerScoreParams"]["DecayInterval"] == 1_000_000_000


def test_a_bare_image_gets_go_gossipsubparams_and_no_score(tmp_path):
    init = init_of(tmp_path, BARE, "MaxIDontWantLength: 4\nD_score: 1\nIWantFollowupTime: 2")
    assert init["gossipSubParams"]["MaxIDontWantLength"] == 4 and init["gossipSubParams"]["Dscore"] == 1
    assert init["gossipSubParams"]["IWantFollowupTime"] == 2_000_000_000
    assert set(init) == {"type", "gossipSubParams"} and "FloodPublish" not in init["gossipSubParams"]


def test_py_libp2p_gets_what_its_adapter_maps(tmp_path):
    init = init_of(tmp_path, "py-libp2p", "UnsubscribeBackoff: 4\nGraftFloodThreshold: 5")
    go = init["gossipSubParams"]
    assert (go["UnsubscribeBackoff"], go["GraftFloodThreshold"]) == (4_000_000_000, 5_000_000_000)
    assert "Dlazy" not in go and "GossipFactor" not in go and set(init) == {"type", "gossipSubParams"}


@pytest.mark.parametrize("router, params, key, words", [
    (BARE, "GossipThreshold: -5", "GossipThreshold", ("test-plans' initGossipSub",)),
    (BARE, "FloodPublish: false", "FloodPublish", ("has no counterpart",)),
    (BARE, "TopicWeight: 1", "TopicWeight", ("cannot be given TopicWeight",)),
    ("rust-libp2p", "MaxIDontWantLength: 5", "MaxIDontWantLength", ("adapters/rust-libp2p",)),
    ("rust-libp2p", "seen_ttl: 30", "seen_ttl", ("cannot be given seen_ttl",)),
    ("py-libp2p", "D_lazy: 4", "D_lazy", ("adapters/py-libp2p",)),
    ("py-libp2p", "GossipFactor: 0.5", "GossipFactor", ("py-libp2p",)),
    ("py-libp2p", "D_out: 1", "D_out", ("py-libp2p",)),
    ("py-libp2p", "GossipThreshold: -5", "GossipThreshold", ("py-libp2p",)),
])
def test_what_a_kind_cannot_take_is_refused_at_its_line(tmp_path, capsys, router, params, key, words):
    assert_error(tmp_path, capsys, file_for(router, params), 9, f"groups[1].router_params.{key}",
                 "cannot be given", *words)


@pytest.mark.parametrize("params, line, key, words", [
    ("DecayInterval: 0.5", 9, "DecayInterval", ("at least 1 s for rust-libp2p",)),
    ("FirstMessageDeliveriesWeight: 1\nFirstMessageDeliveriesCap: 5", 9, "FirstMessageDeliveriesWeight",
     ("FirstMessageDeliveriesDecay must be in (0, 1) for rust-libp2p",)),
    ("TimeInMeshWeight: 1", 9, "TimeInMeshWeight", ("TimeInMeshCap must be positive for rust-libp2p",)),
    ("D_out: 4", 9, "D_out", ("D_out must be below D_low",)),  # the spec's constraints hold too
])
def test_rust_libp2p_s_own_constraints_are_errors(tmp_path, capsys, params, line, key, words):
    assert_error(tmp_path, capsys, file_for("rust-libp2p", params), line, f"groups[1].router_params.{key}", *words)


def test_defaults_fit_every_foreign_kind_and_small_meshes_need_no_d_out(tmp_path, capsys):
    for router in ("rust-libp2p", "py-libp2p", BARE):
        code, err, _ = run_validate(tmp_path, file_for(router, "D: 2\nD_low: 1\nD_high: 4"), capsys)
        assert code == 0, (router, err)


def test_console_script_exits_2_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(file_for(BARE, "PruneBackoff: 5\nAcceptPXThreshold: 3"))
    out = subprocess.run([TESTBED, "validate", str(path)], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "300"})
    assert out.returncode == 2, out.stderr
    assert f"{path}:10: groups[1].router_params.AcceptPXThreshold:" in out.stderr
    assert "Traceback" not in out.stderr


def _every_field_is_taken_or_fixed(kind) -> set[str]:
    engine = kind.engine
    names = {f.name for f in dataclasses.fields(engine.params)}
    return names - set(engine.fixed) - {"gossip"}


def test_each_kind_takes_exactly_its_set():
    assert _every_field_is_taken_or_fixed(kind_of("rust-libp2p")) == set(RUST_TAKES)
    assert _every_field_is_taken_or_fixed(kind_of("py-libp2p")) == set(PY_TAKES)
    assert _every_field_is_taken_or_fixed(kind_of(image_router("x"))) == set(GO_NAMES)
    assert all(kind_of(r).params_from for r in ADAPTERS)


def _match_arms(path: Path) -> set[str]:
    return set(re.findall(r'^\s*"([A-Za-z]+)" =>', path.read_text(), re.MULTILINE))


def test_rust_takes_what_its_adapter_maps():
    src = ROOT / "adapters" / "rust-libp2p" / "src"
    router = {({**GO_NAMES, **OPTION_NAMES})[k] for k in RUST_TAKES if k not in SCORE_NAMES}
    assert router == _match_arms(src / "params.rs")
    score = {SCORE_GO_NAMES.get(k, k) for k in SCORE_NAMES} | {"Topics"}
    assert score == _match_arms(src / "score.rs")


def test_py_takes_what_its_adapter_maps():
    sys.path.insert(0, str(ROOT / "adapters" / "py-libp2p"))
    try:
        import script
    finally:
        sys.path.remove(str(ROOT / "adapters" / "py-libp2p"))
    assert {({**GO_NAMES, **OPTION_NAMES})[k] for k in PY_TAKES} == set(script.GOSSIPSUB_ARGS) | set(script.ROUTER_ATTRS)


def test_no_score_parameters_no_score_block():
    assert go_peer_score({"D": 6, "PruneBackoff": 60.0}, ["t"]) == {}
