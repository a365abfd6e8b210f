"""Where a topic's validation delay can go: a topic some group subscribes
to, on routers that can hold a message in validation for a while
(orchestrator/routers/kinds.py `RouterKind.validation_delay`: our gossipsub-family engines,
the rust-libp2p adapter and bare contract images, not simsub, episub or
py-libp2p). Anything else is refused at the topic's line."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from orchestrator.errors import InputError
from orchestrator.experiment.parts import Group
from orchestrator.experiment.yamlsrc import Path_
from orchestrator.routers.kinds import kind_of

Refuse = Callable[[Path_, str], InputError]


def check_validation_delay(delays: Mapping[str, float], groups: Sequence[Group], refuse: Refuse) -> None:
    topics = sorted({t for g in groups for t in g.topics})
    for topic in delays:
        path = ("validation_delay", topic)
        if topic not in topics:
            raise refuse(path, f"no group subscribes to topic {topic!r} (topics: {', '.join(topics)})")
        for g in groups:
            if topic in g.topics and not kind_of(g.router).validation_delay:
                router = kind_of(g.router).implementation if kind_of(g.router).foreign else g.router
                raise refuse(path, f"group {g.name or 'nodes'!r} runs {router}, which validates at once and "
                             "takes no validation delay")
