"""YAML with line numbers, loaded safely: an experiment file parsed into plain
Python values plus a map from each value's field path to the line it was
written on, so that every validation error can say `file:line: field.path: ...`.

We read libyaml's (or, where it is missing, PyYAML's) event stream and build
the values ourselves, without recursion, instead of using PyYAML's composer and
constructor, because those lose marks, keep the last of two duplicate keys,
recurse once per nesting level and expand aliases without limit. Here every
hostile input ends in one `InputError` naming the file and the line:

- a file over MAX_FILE_BYTES is refused before it is read;
- a byte that is not UTF-8 is reported as FILE:LINE:COL;
- nesting deeper than MAX_DEPTH is refused (no RecursionError, no C stack);
- aliases share the anchored value; the nodes they stand for are counted and
  more than MAX_ALIAS_NODES of them is refused (a "billion laughs" bomb stops
  at once); an alias to a node still being built (a recursive alias) is refused;
- NaN and infinities are refused: every number in a file is finite;
- only the standard scalar tags are read (no `!!python/...`, no custom tags);
- a key written twice in one mapping is an error, while YAML 1.1 merge keys
  work as the spec says: `<<: *base` (or a list of aliases) supplies keys the
  mapping does not write itself, so `<<: *base` then `D: 8` overrides base's D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InputError

Path_ = tuple[str | int, ...]

MAX_FILE_BYTES = 8 * 1024 * 1024  # 8 MiB: a 100,000-node explicit overlay fits
MAX_DEPTH = 64  # an experiment file nests 8 levels deep at most
MAX_ALIAS_NODES = 100_000  # nodes that aliases may stand for, in all

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = frozenset({
    _STR, "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp",
})
_OPEN = object()  # an anchor whose node is still being built


def format_path(path: Path_) -> str:
    """('groups', 1, 'router_params', 'D') -> 'groups[1].router_params.D'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


@dataclass
class Source:
    """Where values came from: the file, each path's line (1-based; a path is
    recorded only where its line differs from its parent's) and the document."""

    file: str
    lines: dict[Path_, int] = field(default_factory=dict)
    document: Any = None

    def line(self, path: Path_) -> int:
        """The line of the value at `path`, or of its closest written parent."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), 1)

    def project(self, path: Path_) -> Path_:
        """`path` as the file spells it: a step the document does not take is
        left out, so a shorthand reads as written (a single workload is
        `workload`, not `workload[0]`; `select: [a, b]` is `select[1]`, not
        `select.nodes[1]`). Steps past what the file wrote are kept."""
        out: list[str | int] = []
        node = self.document
        for part in path:
            if node is None:
                out.append(part)
            elif isinstance(node, dict) and isinstance(part, str):
                out.append(part)
                node = node.get(part)
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                out.append(part)
                node = node[part]
        return tuple(out)

    def error(self, path: Path_, message: str) -> InputError:
        where = self.project(path)
        return InputError(f"{self.file}:{self.line(where)}: {format_path(where)}: {message}")


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, Source]:
    """The document in `path` as plain values, and its Source. Raises
    InputError for a missing, oversized or undecodable file or bad YAML."""
    name = display or str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(
            f"{name}: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, the limit for an experiment file"
        )
    return parse_yaml(decode(data, name), name)


def decode(data: bytes, name: str) -> str:
    """UTF-8 text (a BOM is allowed); a bad byte is reported as FILE:LINE:COL."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            f"{name}:{line}:{col}: not UTF-8: byte 0x{data[exc.start]:02x} cannot start or continue a character"
        ) from None


