"""Each node's libp2p identity and message authenticity, from the resolved
experiment.

A node's identity is the key test-plans' gossipsub-interop derives for its
index, and its index is its position in the experiment's node list (groups in
file order, names in group order). So every implementation computes every
node's peer id, names stay the human face (CLI, report, events.jsonl), and
peer ids are what traces carry; topology.json and manifest.json map one to
the other.
"""

from __future__ import annotations

from typing import Any

from node.engine.authenticity import Authenticity
from node.libp2p.identity import INJECTOR_INDEX, Identity, identity_for_index
from orchestrator.experiment.model import ResolvedExperiment


def node_indices(resolved: ResolvedExperiment) -> dict[str, int]:
    """Name -> index, in the experiment's node order."""
    return {spec.name: index for index, spec in enumerate(resolved.nodes)}


def node_identities(resolved: ResolvedExperiment) -> dict[str, Identity]:
    """Name -> identity, in the experiment's node order."""
    return {name: identity_for_index(index) for name, index in node_indices(resolved).items()}


def peer_ids_b58(resolved: ResolvedExperiment) -> dict[str, str]:
    """Name -> peer id text (`12D3KooW...`), in the experiment's node order."""
    return {name: ident.peer_id_b58 for name, ident in node_identities(resolved).items()}


def injector_identity() -> Identity:
    """The author of injected messages (one message handed to several nodes)."""
    return identity_for_index(INJECTOR_INDEX)


def wire_facts(resolved: ResolvedExperiment) -> dict[str, Any]:
    """What manifest.json records about identities and the wire: name -> peer
    id, the injector's peer id, and the experiment's wire settings."""
    return {
        "peer_ids": peer_ids_b58(resolved),
        "injector_peer_id": injector_identity().peer_id_b58,
        "wire": {"security": resolved.security, "authenticity": resolved.authenticity,
                 "message_id": resolved.message_id},
    }


def multiaddr(host: str, port: int, peer_id_b58: str) -> str:
    """The libp2p multiaddr a host dials to reach a node listening at host:port."""
    proto = "ip6" if ":" in host else "ip4"
    return f"/{proto}/{host}/tcp/{port}/p2p/{peer_id_b58}"


def authenticity_for(resolved: ResolvedExperiment, signer: Identity, modelled: bool = False) -> Authenticity:
    """The experiment's message authenticity for one signer; `modelled` for
    the simulator (no cryptography, signatures of the real size)."""
    return Authenticity(resolved.authenticity, resolved.message_id, signer, modelled)
