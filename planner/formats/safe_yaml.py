"""YAML for user files, without the features a hostile file abuses.

Anchors and aliases are refused (an alias bomb expands to billions of nodes),
so are duplicate keys (which would silently keep the last value) and nesting
deeper than `MAX_DEPTH`. Every failure is an InputError naming the file and line.
"""

from __future__ import annotations

from typing import Any

import yaml

from planner.errors import InputError
from planner.formats.files import MAX_DEPTH


class _Refused(yaml.YAMLError):
    def __init__(self, message: str, mark: Any):
        line = f" (line {mark.line + 1})" if mark is not None else ""
        super().__init__(f"{message}{line}")


class SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader without anchors, aliases, duplicate keys or deep nesting."""

    _depth = 0

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
                    raise _Refused(f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, path: object) -> Any:
    """One YAML document, or InputError naming the file."""
    try:
        return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - SafeLoader above is a yaml.SafeLoader
    except yaml.YAMLError as exc:
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
    except RecursionError:
        raise InputError("cannot parse: nested too deeply", path=path) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"cannot parse: {str(exc).splitlines()[0]}", path=path) from None
