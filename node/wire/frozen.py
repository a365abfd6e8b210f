"""`@frozen`: a frozen, slotted dataclass whose instances are built in about
half the time the standard decorator's take.

The wire's RPCs and the engines' trace events and outputs are built a few
times for every event the simulator handles (tens of millions in a large
run). A frozen dataclass's generated `__init__` stores each field through
`object.__setattr__`, looked up and called once per field, to get past the
`__setattr__` that makes it frozen. The `__init__` made here stores each
field through its slot's own descriptor instead, which never meets that
`__setattr__`: the instance is as frozen, equal, hashed and printed as
before, and built in about half the time (1.3 against 2.4 us for a trace
event), which makes the simulator 1.13-1.19 times as fast with the same
traces (docs/simulator.md, "Performance").

On PyPy the standard decorator's `__init__` costs next to nothing (the JIT
sees through `object.__setattr__`) and the descriptor calls made here would
cost a quarter of a microsecond, so there it is the standard decorator.

Only what these value types use is supported: positional-or-keyword fields
with plain defaults; a class with its own `__init__` keeps it.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)  # type checkers see the dataclass it makes
def frozen(cls: type[T]) -> type[T]:
    """`@dataclass(frozen=True, slots=True)`, with a cheaper `__init__`."""
    if sys.implementation.name == "pypy":  # its JIT removes the setattr calls; the stores here would stay
        return dataclasses.dataclass(frozen=True, slots=True)(cls)
    own_init = "__init__" in cls.__dict__
    made: Any = dataclasses.dataclass(frozen=True, slots=True, init=not own_init)(cls)
    if own_init:
        return made
    if hasattr(made, "__post_init__"):
        raise TypeError(f"@frozen {cls.__qualname__}: __post_init__ is not supported")
    params, stores = [], []
    namespace: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    for i, f in enumerate(dataclasses.fields(made)):
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"@frozen {cls.__qualname__}.{f.name}: only plain fields with plain defaults")
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            namespace[f"_default_{i}"] = f.default
            params.append(f"{f.name}=_default_{i}")
        namespace[f"_store_{i}"] = made.__dict__[f.name].__set__
        stores.append(f"    _store_{i}(self, {f.name})")
        annotations[f.name] = f.type
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(stores or ["    pass"]) + "\n"
    exec(source, namespace)  # as dataclasses itself makes __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{made.__qualname__}.__init__"
    init.__module__ = made.__module__
    init.__annotations__ = {**annotations, "return": None}
    made.__init__ = init
    return made
