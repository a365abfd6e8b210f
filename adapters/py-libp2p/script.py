"""The --params script (test-plans' script_instruction.py), checked whole
before anything starts, and initGossipSub's go-named GossipSubParams mapped
to py-libp2p 0.8.1's GossipSub arguments.

Why a mapping table: py-libp2p's defaults are not go's (heartbeat 120 s, no
Dlo/Dhi defaults at all), so every value is set explicitly, starting from
go-libp2p-pubsub's defaults and overlaid with the script's. Durations arrive
as go time.Duration JSON (integer nanoseconds). Go parameters py-libp2p
cannot take are reported (stderr, status), never silently dropped:
py-libp2p 0.8.1 fixes Dlazy at 6 and GossipFactor at 0.25 (go's defaults)
when its adaptive gossip is off.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NS = 1_000_000_000

# go-libp2p-pubsub's GossipSubParams defaults, for what the script leaves out.
GO_DEFAULTS: dict[str, Any] = {
    "D": 6, "Dlo": 5, "Dhi": 12, "Dlazy": 6, "GossipFactor": 0.25,
    "HistoryLength": 5, "HistoryGossip": 3,
    "HeartbeatInitialDelay": 100_000_000, "HeartbeatInterval": NS,
    "FanoutTTL": 60 * NS, "PruneBackoff": 60 * NS, "UnsubscribeBackoff": 10 * NS,
    "PrunePeers": 16, "GraftFloodThreshold": 10 * NS, "DoPX": False,
}
# What py-libp2p 0.8.1 does with no way to change it.
FIXED = {"Dlazy": 6, "GossipFactor": 0.25}


def _seconds(ns: int) -> float:
    return ns / NS


def _whole_seconds(ns: int) -> int:  # py-libp2p keeps backoffs as whole seconds (the PRUNE's wire unit)
    return max(1, math.ceil(ns / NS))


# go name -> (GossipSub keyword, conversion)
GOSSIPSUB_ARGS = {
    "D": ("degree", int), "Dlo": ("degree_low", int), "Dhi": ("degree_high", int),
    "HistoryLength": ("gossip_history", int), "HistoryGossip": ("gossip_window", int),
    "HeartbeatInitialDelay": ("heartbeat_initial_delay", _seconds),
    "HeartbeatInterval": ("heartbeat_interval", _seconds),
    "FanoutTTL": ("time_to_live", _seconds),
    "PruneBackoff": ("prune_back_off", _whole_seconds),
    "UnsubscribeBackoff": ("unsubscribe_back_off", _whole_seconds),
    "PrunePeers": ("px_peers_count", int),
    # go's WithPeerExchange: our PRUNEs carry up to PrunePeers peers. A PX
    # received is acted on whatever this says, as py-libp2p 0.8.1 does.
    "DoPX": ("do_px", bool),
}
# Set on the router after construction (no constructor argument).
ROUTER_ATTRS = {"GraftFloodThreshold": ("graft_flood_threshold", _seconds)}
SWITCHES = {"DoPX"}  # true or false; every other parameter is a number
DURATIONS = {"HeartbeatInitialDelay", "HeartbeatInterval", "FanoutTTL", "PruneBackoff",
             "UnsubscribeBackoff", "GraftFloodThreshold"}


class ScriptError(ValueError):
    """Bad --params input: names the file and the instruction."""


@dataclass(frozen=True)
class RouterParams:
    gossipsub: dict[str, Any]  # GossipSub(**gossipsub)
    attrs: dict[str, Any]  # setattr(router, k, v)
    go: dict[str, Any]  # the go-named values in force
    ignored: dict[str, Any] = field(default_factory=dict)  # given, but py-libp2p cannot apply them


def router_params(given: dict[str, Any]) -> RouterParams:
    go = {**GO_DEFAULTS, **given}
    gossipsub = {arg: conv(go[name]) for name, (arg, conv) in GOSSIPSUB_ARGS.items()}
    attrs = {arg: conv(go[name]) for name, (arg, conv) in ROUTER_ATTRS.items()}
    ignored = {k: v for k, v in given.items()
               if (k not in GOSSIPSUB_ARGS and k not in ROUTER_ATTRS and k not in FIXED)
               or (k in FIXED and v != FIXED[k])}
    return RouterParams(gossipsub, attrs, {k: go[k] for k in GO_DEFAULTS}, ignored)


def _check_params(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: gossipSubParams must be an object")
    out = {}
    for key, value in raw.items():
        if value is None:  # pydantic's unset fields
            continue
        if key in SWITCHES:
            if not isinstance(value, bool):
                raise ScriptError(f"{where}: gossipSubParams.{key} must be true or false, not {value!r}")
            out[key] = value
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScriptError(f"{where}: gossipSubParams.{key} must be a number, not {value!r}")
        if key in DURATIONS and (not isinstance(value, int) or value < 0):
            raise ScriptError(f"{where}: gossipSubParams.{key} is a duration in integer nanoseconds, not {value!r}")
        if key in GOSSIPSUB_ARGS and value < 0:
            raise ScriptError(f"{where}: gossipSubParams.{key} must not be negative")
        out[key] = value
    if out.get("HeartbeatInterval") == 0:
        raise ScriptError(f"{where}: gossipSubParams.HeartbeatInterval must be > 0")
    go = {**GO_DEFAULTS, **out}
    if not go["Dlo"] <= go["D"] <= go["Dhi"]:  # go-libp2p-pubsub refuses these too
        raise ScriptError(f"{where}: gossipSubParams need Dlo <= D <= Dhi (with go's defaults for "
                          f"what is not given: Dlo={go['Dlo']}, D={go['D']}, Dhi={go['Dhi']})")
    return out


def _uint(value: Any, what: str, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < hi:
        raise ScriptError(f"{what} must be an integer in [0, {hi}), not {value!r}")
    return value


def _int(instr: dict[str, Any], key: str, where: str, hi: int = 1 << 64) -> int:
    return _uint(instr.get(key), f"{where}: {key}", hi)


def _str(instr: dict[str, Any], key: str, where: str) -> str:
    value = instr.get(key)
    if not isinstance(value, str) or not value:
        raise ScriptError(f"{where}: {key} must be a non-empty string, not {value!r}")
    return value


def check_instruction(instr: Any, where: str) -> dict[str, Any]:
    """The instruction with its fields checked (nested ones too)."""
    if not isinstance(instr, dict):
        raise ScriptError(f"{where}: an instruction is a JSON object")
    kind = instr.get("type")
    if kind == "initGossipSub":
        return {"type": kind, "gossipSubParams": _check_params(instr.get("gossipSubParams", {}), where)}
    if kind == "connect":
        targets = instr.get("connectTo")
        if not isinstance(targets, list):
            raise ScriptError(f"{where}: connectTo must be a list of node ids")
        return {"type": kind, "connectTo": [_uint(t, f"{where}: connectTo[]", 1 << 32) for t in targets]}
    if kind == "subscribeToTopic":
        return {"type": kind, "topicID": _str(instr, "topicID", where)}
    if kind == "publish":
        return {"type": kind, "messageID": _int(instr, "messageID", where),
                "messageSizeBytes": _int(instr, "messageSizeBytes", where, 1 << 24),
                "topicID": _str(instr, "topicID", where)}
    if kind == "waitUntil":
        return {"type": kind, "elapsedSeconds": _int(instr, "elapsedSeconds", where, 1 << 32)}
    if kind == "ifNodeIDEquals":
        return {"type": kind, "nodeID": _int(instr, "nodeID", where, 1 << 32),
                "instruction": check_instruction(instr.get("instruction"), f"{where}.instruction")}
    raise ScriptError(f"{where}: unknown instruction type {kind!r}")


def own_script(script: list[dict[str, Any]], node_id: int) -> list[dict[str, Any]]:
    """The instructions this node runs, conditionals resolved."""
    out = []
    for instr in script:
        while instr["type"] == "ifNodeIDEquals":
            if instr["nodeID"] != node_id:
                break
            instr = instr["instruction"]
        else:
            out.append(instr)
    return out


@dataclass(frozen=True)
class Script:
    params: RouterParams
    steps: tuple[dict[str, Any], ...]  # initGossipSub removed: the router is built from it before the host starts


def load_script(path: Path, node_id: int) -> Script:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ScriptError(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("script"), list):
        raise ScriptError(f'{path}: expected {{"script": [instruction, ...]}}')
    checked = [check_instruction(instr, f"{path}: script[{i}]") for i, instr in enumerate(raw["script"])]
    mine = own_script(checked, node_id)
    inits = [s for s in mine if s["type"] == "initGossipSub"]
    if len(inits) > 1:
        raise ScriptError(f"{path}: more than one initGossipSub applies to node {node_id}")
    if inits and mine[0] is not inits[0]:
        raise ScriptError(f"{path}: initGossipSub must come before every other instruction")
    given = inits[0]["gossipSubParams"] if inits else {}
    return Script(router_params(given), tuple(s for s in mine if s["type"] != "initGossipSub"))
