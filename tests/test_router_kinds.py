"""Every router an experiment can name has one RouterKind, and its answers
agree with what the rest of the testbed knows about that router: our
engines (node/engine/registry.py), the adapters (adapters/), and bare
gossipsub-interop images."""

from __future__ import annotations

import pytest

from node.engine.authenticity import ANONYMOUS, MODES
from node.engine.registry import ROUTERS
from node.errors import BackendUnavailable
from node.wire.rpc import FIRST_8_BYTES, MESSAGE_ID_FUNCTIONS
from orchestrator.routers.foreign_params import ForeignParams
from orchestrator.routers.kinds import ADAPTERS, OURS, image_router, kind_of


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_our_engines_are_ours(router):
    kind = kind_of(router)
    assert (kind.foreign, kind.control, kind.scripted) == (False, True, False)
    assert kind.dilatable and kind.takes_injection
    assert kind.implementation == OURS and kind.trace_events is None and kind.engine is ROUTERS[router]
    assert (kind.authenticities, kind.message_ids) == (MODES, MESSAGE_ID_FUNCTIONS)
    with pytest.raises(BackendUnavailable):
        kind.build_image(None, None)  # ours run in the router image


@pytest.mark.parametrize("router", sorted(ADAPTERS))
def test_adapters_are_foreign_with_a_control_endpoint(router):
    kind = kind_of(router)
    assert (kind.foreign, kind.control, kind.scripted) == (True, True, False)
    assert not kind.dilatable and not kind.takes_injection
    assert issubclass(kind.engine.params, ForeignParams) and kind.builder and kind.process and kind.params_from
    assert kind.trace_events is not None and "DELIVER_MESSAGE" in kind.trace_events


def test_a_bare_image_is_scripted_and_unsigned():
    kind = kind_of(image_router("example/go-node:1"))
    assert (kind.foreign, kind.control, kind.scripted) == (True, False, True)
    assert kind.image == "example/go-node:1" and kind.builder is None and kind.process is None
    assert (kind.authenticities, kind.message_ids) == ((ANONYMOUS,), (FIRST_8_BYTES,))
    with pytest.raises(BackendUnavailable, match="bare image"):
        kind.build_image(None, None)
    with pytest.raises(BackendUnavailable, match="only on the docker backend"):
        kind.process_argv()


def test_an_unknown_router_has_no_kind():
    with pytest.raises(KeyError):
        kind_of("no-such-router")
