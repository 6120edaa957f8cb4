"""JSON text that people can read and tools can grep, written at the C encoder's speed.

`json.dumps(indent=...)` falls back to the pure-Python encoder and puts every number of every
list on its own line: a 10^5-job schedule took 1.7 s and 39 MB that way. Here a container that
fits on one line (`width` characters) is written on one line by the C encoder, and a larger one
gets one member per line, so a schedule has one line per job, per allocation row and per
assignment (a long list of numbers or ids fills its lines). The value is the same JSON either
way: only the white space differs.
"""

from __future__ import annotations

import json
from typing import Any

_encode = json.JSONEncoder(separators=(", ", ": ")).encode

# A container with more members than this is never tried on one line (encoding it whole only
# to find it too wide would cost as much as writing it).
_FEW = 32


def dumps_readable(value: Any, width: int = 240) -> str:
    """`value` as JSON: containers up to `width` characters on one line, larger ones expanded."""
    return _write(value, 0, width)


def _write(value: Any, depth: int, width: int) -> str:
    if value.__class__ not in _CONTAINERS or not value:
        return _encode(value)
    if len(value) <= _FEW and not _has_large_child(value):
        line = _encode(value)
        if len(line) <= width:
            return line
    pad = " " * (depth + 1)
    if isinstance(value, dict):
        members = [pad + _encode(str(k)) + ": " + _write(v, depth + 1, width) for k, v in value.items()]
        return "{\n" + ",\n".join(members) + "\n" + " " * depth + "}"
    if not any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(_wrapped(value, pad, width)) + "\n" + " " * depth + "]"
    members = [pad + _write(v, depth + 1, width) for v in value]
    return "[\n" + ",\n".join(members) + "\n" + " " * depth + "]"


def _wrapped(scalars: list, pad: str, width: int) -> list[str]:
    """A long list of numbers or strings (job ids): as many per line as fit."""
    lines: list[str] = []
    line: list[str] = []
    used = len(pad)
    for text in map(_encode, scalars):
        if line and used + len(text) + 2 > width:
            lines.append(pad + ", ".join(line))
            line, used = [], len(pad)
        line.append(text)
        used += len(text) + 2
    if line:
        lines.append(pad + ", ".join(line))
    return lines


def _has_large_child(value: dict | list) -> bool:
    for child in value.values() if isinstance(value, dict) else value:
        if child.__class__ in _CONTAINERS and len(child) > _FEW:
            return True
    return False


_CONTAINERS = (dict, list)
