"""docker_util.start_or_explain: a container start the daemon does not
answer in time (seen at 250 containers on a loaded host) is the host's
limit, exit 3 naming the node, not an internal error (exit 70). And the
backend's parallel starts build a missing foreign image once."""

from __future__ import annotations

import pytest
import requests.exceptions

from orchestrator.dockerapi.client import start_or_explain
from orchestrator.errors import BackendUnavailable
from tests.docker_fixtures import needs_docker


class Container:
    def __init__(self, error: Exception | None) -> None:
        self.error, self.started = error, False

    def start(self) -> None:
        if self.error is not None:
            raise self.error
        self.started = True


def test_a_start_the_daemon_does_not_answer_in_time_exits_3_naming_the_node():
    timeout = requests.exceptions.ReadTimeout("Read timed out. (read timeout=120)")
    with pytest.raises(BackendUnavailable, match="node n7: the Docker daemon did not start") as caught:
        start_or_explain("n7", Container(timeout))
    assert caught.value.exit_code == 3 and "too loaded" in str(caught.value)


def test_other_errors_pass_through_and_a_start_that_answers_starts():
    with pytest.raises(ValueError):
        start_or_explain("n1", Container(ValueError("not ours")))
    ok = Container(None)
    start_or_explain("n2", ok)
    assert ok.started


@needs_docker
def test_parallel_starts_build_a_missing_foreign_image_once(tmp_path, monkeypatch):
    """start_many starts nodes a few at a time; each start asks for its
    router's image. subnet-blob-msg-docker's five rust-libp2p nodes, their
    image gone, ran five cargo builds of the adapter at once, which broke
    each other's fingerprints (the run failed). The first start builds it,
    the others wait for it."""
    import threading
    import time
    from types import SimpleNamespace

    from orchestrator.backends.api import BackendContext
    from orchestrator.backends.docker import backend as docker_backend
    from orchestrator.fanout import fan_out
    from orchestrator.records.state import StateStore

    builds: list[int] = []
    lock = threading.Lock()

    def build_image(client, reporter):
        with lock:
            builds.append(threading.get_ident())
        time.sleep(0.2)  # long enough for every other start to ask meanwhile
        return "gossip-testbed/fake-adapter:1"

    kind = SimpleNamespace(foreign=True, image=None, control=True, build_image=build_image)
    monkeypatch.setattr(docker_backend, "kind_of", lambda router: kind)
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    backend = docker_backend.DockerBackend(BackendContext("gtb-image-once", tmp_path, StateStore()))
    images = fan_out(lambda i: backend._launch(SimpleNamespace(router="fake-adapter"))[0], list(range(5)), 5)
    assert images == ["gossip-testbed/fake-adapter:1"] * 5 and len(builds) == 1
