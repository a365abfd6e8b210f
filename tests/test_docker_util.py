"""docker_util.start_or_explain: a container start the daemon does not
answer in time (seen at 250 containers on a loaded host) is the host's
limit, exit 3 naming the node, not an internal error (exit 70)."""

from __future__ import annotations

import pytest
import requests.exceptions

from orchestrator.dockerapi.client import start_or_explain
from orchestrator.errors import BackendUnavailable


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
