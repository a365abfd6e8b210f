"""gossipsub v1.1 and v1.2 in experiment files: the versions are router kinds,
their parameters carry the specs' names, and a value that breaks a spec
constraint is one error naming file, line and parameter, exit 2."""

from __future__ import annotations

import os
import textwrap
import subprocess
import sys
from pathlib import Path

import pytest

from test_experiment_errors import BASE, assert_error, run_validate

TESTBED = Path(sys.executable).with_name("testbed")


def with_router(router: str, params: str = "") -> str:
    text = BASE.replace("router: gossipsub", f"router: {router}")
    if params:
        text = text.replace("  topics: [t]\n", f"  topics: [t]\n  router_params:\n{params}")
    return text


@pytest.mark.parametrize("router", ["gossipsub-v1.1", "gossipsub-v1.2"])
def test_versions_are_router_kinds_with_spec_parameters(tmp_path, capsys, router):
    code, err, _ = run_validate(tmp_path, with_router(router, "    D_out: 1\n    GossipFactor: 0.5\n"), capsys)
    assert code == 0, err


@pytest.mark.parametrize("params, line, key, words", [
    ("    D_out: 4\n", 7, "D_out", ("D_out must be below D_low",)),
    ("    GossipFactor: 1.5\n", 7, "GossipFactor", ("[0.0, 1.0]",)),
    ("    PublishThreshold: -60\n    GraylistThreshold: -50\n", 8, "GraylistThreshold",
     ("GraylistThreshold must be < PublishThreshold",)),
    ("    GossipThreshold: 1\n", 7, "GossipThreshold", ("must be < 0",)),
    ("    MeshMessageDeliveriesThreshold: 5\n    MeshMessageDeliveriesCap: 2\n", 8, "MeshMessageDeliveriesCap",
     ("at least the delivery threshold",)),
    ("    InvalidMessageDeliveriesWeight: 2\n", 7, "InvalidMessageDeliveriesWeight", ("must not be positive",)),
])
def test_spec_constraints_are_errors_with_file_and_line(tmp_path, capsys, params, line, key, words):
    assert_error(tmp_path, capsys, with_router("gossipsub-v1.2", params), line, f"nodes.router_params.{key}", *words)


def test_v11_parameter_on_v10_router_is_an_error(tmp_path, capsys):
    assert_error(tmp_path, capsys, with_router("gossipsub", "    D_out: 1\n"), 7, "nodes.router_params.D_out",
                 "unknown key")


def test_idontwant_parameter_on_v11_is_an_error(tmp_path, capsys):
    assert_error(tmp_path, capsys, with_router("gossipsub-v1.1", "    max_idontwant_messages: 5\n"), 7,
                 "nodes.router_params.max_idontwant_messages", "unknown key")


def test_real_console_script_exits_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(with_router("gossipsub-v1.1", "    D_score: 9\n"))
    out = subprocess.run([TESTBED, "validate", str(path)], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "300"})
    assert out.returncode == 2
    assert f"{path}:7: nodes.router_params.D_score:" in out.stderr


def test_app_specific_score_is_a_group_key_and_must_be_a_number(tmp_path, capsys):
    text = with_router("gossipsub-v1.2", "    AppSpecificWeight: 1.0\n")
    code, err, _ = run_validate(tmp_path, text.replace("  topics: [t]\n", "  topics: [t]\n  app_specific_score: -20\n"),
                                capsys)
    assert code == 0, err
    assert_error(tmp_path, capsys, text.replace("  topics: [t]\n", "  topics: [t]\n  app_specific_score: low\n"), 6,
                 "nodes.app_specific_score", "expected an application-specific score (P5)")


def test_app_specific_score_with_a_foreign_router_is_an_error_not_dropped(tmp_path, capsys):
    text = """\
        name: t
        groups:
          - {name: ours, count: 3, router: gossipsub-v1.2, topics: [t], app_specific_score: 5}
          - {name: rust, count: 2, router: rust-libp2p, topics: [t]}
        overlay: {type: full}
        links:
          latency: {model: constant, ms: 20}
        workload:
          messages: 5
          interval: 0.5
          publishers: {nodes: [ours-0]}
        """
    assert_error(tmp_path, capsys, text, 3, "groups[0].app_specific_score", "rust-libp2p",
                 "cannot be given an application-specific score (P5)")


def test_each_scoring_node_config_carries_the_others_app_specific_scores(tmp_path):
    """resolve -> NodeConfig: a scoring router's config names every other
    node of a group with app_specific_score by peer id; a v1.0 router's none."""
    from orchestrator.backends.api import NodeAddress, ShapingCapabilities
    from orchestrator.experiment.check import parse_experiment
    from orchestrator.routers.nodeconfigs import build_configs
    from orchestrator.routers.peers import peer_ids_b58

    text = """\
        name: t
        groups:
          - {name: a, count: 2, router: gossipsub-v1.2, topics: [t], app_specific_score: 7}
          - {name: b, count: 1, router: gossipsub-v1.1, topics: [t]}
          - {name: c, count: 1, router: gossipsub, topics: [t]}
        overlay: {type: full}
        links:
          latency: {model: constant, ms: 20}
        workload: {messages: 1, interval: 1s, publishers: {nodes: [b-0]}}
        """
    resolved = parse_experiment(textwrap.dedent(text), "t.yaml").resolve(None)
    addresses = {n.name: NodeAddress("127.0.0.1", 4000 + i, "127.0.0.1", 5000 + i) for i, n in enumerate(resolved.nodes)}
    configs = build_configs(resolved, addresses, ShapingCapabilities(False, False, "userspace", ""), "t", tmp_path)
    pid = peer_ids_b58(resolved)
    assert configs["a-0"].app_specific_scores == {pid["a-1"]: 7.0}
    assert configs["b-0"].app_specific_scores == {pid["a-0"]: 7.0, pid["a-1"]: 7.0}
    assert configs["c-0"].app_specific_scores == {}
