"""What every command shares: the consoles, the user-error wrapper, number formats."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from planner.errors import InputError, SolverError
from planner.policies.lp import LP_METHODS

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn InputError / SolverError into 'error: ...' on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (InputError, SolverError) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def check_method(method: str) -> None:
    if method not in LP_METHODS:
        raise InputError(
            f"unknown solver method {method!r}; use one of {', '.join(LP_METHODS)}", field="--solver-method"
        )


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.3f}"
