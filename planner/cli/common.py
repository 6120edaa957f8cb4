"""What every command shares: the consoles, the user-error wrapper, number formats."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from planner.errors import InputError, SolverError
from planner.formats.files import recorded_input_path
from planner.policies.lp import LP_METHODS, dense_ipm
from planner.policies.lp.highs import DENSE_METHOD

# User strings (job ids, file names, reasons) are printed as they are: no rich markup
# ('[bold]a' keeps its brackets) and no emoji codes ('36:x:36' stays text). Styled
# output goes through `styled`, which escapes the user parts it is given.
out = Console(markup=False, emoji=False)
err = Console(stderr=True, markup=False, emoji=False)

# Upper bounds for options whose parser only had a lower one: `inf` (or 1e300) passed and
# crashed later. A round of 30 days and a job of 10^5 hours are beyond any real use.
MAX_ROUND_S = 30 * 86400.0
MAX_DURATION_H = 1e5
# For renderables built with markup elsewhere (planner.report's timeline tables).
marked_out = Console(emoji=False)


def styled(template: str, *values: object) -> Text:
    """Rich markup `template` with each '{}' filled by a value shown literally."""
    return Text.from_markup(template.format(*(escape(str(v)) for v in values)), emoji=False)


def one_line(text: str) -> str:
    """`text` on one line: line breaks and other unprintable characters as escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def progress_bar(label: str, detail: str, *, hidden: bool = False) -> Progress:
    """The commands' bar on stderr: `label` (rich markup), bar, done/total, `detail` (a format
    over the task's fields), elapsed time. Shown on a terminal only: a log gets no bar (nor
    the blank line rich leaves), and --json/--quiet runs pass `hidden`."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(detail),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=hidden or not err.is_terminal,
    )


F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn InputError / SolverError, and an OSError on a file (an --out that is a file
    or read-only, a full disk), into one line 'error: ...' on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (InputError, SolverError) as exc:
            _error(*(getattr(exc, "lines", None) or (str(exc),)))  # a job list's faults: one line each
        except OSError as exc:
            if exc.filename is None:
                raise
            _error(f"{exc.filename}: {exc.strerror or exc}")

    return wrapper  # type: ignore[return-value]


MAX_PROBLEMS_SHOWN = 50  # a table with thousands of bad rows: the first 50 say enough


def report_problems(problems: Sequence[Exception]) -> NoReturn:
    """Every problem of a file, one line each ('error: ...'), then a count; exit code 2."""
    for problem in problems[:MAX_PROBLEMS_SHOWN]:
        err.print(styled("[bold red]error:[/] {}", one_line(str(problem))), highlight=False, soft_wrap=True)
    more = len(problems) - MAX_PROBLEMS_SHOWN
    tail = f" (the first {MAX_PROBLEMS_SHOWN} shown, {more} more)" if more > 0 else ""
    err.print(f"{len(problems)} problem(s){tail}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _error(first: str, *more: str) -> NoReturn:
    err.print(styled("[bold red]error:[/] {}", one_line(first)), highlight=False, soft_wrap=True)
    for line in more:
        err.print(one_line(line), highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


def state_input(inputs: dict | None, name: str, state_path: Path) -> Path | None:
    """The input file (`table`, `cluster`) a state was planned with: as recorded, from here or
    from the state's folder (never through '..'); None when it records none; InputError when
    the file it records is gone."""
    raw = ((inputs or {}).get(name) or {}).get("path")
    if not raw:
        return None
    found = recorded_input_path(raw, Path.cwd()) or recorded_input_path(raw, state_path.parent)
    if found is not None:
        return found
    raise InputError(
        f"the {name} it was planned with ({raw}) is not found; give --{name}", path=state_path, field=f"inputs.{name}"
    )


SOLVER_METHOD_HELP = (
    "LP method: ipm (HiGHS interior point, the reference), simplex (HiGHS, a vertex of the same optimum), or "
    "compiled-ipm (rota's own interior point compiled with numba: several times faster on the small LPs of "
    "a simulation, schedules within 0.5 %% of ipm's on the recorded points; HiGHS solves any LP it does not)."
)


def check_method(method: str) -> None:
    if method not in LP_METHODS:
        raise InputError(
            f"unknown solver method {method!r}; use one of {', '.join(LP_METHODS)}", field="--solver-method"
        )
    if method == DENSE_METHOD and not dense_ipm.available():
        raise InputError(
            f"{DENSE_METHOD} needs numba, and compiled: pip install 'rota[fast]' (or use --solver-method ipm); "
            f"here: {one_line(dense_ipm.why_off())}",
            field="--solver-method",
        )


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.3f}"
