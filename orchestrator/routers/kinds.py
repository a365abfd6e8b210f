"""Router kinds: the one registry that says, for every router an
experiment can name (our engines and foreign routers), what implementation it
is, how it starts (a process argv; a Docker image, built lazily), whether it
serves our control endpoint and which trace events it can record.

Kinds are "rust-libp2p" and "py-libp2p" (adapters shipped in adapters/, with
our `--config` extensions and control endpoint) and "image:NAME" (a bare
image following test-plans' gossipsub-interop contract: script only, no
control endpoint, stdout NDJSON only; docs/foreign-routers.md). Builders and
process entry points are "module:function" strings imported only when a run
needs them, so a missing toolchain breaks only the runs that use it (exit 3).

Each kind also says which wire it can speak (`authenticities`, `message_ids`;
orchestrator/experiment/wire_fit.py picks the one wire every node present
shares): a bare image only the contract's own, unsigned (go's StrictNoSign +
WithNoAuthor) with first-8-bytes ids; rust-libp2p strict or anonymous;
py-libp2p 0.8.1 strict only, since its Pubsub.publish always sets from and
seqno (strict_signing=False only drops the signature), which StrictNoSign
peers reject.

Every foreign kind takes gossipsub v1.2's parameters as far as its contract
or adapter carries them to the router (orchestrator/routers/foreign_params.py;
go's names: node/interop/go_params.py), and meshes like gossipsub (D_low is its low-water
mark), so the controller's readiness treats it as a gossipsub router.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from node.engine.authenticity import ANONYMOUS, MODES, STRICT
from node.engine.gossipsub import GossipSubRouter
from node.engine.registry import ROUTERS, EngineKind
from node.trace.vocab import TraceType
from orchestrator.errors import BackendUnavailable, InputError
from orchestrator.routers.foreign_params import (
    CONTRACT_TAKES, PY_FIXED, PY_TAKES, RUST_TAKES, ForeignParams, RustLibp2pParams,
)
from node.wire.rpc import FIRST_8_BYTES, MESSAGE_ID_FUNCTIONS

IMAGE_PREFIX = "image:"
CONTRACT = "gossipsub-interop"
OURS = "gossip-testbed"

# What the contract's own lines give (Received Message: DELIVER/DUPLICATE), plus
# what the orchestrator told the node and the converter records for it (JOIN of
# the script's topics at start, PUBLISH_MESSAGE of its scripted publishes).
CONTRACT_EVENTS: tuple[str, ...] = tuple(sorted(t.name for t in (
    TraceType.DELIVER_MESSAGE, TraceType.DUPLICATE_MESSAGE, TraceType.JOIN, TraceType.PUBLISH_MESSAGE)))
# What an adapter's extension lines add (foreign.md B): both adapters see
# topics, peers and GRAFT/PRUNE; only py-libp2p's RPCs can be hooked
# (rust-libp2p exposes no per-RPC event or size: its adapter traces only the
# RPCs that carry IDONTWANT, so its SEND_RPC/RECV_RPC are not whole); our router under the
# contract (node/interop/contract.py) records what py-libp2p's adapter does.
RUST_EVENTS: tuple[str, ...] = tuple(sorted({*CONTRACT_EVENTS, *(t.name for t in (
    TraceType.LEAVE, TraceType.ADD_PEER, TraceType.REMOVE_PEER, TraceType.GRAFT, TraceType.PRUNE))}))
PY_EVENTS: tuple[str, ...] = tuple(sorted({*RUST_EVENTS, TraceType.SEND_RPC.name, TraceType.RECV_RPC.name}))


def foreign_engine(name: str, params: type, takes: frozenset[str], fixed: Mapping[str, Any] | None = None) -> EngineKind:
    """A foreign kind's parameters: `params`' fields, those it cannot be told
    (not in `takes`) fixed at their defaults or at `fixed`'s values."""
    defaults = params()
    pinned = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(params) if f.name not in takes}
    return EngineKind(name, params, GossipSubRouter, {**pinned, "gossip": True, **(fixed or {})}, "D_low")


# What test-plans' initGossipSub carries (go's GossipSubParams); a bare
# image's and the contract stand-in's.
CONTRACT_PARAMS = foreign_engine("contract", ForeignParams, CONTRACT_TAKES)
RUST_PARAMS = foreign_engine("rust-libp2p", RustLibp2pParams, RUST_TAKES)
PY_PARAMS = foreign_engine("py-libp2p", ForeignParams, PY_TAKES, PY_FIXED)
CONTRACT_CARRIES = "test-plans' initGossipSub (go's GossipSubParams)"


