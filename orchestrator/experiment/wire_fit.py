"""The one wire every node of an experiment shares: which message
authenticity and message-id function the routers present can all run
(orchestrator/routers/kinds.py says what each kind can; our engines run every
one).

A wire setting the file gives must be one every router present can run,
else the file is refused at that setting's line. A setting the file leaves
out takes the file's default (strict, from-seqno) when every router can run
it; otherwise, when exactly one setting works for all of them, that one
(bare gossipsub-interop images: anonymous and first-8-bytes, the
contract's own wire), so the user does not write it and
experiment.resolved.yaml records it. Routers that share no setting at all
(py-libp2p signs, a bare image refuses signed messages) are refused at the
router of the group that cannot join the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from node.engine.authenticity import check_combination
from orchestrator.errors import InputError
from orchestrator.experiment.parts import Group, Wire
from orchestrator.experiment.yamlsrc import Path_
from orchestrator.routers.kinds import kind_of

Refuse = Callable[[Path_, str], InputError]

# setting -> (what it is called in messages, the RouterKind field that lists what a router can run)
_SETTINGS = {"authenticity": ("messages", "authenticities"), "message_id": ("message ids", "message_ids")}


def shared_wire(wire: Wire, groups: Sequence[Group], refuse: Refuse) -> Wire:
    """`wire` with every setting it leaves out chosen for `groups`' routers;
    refuse(path, message) makes the error for a combination that cannot work."""
    given = wire.given()
    chosen: dict[str, str] = {}
    for setting, (words, which) in _SETTINGS.items():
        able = getattr(kind_of(groups[0].router), which)
        for g in groups[1:]:
            common = tuple(x for x in able if x in getattr(kind_of(g.router), which))
            if not common:
                raise refuse((*g.path, "router"), _no_common(g, setting, words, able, groups))
            able = common
        value = getattr(wire, setting)
        if setting in given:
            if value not in able:
                g = next(g for g in groups if value not in getattr(kind_of(g.router), which))
                raise refuse(("wire", setting), f"group {g.name!r} runs {kind_of(g.router).implementation}, "
                             f"which cannot run {setting} {value}; the routers present can all run: {', '.join(able)}"
                             + _contract_note(g, setting))
        elif value not in able and len(able) == 1:
            chosen[setting] = able[0]
        elif value not in able:
            raise refuse((*groups[0].path, "router"), f"the routers here cannot run the default {setting} {value}; "
                         f"choose one they all can: set wire.{setting} to one of {', '.join(able)}")
    fitted = wire.model_copy(update=chosen) if chosen else wire
    try:
        check_combination(fitted.authenticity, fitted.message_id)  # the engine's own rule
    except ValueError as exc:
        raise refuse(("wire", "authenticity"), str(exc)) from None
    return fitted


def _no_common(g: Group, setting: str, words: str, able: tuple[str, ...], groups: Sequence[Group]) -> str:
    others = sorted({kind_of(o.router).implementation for o in groups if o.router != g.router})
    return (f"group {g.name!r} runs {kind_of(g.router).implementation}, whose {words} ({setting}: "
            f"{', '.join(getattr(kind_of(g.router), _SETTINGS[setting][1]))}) no other router here "
            f"({', '.join(others)}) can share (they can run: {', '.join(able)}); these routers cannot run "
            "in one experiment" + _contract_note(g, setting))


def _contract_note(g: Group, setting: str) -> str:
    if g.router.startswith("image:") and setting == "message_id":
        return " (a gossipsub-interop contract node's message id is the data's first 8 bytes, big-endian)"
    if g.router.startswith("image:"):
        return (" (a gossipsub-interop contract node publishes unsigned and refuses signed messages: "
                "go's StrictNoSign + WithNoAuthor)")
    if g.router == "py-libp2p" and setting == "authenticity":
        return " (py-libp2p 0.8.1 always puts from and seqno on what it publishes)"
    return ""
