"""node/wire/frozen.py: an @frozen class behaves as @dataclass(frozen=True,
slots=True) would, built through its own __init__."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from node.wire.frozen import frozen
from node.wire.rpc import Control, IHave, Message, Prune, Rpc, SubOpts


@frozen
class Point:
    x: int
    y: int = 0
    label: str = "p"


@dataclasses.dataclass(frozen=True, slots=True)
class Reference:
    x: int
    y: int = 0
    label: str = "p"


def test_it_is_a_frozen_slotted_dataclass_as_the_standard_one_is() -> None:
    p, r = Point(1, label="q"), Reference(1, label="q")
    assert dataclasses.is_dataclass(p) and not hasattr(p, "__dict__")
    assert dataclasses.astuple(p) == dataclasses.astuple(r) == (1, 0, "q")
    assert repr(p) == repr(r).replace("Reference", "Point")
    assert p == Point(1, 0, "q") and p != Point(2) and hash(p) == hash(Point(1, 0, "q"))
    assert dataclasses.replace(p, y=5) == Point(1, 5, "q")
    assert pickle.loads(pickle.dumps(p)) == p
    for name in ("x", "y", "label"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(p, name, 9)
    for instance in (p, r):  # no new attributes either (3.11 says so with a TypeError, for both)
        with pytest.raises((AttributeError, TypeError)):
            instance.other = 1  # type: ignore[union-attr]


def test_its_init_takes_the_arguments_the_standard_one_does() -> None:
    assert str(inspect.signature(Point.__init__)) == str(inspect.signature(Reference.__init__))
    assert Point.__init__.__qualname__ == "Point.__init__"
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, 2, "a", 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, z=3)  # type: ignore[call-arg]


def test_a_default_is_the_object_given_not_a_copy() -> None:
    given = object()

    @frozen
    class Holder:
        item: object = given

    assert Holder().item is given and Holder(1).item == 1


def test_a_class_with_its_own_init_keeps_it() -> None:
    msg = Message(b"from", b"data", b"seq", "t")
    assert msg.id == b"fromseq"
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.topic = "u"  # type: ignore[misc]


@pytest.mark.parametrize("body", [
    "items: list = dataclasses.field(default_factory=list)",
    "x: int = dataclasses.field(default=0, kw_only=True)",
    "x: int = dataclasses.field(default=0, init=False)",
])
def test_what_it_does_not_support_is_refused_when_the_class_is_made(body: str) -> None:
    namespace: dict = {"dataclasses": dataclasses, "frozen": frozen}
    with pytest.raises(TypeError, match="only plain fields"):
        exec(f"@frozen\nclass Bad:\n    {body}\n", namespace)


def test_post_init_is_refused() -> None:
    with pytest.raises(TypeError, match="__post_init__"):
        @frozen
        class Checked:
            x: int

            def __post_init__(self) -> None:
                pass


def test_the_wire_types_compare_and_hash_by_value() -> None:
    def make() -> Rpc:
        return Rpc((SubOpts(True, "t"),), (), Control(ihave=(IHave("t", (b"a",)),), prune=(Prune("t", (), 60),)))

    assert make() == make() and hash(make()) == hash(make())
    assert make() != Rpc((SubOpts(False, "t"),))
    assert make().control.prune[0].backoff == 60 and Prune("t").peers == () and Prune("t").backoff is None
