"""The gossipsub-interop script each foreign node runs (`--params FILE`:
`{"script": [instruction, ...]}` as in libp2p test-plans'
script_instruction.py), compiled from the resolved experiment.

A node's script is: initGossipSub (its router parameters in go's names,
node/interop/go_params.py; for a kind that scores, its score parameters
too), setTopicValidationDelay for each of its topics
that the experiment gives a validation delay, subscribeToTopic for each of
its topics, connect to the peers it dials (each overlay edge is dialled once, by the side
`orchestrator.routers.nodeconfigs.dials` picks for everyone), and, for a bare image
only, its workload publishes. An adapter (our `--config` extensions) gets
no publishes: the controller hands them over its control endpoint live.

Scripted publishes wait with `waitUntil`, whose unit is whole seconds since
the node's own start. So the schedule is fixed before a node starts: the
node is told when, on the workload clock, it starts (`start_s`, negative
before t=0), and each publish at `at` waits until ceil(at - start_s). A
message is therefore published up to 1 s after its time, and messages less
than 1 s apart from one bare publisher go out together. A node that is
restarted gets a new script for its new start: publishes already due are
dropped, the rest shifted (so a restart never re-publishes).

Every script ends with a waitUntil to the run's end (last_wait;
orchestrator/routers/foreign_nodes.py computes the end), since test-plans' nodes
exit when their script ends (experiment.py closes its scripts the same way).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from orchestrator.experiment.model import Publish, ResolvedExperiment
from node.interop.go_params import go_gossipsub_params, go_peer_score
from orchestrator.routers.peers import node_indices

Instruction = dict[str, Any]


def wait_seconds(at: float, start_s: float) -> int:
    """waitUntil's elapsedSeconds for a publish at `at` (workload clock) by a
    node that started at `start_s`: the first whole second not before it."""
    return max(0, math.ceil(round(at - start_s, 9)))


def node_script(
    resolved: ResolvedExperiment, name: str, dials: Mapping[str, list[str]], start_s: float | None = None,
) -> list[Instruction]:
    """`name`'s script. `start_s` None: no publishes (the node takes them
    live); else the node publishes its own workload messages due after
    `start_s` (the workload-clock time it starts at)."""
    spec = resolved.node(name)
    index = node_indices(resolved)
    script: list[Instruction] = [{"type": "initGossipSub", "gossipSubParams": go_gossipsub_params(spec.params),
                                  **go_peer_score(spec.params, spec.topics)}]
    script += [{"type": "setTopicValidationDelay", "topicID": t, "delaySeconds": resolved.validation_delay[t]}
               for t in spec.topics if t in resolved.validation_delay]
    script += [{"type": "subscribeToTopic", "topicID": t} for t in spec.topics]
    peers = dials.get(name, [])
    if peers:
        script.append({"type": "connect", "connectTo": [index[p] for p in peers]})
    if start_s is not None:
        script += publish_instructions([p for p in resolved.publishes if p.publisher == name and p.at > start_s], start_s)
    return script


def publish_instructions(publishes: list[Publish], start_s: float) -> list[Instruction]:
    out: list[Instruction] = []
    waited = -1
    for p in sorted(publishes, key=lambda p: (p.at, p.seq)):
        wait = wait_seconds(p.at, start_s)
        if wait != waited:
            out.append({"type": "waitUntil", "elapsedSeconds": wait})
            waited = wait
        out.append({"type": "publish", "messageID": p.seq, "messageSizeBytes": p.size, "topicID": p.topic})
    return out


def last_wait(script: list[Instruction], seconds: int) -> Instruction:
    """The script's closing waitUntil: `seconds` after the node's start, and
    never before a wait the script already has (waitUntil only moves on)."""
    waits = [int(i["elapsedSeconds"]) for i in script if i.get("type") == "waitUntil"]
    return {"type": "waitUntil", "elapsedSeconds": max([seconds, *waits])}


def params_json(script: list[Instruction]) -> str:
    """The `--params` file's text."""
    return json.dumps({"script": script}, indent=1)
