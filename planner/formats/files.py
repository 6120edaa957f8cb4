"""Reading user files with one-line errors (writes live in planner/atomic.py)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.errors import InputError


def read_json(path: str | os.PathLike) -> Any:
    """Parsed JSON, or InputError naming the file (missing, unreadable, bad JSON)."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", path=path) from None


def file_digest(path: str | os.PathLike) -> str:
    """'sha256:<hex>' of a file's bytes: schedules and state record which inputs they came from."""
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def input_records(inputs: Mapping[str, str | os.PathLike] | None) -> dict[str, dict[str, str | None]]:
    """name -> {path, digest} of each input file, as schedules and state record them
    (digest None: the file cannot be read now, e.g. moved since the state was saved)."""
    out: dict[str, dict[str, str | None]] = {}
    for name, path in (inputs or {}).items():
        try:
            out[name] = {"path": str(path), "digest": file_digest(path)}
        except OSError:
            out[name] = {"path": str(path), "digest": None}
    return out
