"""YAML with positions: every value keeps its file, line and key path, so errors can point at them.

PyYAML silently keeps the last of two duplicate keys; here a duplicate is an error. Scalars keep YAML's own
types, so an unquoted `12.10` arrives as a float and is refused where a string is expected.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError


@dataclass(frozen=True)
class Node:
    """A YAML value with where it came from."""

    value: Any  # dict[str, Node] | list[Node] | str | int | float | bool | None
    file: str
    line: int
    path: str

    def error(self, message: str) -> UserError:
        where = f"{self.path}: " if self.path else ""
        return UserError(f"{self.file}:{self.line}: {where}{message}")

    # Typed accessors. Each refuses the wrong type with an error naming this node.

    def mapping(self, required: set[str] | frozenset[str] = frozenset(),
                optional: set[str] | frozenset[str] = frozenset()) -> dict[str, Node]:
        """The mapping's entries; with `required`/`optional`, unknown and missing keys are errors."""
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {describe(self.value)}")
        entries: dict[str, Node] = self.value
        if required or optional:
            allowed = set(required) | set(optional)
            for key, node in entries.items():
                if key not in allowed:
                    raise node.error(f"unknown key '{key}'{did_you_mean(key, allowed)}")
            for key in sorted(set(required) - entries.keys()):
                raise self.error(f"missing key '{key}'")
        return entries

    def seq(self) -> list[Node]:
        if not isinstance(self.value, list):
            raise self.error(f"expected a list, got {describe(self.value)}")
        items: list[Node] = self.value
        return items

    def text(self, pattern: re.Pattern[str] | None = None, what: str = "value") -> str:
        value = self.value
        if not isinstance(value, str):
            hint = "; quote it" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
            raise self.error(f"expected a string, got {describe(value)}{hint}")
        if pattern is not None and pattern.fullmatch(value) is None:
            raise self.error(f"invalid {what} {value!r}: must match {pattern.pattern}")
        return value

    def opt_text(self, pattern: re.Pattern[str] | None = None, what: str = "value") -> str | None:
        return None if self.value is None else self.text(pattern, what)

    def integer(self) -> int:
        if not isinstance(self.value, int) or isinstance(self.value, bool):
            raise self.error(f"expected an integer, got {describe(self.value)}")
        value: int = self.value
        return value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, got {describe(self.value)}")
        value: bool = self.value
        return value

    def text_list(self, pattern: re.Pattern[str] | None = None, what: str = "value") -> tuple[str, ...]:
        items = tuple(item.text(pattern, what) for item in self.seq())
        seen: set[str] = set()
        for item, node in zip(items, self.seq(), strict=True):
            if item in seen:
                raise node.error(f"duplicate {what} {item!r}")
            seen.add(item)
        return items

    def keyed(self, pattern: re.Pattern[str], what: str) -> Iterator[tuple[str, Node]]:
        """Entries of a mapping whose keys are data (names, versions), each key checked."""
        for key, node in self.mapping().items():
            if pattern.fullmatch(key) is None:
                raise node.error(f"invalid {what} {key!r}: must match {pattern.pattern}")
            yield key, node


def describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def did_you_mean(word: str, choices: Iterable[str], listing: str = "") -> str:
    """The closest choice, else every choice; past a dozen, `listing` (where to see them) instead."""
    ordered = sorted(choices)
    close = difflib.get_close_matches(word, ordered, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{close[0]}'?"
    if listing and len(ordered) > 12:
        return f"; {listing}"
    return f"; expected one of: {', '.join(ordered)}"


def load(path: Path) -> Node:
    """Parse a YAML file into Nodes; syntax errors, duplicate keys and unreadable files are UserErrors."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{name}: no such file; pass --matrix FILE or set IMGBUILD_MATRIX") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{name}: cannot read: {exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        context = ""
        if exc.context and exc.context_mark and exc.context_mark.line + 1 != line:
            context = f" ({exc.context.replace('while parsing', 'in')} started at line {exc.context_mark.line + 1})"
        raise UserError(f"{name}:{line}: YAML syntax error: {exc.problem}{context}") from None
    if root is None:
        raise UserError(f"{name}:1: the file is empty")
    return _convert(root, name, "", yaml.SafeLoader(""))


def _convert(node: yaml.Node, file: str, path: str, constructor: yaml.SafeLoader) -> Node:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)  # resolves `<<` merge keys
        entries: dict[str, Node] = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node)
            key_line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                hint = "; quote it" if isinstance(key, (int, float)) else ""
                raise UserError(f"{file}:{key_line}: {path or 'top level'}: key {key!r} must be a string{hint}")
            child = f"{path}.{key}" if path else key
            if key in entries:
                raise UserError(f"{file}:{key_line}: {child}: duplicate key (first at line {entries[key].line})")
            entries[key] = _convert(value_node, file, child, constructor)
        return Node(entries, file, line, path)
    if isinstance(node, yaml.SequenceNode):
        items = [_convert(item, file, f"{path}[{i}]", constructor) for i, item in enumerate(node.value)]
        return Node(items, file, line, path)
    return Node(constructor.construct_object(node), file, line, path)
