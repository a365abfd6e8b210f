"""YAML with line numbers: an experiment file parsed into plain Python values
plus a map from each value's field path to the line it was written on, so that
every validation error can say `file:line: field.path: what was expected`.

We walk PyYAML's composed node graph ourselves (safe loader only) instead of
constructing Python objects directly, because the constructor loses marks and
silently keeps the last of two duplicate keys; here a duplicate key is an error.
Anchors, aliases and merge keys (`<<: *base`) work as usual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InputError

Path_ = tuple[str | int, ...]


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
    """Where values came from: the file and each path's line (1-based)."""

    file: str
    lines: dict[Path_, int] = field(default_factory=dict)
    key_lines: dict[Path_, int] = field(default_factory=dict)

    def line(self, path: Path_) -> int:
        """The line of the value at `path`, or of its closest written parent."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), 1)

    def key_line(self, path: Path_) -> int:
        return self.key_lines.get(tuple(path)) or self.line(path)

    def error(self, path: Path_, message: str, *, key: bool = False) -> InputError:
        line = self.key_line(path) if key else self.line(path)
        return InputError(f"{self.file}:{line}: {format_path(path)}: {message}")


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, Source]:
    """The document in `path` as plain values, and its Source. Raises
    InputError for a missing file or a YAML syntax error."""
    name = display or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{name}: cannot read: {exc}") from None
    return parse_yaml(text, name)


def parse_yaml(text: str, name: str) -> tuple[Any, Source]:
    source = Source(name)
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 1
            what = exc.problem or str(exc)
            raise InputError(f"{name}:{line}: not valid YAML: {what}") from None
        except yaml.YAMLError as exc:
            raise InputError(f"{name}: not valid YAML: {exc}") from None
        if node is None:
            raise InputError(f"{name}:1: the file is empty; expected a mapping of experiment fields")
        value = _walk(loader, node, (), source)
    finally:
        loader.dispose()
    return value, source


def _walk(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, source: Source) -> Any:
    source.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)  # resolves `<<` merge keys
        except yaml.MarkedYAMLError as exc:
            raise source.error(path, f"bad merge key: {exc.problem}") from None
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise InputError(
                    f"{source.file}:{key_node.start_mark.line + 1}: {format_path(path)}: "
                    "a mapping key must be a plain string"
                )
            key = loader.construct_object(key_node)
            if not isinstance(key, str):
                key = str(key)
            child = (*path, key)
            if key in out:
                raise InputError(
                    f"{source.file}:{key_node.start_mark.line + 1}: {format_path(child)}: "
                    "duplicate key (written twice in the same mapping)"
                )
            source.key_lines[child] = key_node.start_mark.line + 1
            # A value spanning several lines (a block mapping) starts on the line
            # after its key; report the key's line for it, as a person reads it.
            source.lines[child] = key_node.start_mark.line + 1
            out[key] = _walk(loader, value_node, child, source)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(loader, item, (*path, i), source) for i, item in enumerate(node.value)]
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise source.error(path, f"cannot read value: {exc.problem}") from None
