"""One change to typer's help rendering: a flag takes no value, so it shows no type.

typer 0.29 prints `<bool>` beside every flag (`--gavel-compat <bool>`), which reads as if the flag
wanted a value. Flags (options with `is_flag`) get no type column; every other option keeps its
type (`<path>`, `<int range>`, ...).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperOption

# Older typers render types elsewhere and print no `<bool>`: then there is nothing to change.
_original_display_type_rich = getattr(TyperOption, "display_type_rich", None)


def _display_type_rich(self: TyperOption, ctx: Any) -> str | None:
    if getattr(self, "is_flag", False):
        return None
    return _original_display_type_rich(self, ctx)  # type: ignore[misc]


def hide_flag_types() -> None:
    """Install the rendering change (idempotent)."""
    if _original_display_type_rich is not None:
        TyperOption.display_type_rich = _display_type_rich  # type: ignore[method-assign]  # typer has no hook for this