@dataclass(frozen=True)
class RouterKind:
    """One router an experiment can name, as the orchestrator needs to know
    it. `foreign`: not one of our engines (it cannot run in the simulator,
    does not shape its own sending, and follows a gossipsub-interop script,
    params.json); `control`: it serves our control endpoint (a bare image
    does not: it publishes by its script only); `trace_events`: what its
    trace records (None: a full go-format trace); `engine`: its parameters
    and mesh facts. `builder`: "module:function" that builds its Docker
    image when needed and returns its tag (called as builder(client,
    reporter)); `process`: "module:function" returning the argv that starts
    it as a process (before `--params FILE --config FILE`); `image`: a bare
    image's name; `authenticities`/`message_ids`: the wire settings it can
    run (node/engine/authenticity.py's modes, node/wire/rpc.py's id functions);
    `validation_delay`: it can hold a topic's messages in validation for a
    while (test-plans' setTopicValidationDelay); `params_from`: what carries
    a foreign router's parameters to it (for the error that refuses one it
    cannot take)."""

    router: str
    implementation: str
    foreign: bool
    control: bool
    trace_events: tuple[str, ...] | None
    engine: EngineKind
    authenticities: tuple[str, ...] = MODES
    message_ids: tuple[str, ...] = MESSAGE_ID_FUNCTIONS
    builder: str | None = None
    process: str | None = None
    image: str | None = None
    validation_delay: bool = True
    params_from: str = ""

    @property
    def dilatable(self) -> bool:
        """Its timers run on the testbed's clock, so time dilation slows them
        down: ours only (a foreign router's run on its own)."""
        return not self.foreign

    @property
    def takes_injection(self) -> bool:
        """It publishes a message handed to it (an injected workload): ours
        only (a foreign router publishes only its own)."""
        return not self.foreign

    @property
    def scripted(self) -> bool:
        """It publishes by its script: the controller only logs its publishes,
        and its script is written for a workload start fixed before it starts."""
        return not self.control

    def build_image(self, client: Any, reporter: Any) -> str:
        """The tag of an adapter's Docker image, built when needed
        (content-hashed: a no-op when nothing changed)."""
        if self.builder is None:
            raise BackendUnavailable(f"{self.router} is no adapter the testbed builds: "
                                     + (f"{self.image} is a bare image, build it yourself with docker build"
                                        if self.image else "it runs in the router image"))
        return str(_target(self.builder, f"the {self.router} image builder")(client, reporter))

    def process_argv(self) -> list[str]:
        """How a foreign node starts on the process backend (before --params/--config)."""
        if self.process is None:
            raise BackendUnavailable(f"router {{image: {self.image}, contract: {CONTRACT}}} runs only on the docker "
                                     "backend: a bare image is no program the process backend can start")
        return list(_target(self.process, f"the {self.router} adapter")())


ADAPTERS: dict[str, RouterKind] = {
    "rust-libp2p": RouterKind(
        "rust-libp2p", "rust-libp2p", True, True, RUST_EVENTS, RUST_PARAMS, authenticities=(STRICT, ANONYMOUS),
        message_ids=(FIRST_8_BYTES,), builder="orchestrator.images.rust:build_rust_image",
        process="orchestrator.images.rust:rust_adapter_command",
        params_from="its adapter (adapters/rust-libp2p/src/params.rs and score.rs)"),
    "py-libp2p": RouterKind(
        "py-libp2p", "py-libp2p", True, True, PY_EVENTS, PY_PARAMS, authenticities=(STRICT,),
        message_ids=(FIRST_8_BYTES,), builder="orchestrator.images.pylibp2p:build_pylibp2p_image",
        process="orchestrator.images.pylibp2p:pylibp2p_adapter_command", validation_delay=False,
        params_from="its adapter (adapters/py-libp2p/script.py) and py-libp2p 0.8.1"),
}


def image_router(image: str) -> str:
    """The router name a `{image: NAME, contract: gossipsub-interop}` group has."""
    return IMAGE_PREFIX + image


# Our engines' kinds, one each: kind_of is asked once per node, and at a
# million nodes a new object per question would be a million objects.
OUR_KINDS: dict[str, RouterKind] = {
    name: RouterKind(name, OURS, False, True, None, engine, validation_delay=engine.validation_delay)
    for name, engine in ROUTERS.items()
}


def kind_of(router: str) -> RouterKind:
    """The kind of any router an experiment can name: one of our engines, an
    adapter, or a bare contract image ("image:NAME"). KeyError otherwise."""
    if router in OUR_KINDS:
        return OUR_KINDS[router]
    if router in ADAPTERS:
        return ADAPTERS[router]
    if router.startswith(IMAGE_PREFIX):
        return RouterKind(router, router, True, False, CONTRACT_EVENTS, CONTRACT_PARAMS, authenticities=(ANONYMOUS,),
                          message_ids=(FIRST_8_BYTES,), image=router[len(IMAGE_PREFIX):], params_from=CONTRACT_CARRIES)
    raise KeyError(router)


def refuse_in_simulator(nodes: Any) -> None:
    """The simulator runs our engines only: InputError naming the first
    node (a NodeSpec) that runs a foreign router."""
    for spec in nodes:
        if kind_of(spec.router).foreign:
            raise InputError(f"the simulator cannot run foreign routers: {spec.name} (group {spec.group!r}) runs "
                             f"{kind_of(spec.router).implementation}; run this file with `testbed run --backend docker` "
                             "(or process, for the adapters)")


def _target(spec: str, what: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"{what} is not available here: {spec} is missing ({exc})") from exc