def parse_yaml(text: str, name: str) -> tuple[Any, Source]:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise InputError(f"{name}: the text is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    builder = _Builder(Source(name))
    loader = _Loader(text)
    try:
        while True:
            try:
                event = loader.get_event()
            except yaml.reader.ReaderError as exc:
                line = text.count("\n", 0, exc.position) + 1
                col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
                raise InputError(
                    f"{name}:{line}:{col}: not valid YAML: character #x{exc.character:04x} is not allowed "
                    "(control characters cannot appear in YAML)"
                ) from None
            except yaml.MarkedYAMLError as exc:
                mark = exc.problem_mark or exc.context_mark
                line = mark.line + 1 if mark is not None else 1
                raise InputError(f"{name}:{line}: not valid YAML: {exc.problem or exc}") from None
            except yaml.YAMLError as exc:
                raise InputError(f"{name}: not valid YAML: {exc}") from None
            if event is None or isinstance(event, yaml.StreamEndEvent):
                break
            builder.feed(event, loader)
    finally:
        loader.dispose()
    return builder.result(), builder.source


@dataclass
class _Frame:
    """A mapping or sequence being built."""

    value: Any
    path: Path_
    line: int
    anchor: str | None
    key: str | None = None  # a mapping's key waiting for its value
    key_line: int = 0
    merge: bool = False  # the waiting key is `<<`
    merged: list[tuple[dict, int]] = field(default_factory=list)
    size: int = 1


class _Builder:
    """Turns parser events into values, one event at a time."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.stack: list[_Frame] = []
        self.anchors: dict[str, Any] = {}
        self.alias_nodes = 0
        self.documents = 0
        self.root: Any = None
        self.has_root = False
        self.plain_tags: dict[str, str] = {}

    def fail(self, line: int, path: Path_, message: str) -> InputError:
        return InputError(f"{self.source.file}:{line}: {format_path(path)}: {message}")

    def result(self) -> Any:
        if not self.has_root:
            raise InputError(f"{self.source.file}:1: the file is empty; expected a mapping of experiment fields")
        return self.root

    def feed(self, event: yaml.Event, loader: Any) -> None:
        kind = type(event)
        line = event.start_mark.line + 1
        if kind is yaml.ScalarEvent:
            self.scalar(event, line, loader)  # type: ignore[arg-type]
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            self.start(event, line)  # type: ignore[arg-type]
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            self.end()
        elif kind is yaml.AliasEvent:
            self.alias(event, line)  # type: ignore[arg-type]
        elif kind is yaml.DocumentStartEvent:
            self.documents += 1
            if self.documents > 1:
                raise InputError(f"{self.source.file}:{line}: expected one YAML document, found a second one ('---')")

    def tag_of(self, event: yaml.ScalarEvent, loader: Any) -> str:
        """The scalar's tag: written, or resolved from a plain scalar's text
        (memoised: an experiment file repeats its node names many times)."""
        if event.tag not in (None, "!"):
            return event.tag
        if not event.implicit[0]:
            return _STR  # quoted, or the non-specific tag "!"
        tag = self.plain_tags.get(event.value)
        if tag is None:
            tag = self.plain_tags[event.value] = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        return tag

    # -- where the next value goes

    def child_path(self, line: int) -> tuple[Path_, int]:
        """The path and line of the value about to be added."""
        if not self.stack:
            return (), line
        top = self.stack[-1]
        if isinstance(top.value, list):
            return (*top.path, len(top.value)), line
        return (*top.path, "<<" if top.merge else top.key), top.key_line  # type: ignore[return-value]

    def record(self, path: Path_, line: int) -> None:
        parent = self.stack[-1].line if self.stack else 0
        if line != parent:
            self.source.lines[path] = line

    def add(self, value: Any, size: int, line: int) -> None:
        if not self.stack:
            self.root, self.has_root = value, True
            return
        top = self.stack[-1]
        top.size += size
        if isinstance(top.value, list):
            top.value.append(value)
            return
        if top.merge:
            sources = value if isinstance(value, list) else [value]
            if not sources or not all(isinstance(m, dict) for m in sources):
                raise self.fail(line, (*top.path, "<<"), "a merge key (<<) takes a mapping or a list of mappings")
            top.merged.extend((m, top.key_line) for m in sources)
        else:
            top.value[top.key] = value
        top.key, top.merge = None, False

    # -- events

    def start(self, event: yaml.CollectionStartEvent, line: int) -> None:
        is_map = isinstance(event, yaml.MappingStartEvent)
        self.key_expected(False, line, ())
        path, line = self.child_path(line)
        if len(self.stack) >= MAX_DEPTH:
            raise InputError(
                f"{self.source.file}:{line}: {format_path(path[:8])}...: nested more than {MAX_DEPTH} levels "
                "deep; an experiment file needs far fewer"
            )
        if event.tag not in (None, "!", _MAP if is_map else _SEQ):
            raise self.fail(line, path, f"unsupported tag {event.tag!r}")
        self.record(path, line)
        if event.anchor is not None:
            self.anchors[event.anchor] = _OPEN
        self.stack.append(_Frame({} if is_map else [], path, line, event.anchor))

    def end(self) -> None:
        frame = self.stack.pop()
        value = frame.value
        if frame.merged:
            # keys written in the mapping win; among merged mappings the first wins
            out: dict[str, Any] = {}
            for m, key_line in frame.merged:
                for k, v in m.items():
                    if k not in out and k not in value:
                        out[k] = v
                        if key_line != frame.line:
                            self.source.lines.setdefault((*frame.path, k), key_line)
            out.update(value)
            value = out
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (value, frame.size)
        self.add(value, frame.size, frame.line)

    def key_expected(self, is_key_event: bool, line: int, path: Path_) -> bool:
        """True when the next scalar is a mapping key; a collection where a key
        belongs is refused."""
        if not self.stack or isinstance(self.stack[-1].value, list) or self.stack[-1].key is not None:
            return False
        if self.stack[-1].merge:
            return False
        if not is_key_event:
            raise self.fail(line, self.stack[-1].path, "a mapping key must be a plain string")
        return True

    def scalar(self, event: yaml.ScalarEvent, line: int, loader: Any) -> None:
        top = self.stack[-1] if self.stack else None
        if top is not None and self.key_expected(True, line, top.path):
            self.key(top, event, line, loader)
            return
        path, line = self.child_path(line)
        value = self.construct(event, line, path, loader)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self.record(path, line)
        self.add(value, 1, line)

    def key(self, top: _Frame, event: yaml.ScalarEvent, line: int, loader: Any) -> None:
        if event.tag is None and self.tag_of(event, loader) == _MERGE:
            if top.merged:
                raise self.fail(line, (*top.path, "<<"), "duplicate merge key (<<); merge several mappings with <<: [*a, *b]")
            top.merge, top.key_line = True, line
            return
        key = event.value
        child = (*top.path, key)
        if key in top.value:
            raise self.fail(line, child, "duplicate key (written twice in the same mapping)")
        if event.anchor is not None:
            self.anchors[event.anchor] = (key, 1)
        top.key, top.key_line = key, line
        self.record(child, line)

    def construct(self, event: yaml.ScalarEvent, line: int, path: Path_, loader: Any) -> Any:
        tag = self.tag_of(event, loader)
        if tag not in _SCALAR_TAGS:
            raise self.fail(line, path, f"unsupported tag {tag!r}")
        if tag == _STR:
            return event.value
        try:
            value = loader.yaml_constructors[tag](loader, yaml.ScalarNode(tag, event.value))
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise self.fail(line, path, f"cannot read value {event.value!r}: {exc}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(line, path, f"expected a finite number, got {event.value!r}")
        return value

    def alias(self, event: yaml.AliasEvent, line: int) -> None:
        top = self.stack[-1] if self.stack else None
        if top is not None and self.key_expected(True, line, top.path):
            raise self.fail(line, top.path, "a mapping key must be a plain string, not an alias")
        path, line = self.child_path(line)
        found = self.anchors.get(event.anchor)
        if found is None:
            raise self.fail(line, path, f"unknown alias *{event.anchor} (no anchor &{event.anchor} before it)")
        if found is _OPEN:
            raise self.fail(line, path, f"recursive alias *{event.anchor}: it refers to a node that contains it")
        value, size = found
        self.alias_nodes += size
        if self.alias_nodes > MAX_ALIAS_NODES:
            raise self.fail(
                line, path, f"aliases expand to more than {MAX_ALIAS_NODES} nodes (an alias bomb?); "
                "write the values out or use fewer aliases",
            )
        self.record(path, line)
        self.add(value, size, line)
