"""The lifecycle table's calls on a real backend: the controller's Runner
(orchestrator/experiment/lifecycle.py). A started node gets its next
incarnation's config from the controller; subscriptions change through the
node's control endpoint; everything else is the backend's own verb."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from node.config import NodeConfig
from orchestrator.backends.api import Backend


@dataclass(frozen=True)
class BackendRunner:
    backend: Backend
    next_config: Callable[[str], NodeConfig]

    def kill(self, node: str) -> None:
        self.backend.kill(node)

    def stop(self, node: str) -> None:
        self.backend.stop(node)

    def start(self, node: str) -> None:
        self.backend.start(self.next_config(node))

    def pause(self, node: str) -> None:
        self.backend.pause(node)

    def resume(self, node: str) -> None:
        self.backend.resume(node)

    def disconnect(self, node: str, peers: Collection[str] | None) -> None:
        self.backend.disconnect(node, list(peers) if peers else None)

    def reconnect(self, node: str, peers: Collection[str] | None) -> None:
        self.backend.reconnect(node, list(peers) if peers else None)

    def subscribe(self, node: str, topic: str) -> None:
        self.backend.control_client(node).call("subscribe", topic=topic)

    def unsubscribe(self, node: str, topic: str) -> None:
        self.backend.control_client(node).call("unsubscribe", topic=topic)
