"""User-facing errors: one line, naming the file, row and field at fault."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (file, row, field). The CLI prints it without a traceback."""

    def __init__(self, message: str, *, path: object = None, row: int | None = None, field: str | None = None):
        parts = []
        if path is not None:
            parts.append(str(path))
        if row is not None:
            parts.append(f"row {row}")
        if field is not None:
            parts.append(f"field '{field}'")
        parts.append(message)
        super().__init__(": ".join(parts))
        self.path, self.row, self.field = path, row, field


class SolverError(RuntimeError):
    """The optimisation did not end optimal; no allocation is returned."""
