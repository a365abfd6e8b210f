"""Runs that fail at readiness on purpose, several in a row, on the docker
backend; shared by the CI test (tests/test_docker_teardown.py, 30
containers) and the bench script (bench/bench_teardown.py --readiness-fail,
250 containers).

Why: issue #17 saw a 250-container run that failed at readiness, twice in a
row, leave a network Docker would not remove ("has active endpoints" with
nothing attached). One try here is `run_experiment(..., ready_timeout=0)`:
every container is created and started, readiness gives up at once, and the
run tears down as any failed run does. Then everything the try's state
directory made is counted (containers, networks, volumes, live network
namespaces, state records) and the next try starts at once.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.kill_harness import host_side, labelled, live_netns, records, netns_keys


def experiment_text(name: str, nodes: int, messages: int = 1, interval: str = "100ms") -> str:
    """The small gossipsub experiment the Docker teardown tests and bench run."""
    return f"""\
name: {name}
seed: 3
nodes:
  count: {nodes}
  router: gossipsub
  router_params: {{D: 3, D_low: 2, D_high: 6}}
  topics: [t]
  resources: {{memory: 96m}}
overlay:
  type: random_regular
  degree: 3
links:
  latency: {{model: constant, ms: 5}}
workload:
  messages: {messages}
  interval: {interval}
  size: 64
  publishers: {{nodes: [n0]}}
linger: 0s
"""


@dataclass(frozen=True)
class ReadinessTry:
    index: int
    nodes: int
    error: str  # what the run raised (it must be the readiness failure)
    started: int  # network namespaces seen after start_many
    up_s: float  # from the start of the run to the readiness failure
    down_s: float  # the teardown after it
    left: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not any(self.left.values())

    def line(self) -> str:
        left = ", ".join(f"{len(v)} {k}" for k, v in self.left.items() if v) or "nothing"
        return (f"try {self.index}: {self.nodes} containers ({self.started} namespaces), up {self.up_s:.1f} s, "
                f"down {self.down_s:.1f} s, left {left}; {self.error[:120]}")


def readiness_tries(nodes: int, tries: int, work: Path, report=print) -> list[ReadinessTry]:
    """`tries` runs of `nodes` containers in a row, each made to fail at
    readiness; TESTBED_STATE_DIR is set per try (and restored)."""
    from cli.postrun import plan_runs  # noqa: PLC0415 - needs the project importable
    from orchestrator.run.controller import Controller  # noqa: PLC0415
    from orchestrator.backends.docker.backend import DockerBackend  # noqa: PLC0415
    from orchestrator.errors import TestbedError  # noqa: PLC0415
    from orchestrator.run.runs import run_experiment  # noqa: PLC0415

    saved_env = os.environ.get("TESTBED_STATE_DIR")
    start_many, down = DockerBackend.start_many, Controller.down
    results = []
    try:
        for index in range(tries):
            state = work / f"state-{index}"
            os.environ["TESTBED_STATE_DIR"] = str(state)
            netns: set[str] = set()
            marks: dict[str, float] = {}

            def noting_start(self, configs, state=state, netns=netns):
                start_many(self, configs)
                netns.update(netns_keys(state))

            def timed_down(self, marks=marks):  # the first call: the run's own down
                marks.setdefault("down", time.monotonic())
                try:
                    return down(self)
                finally:
                    marks["down_end"] = time.monotonic()

            DockerBackend.start_many, Controller.down = noting_start, timed_down
            exp = work / f"ready-{index}.yaml"
            exp.write_text(experiment_text(f"ready{nodes}-{index}", nodes))
            planned = plan_runs(exp, None, work / f"run-{index}", "docker", None).runs[0]
            t0, error = time.monotonic(), ""
            try:
                run_experiment(planned.resolved, planned.resolved_yaml, "docker", planned.run_dir, ready_timeout=0.0)
            except TestbedError as exc:
                error = str(exc)
            t_down = marks.get("down", time.monotonic())
            left = labelled(state)
            left["netns"] = live_netns(netns)
            left["records"] = records(state)
            left.update(host_side(state))
            result = ReadinessTry(index, nodes, error, len(netns), t_down - t0,
                                  marks.get("down_end", t_down) - t_down, left)
            report(result.line())
            results.append(result)
    finally:
        DockerBackend.start_many, Controller.down = start_many, down
        if saved_env is None:
            os.environ.pop("TESTBED_STATE_DIR", None)
        else:
            os.environ["TESTBED_STATE_DIR"] = saved_env
    return results
