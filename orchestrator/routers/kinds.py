"""Foreign router kinds: the one registry that says, for every router an
experiment can name that is not one of our engines, what implementation it
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

Every foreign kind takes the gossipsub parameters go has names for
(orchestrator/go_params.py) and meshes like gossipsub (D_low is its low-water
mark), so the controller's readiness treats it as a gossipsub router.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from node.engine.authenticity import ANONYMOUS, MODES, STRICT
from node.engine.gossipsub import GossipSubParams, GossipSubRouter
from node.engine.registry import ROUTERS, RouterKind
from node.trace.vocab import TraceType
from orchestrator.errors import BackendUnavailable, InputError
from node.interop.go_params import unmapped_defaults
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
# (rust-libp2p exposes no per-RPC event or size); our router under the
# contract (node/interop/contract.py) records what py-libp2p's adapter does.
RUST_EVENTS: tuple[str, ...] = tuple(sorted({*CONTRACT_EVENTS, *(t.name for t in (
    TraceType.LEAVE, TraceType.ADD_PEER, TraceType.REMOVE_PEER, TraceType.GRAFT, TraceType.PRUNE))}))
PY_EVENTS: tuple[str, ...] = tuple(sorted({*RUST_EVENTS, TraceType.SEND_RPC.name, TraceType.RECV_RPC.name}))

# The parameters of every foreign kind: gossipsub's, with what go cannot be
# told fixed at the defaults.
PARAMS_KIND = RouterKind("foreign", GossipSubParams, GossipSubRouter, {"gossip": True, **unmapped_defaults()}, "D_low")


@dataclass(frozen=True)
class ForeignKind:
    """`builder`: "module:function" that builds the Docker image when needed
    and returns its tag (called as builder(client, reporter)); `process`:
    "module:function" returning the argv that starts it as a process (before
    `--params FILE --config FILE`), None for docker only; `image`: a bare
    image's name; `authenticities`/`message_ids`: the wire settings it can
    run (node/engine/authenticity.py's modes, node/wire/rpc.py's id functions);
    `validation_delay`: it can hold a topic's messages in validation for a
    while (test-plans' setTopicValidationDelay)."""

    router: str
    implementation: str
    control: bool
    trace_events: tuple[str, ...]
    builder: str | None = None
    process: str | None = None
    image: str | None = None
    authenticities: tuple[str, ...] = (STRICT,)
    message_ids: tuple[str, ...] = (FIRST_8_BYTES,)
    validation_delay: bool = True

    @property
    def bare(self) -> bool:
        return not self.control


ADAPTERS: dict[str, ForeignKind] = {
    "rust-libp2p": ForeignKind(
        "rust-libp2p", "rust-libp2p", True, RUST_EVENTS,
        builder="orchestrator.images.rust:build_rust_image", process="orchestrator.images.rust:rust_adapter_command",
        authenticities=(STRICT, ANONYMOUS)),
    "py-libp2p": ForeignKind(
        "py-libp2p", "py-libp2p", True, PY_EVENTS,
        builder="orchestrator.images.pylibp2p:build_pylibp2p_image",
        process="orchestrator.images.pylibp2p:pylibp2p_adapter_command", validation_delay=False),
}


def image_router(image: str) -> str:
    """The router name a `{image: NAME, contract: gossipsub-interop}` group has."""
    return IMAGE_PREFIX + image


def is_foreign(router: str) -> bool:
    return router in ADAPTERS or router.startswith(IMAGE_PREFIX)


def is_bare(router: str) -> bool:
    """A bare contract image: no control endpoint, script only."""
    return router.startswith(IMAGE_PREFIX)


def foreign_kind(router: str) -> ForeignKind:
    if router in ADAPTERS:
        return ADAPTERS[router]
    if router.startswith(IMAGE_PREFIX):
        image = router[len(IMAGE_PREFIX):]
        return ForeignKind(router, router, False, CONTRACT_EVENTS, image=image, authenticities=(ANONYMOUS,))
    raise KeyError(router)


def router_kind(router: str) -> RouterKind:
    """Parameters and mesh facts of any router an experiment can name."""
    if router in ROUTERS:
        return ROUTERS[router]
    return PARAMS_KIND


def implementation(router: str) -> str:
    """topology.json's "implementation" of a node running `router`."""
    return foreign_kind(router).implementation if is_foreign(router) else OURS


def wire_abilities(router: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(authenticities, message-id functions) `router` can run: every one
    for our engines."""
    if is_foreign(router):
        kind = foreign_kind(router)
        return kind.authenticities, kind.message_ids
    return MODES, MESSAGE_ID_FUNCTIONS


def delays_validation(router: str) -> bool:
    """Whether a node running `router` can take a topic validation delay."""
    if is_foreign(router):
        return foreign_kind(router).validation_delay
    return ROUTERS[router].validation_delay


def trace_events(router: str) -> list[str] | None:
    """topology.json's "trace_events": None for a full go-format trace."""
    return list(foreign_kind(router).trace_events) if is_foreign(router) else None


def refuse_in_simulator(nodes: Any) -> None:
    """The simulator runs our engines only: InputError naming the first
    node (a NodeSpec) that runs a foreign router."""
    for spec in nodes:
        if is_foreign(spec.router):
            raise InputError(f"the simulator cannot run foreign routers: {spec.name} (group {spec.group!r}) runs "
                             f"{implementation(spec.router)}; run this file with `testbed run --backend docker` "
                             "(or process, for the adapters)")


def refuse_outside_simulator(nodes: Any, backend: str) -> None:
    """Routers and adversaries only the simulator runs: InputError naming
    the first node (a NodeSpec) that runs one."""
    for spec in nodes:
        if spec.adversary is not None:
            raise InputError(f"the {backend} backend cannot run adversaries yet: {spec.name} (group {spec.group!r}) "
                             "is a sybil, and only the simulator hosts them (docs/adversaries.md); use `testbed sim`")
        kind = ROUTERS.get(spec.router)
        if kind is not None and kind.simulator_only:
            raise InputError(f"the {backend} backend cannot run {spec.router} yet: {spec.name} (group {spec.group!r}) "
                             f"runs it, and only the simulator speaks its wire (docs/episub.md); use `testbed sim`")


def _target(spec: str, what: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise BackendUnavailable(f"{what} is not available here: {spec} is missing ({exc})") from exc


def build_foreign_image(router: str, client: Any, reporter: Any) -> str:
    """The tag of `router`'s Docker image, built when needed (content-hashed:
    a no-op when nothing changed)."""
    kind = foreign_kind(router)
    if kind.builder is None:
        raise BackendUnavailable(f"{router} is a bare image ({kind.image}): build it yourself with docker build")
    return str(_target(kind.builder, f"the {router} image builder")(client, reporter))


def process_argv(router: str) -> list[str]:
    """How a foreign node starts on the process backend (before --params/--config)."""
    kind = foreign_kind(router)
    if kind.process is None:
        raise BackendUnavailable(f"router {{image: {kind.image}, contract: {CONTRACT}}} runs only on the docker "
                                 "backend: a bare image is no program the process backend can start")
    return list(_target(kind.process, f"the {router} adapter")())
