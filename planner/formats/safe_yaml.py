"""YAML for user files, without the features a hostile file abuses.

Anchors and aliases are refused (an alias bomb expands to billions of nodes),
so are duplicate keys (which would silently keep the last value) and nesting
deeper than `MAX_DEPTH`. Every failure is an InputError naming the file, line and column
("cannot parse: line 3, column 5: mapping values are not allowed here").

Plain scalars are typed by the YAML 1.2 core schema, stricter still about numbers: a number is
ASCII digits with an optional sign, decimal point and exponent (no leading zero on an integer),
`.inf` / `.nan`; `true` / `false` are the only booleans. YAML 1.1's other spellings stay strings,
so the field's type check names them: `1:30` (base 60: 90), `010` (octal: 8), `0x1F`, `1_000`,
`yes` / `no` / `on` / `off`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from planner.errors import InputError
from planner.formats.fields import short
from planner.formats.files import MAX_DEPTH


class _Refused(yaml.MarkedYAMLError):
    """A document PyYAML would load and this loader refuses, at `mark`."""

    def __init__(self, message: str, mark: Any):
        super().__init__(problem=message, problem_mark=mark)


def _at(mark: Any) -> str:
    """'line 3, column 5' (1-based, as an editor counts) of a PyYAML mark."""
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _reason(exc: yaml.YAMLError) -> str:
    """One line: where and what PyYAML (or this loader) found wrong, and the construct it was
    reading when that starts elsewhere: 'line 3, column 5: mapping values are not allowed here'."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem is None:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    problem, mark, context, context_mark = exc.problem, exc.problem_mark, exc.context, exc.context_mark
    reason = f"{_at(mark)}: {problem}" if mark is not None else problem
    if context:
        same_place = context_mark is None or (
            mark is not None and (context_mark.line, context_mark.column) == (mark.line, mark.column)
        )
        where = "" if same_place else f" that starts at {_at(context_mark)}"
        reason += f" ({context}{where})"
    return " ".join(reason.splitlines())  # PyYAML's texts may hold line breaks


_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_CORE = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


class SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader without anchors, aliases, duplicate keys or deep nesting, with the
    YAML 1.2 core schema's booleans and (strict) numbers."""

    _depth = 0
    # YAML 1.1's implicit bool / int / float resolvers out, the core schema's in (own copies:
    # yaml.SafeLoader itself is left as it is).
    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in _CORE]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_yaml_int(self, node: Any) -> int:  # only _INT's spellings reach here untagged
        value = self.construct_scalar(node)
        if not _INT.match(value):  # an explicit !!int tag on another spelling
            raise _Refused(f"not an integer: {short(value)}", node.start_mark)
        return int(value)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused("anchors and aliases (&, *) are not allowed", event.start_mark)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if duplicate:
                    raise _Refused(f"duplicate key {short(key)}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


SafeLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
SafeLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
SafeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+.0123456789"))
SafeLoader.add_constructor("tag:yaml.org,2002:int", SafeLoader.construct_yaml_int)


def load_yaml(text: str, path: object) -> Any:
    """One YAML document, or InputError naming the file."""
    try:
        return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - SafeLoader above is a yaml.SafeLoader
    except yaml.YAMLError as exc:
        raise InputError(f"cannot parse: {_reason(exc)}", path=path) from None
    except RecursionError:
        raise InputError("cannot parse: nested too deeply", path=path) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
