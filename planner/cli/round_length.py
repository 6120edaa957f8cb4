"""`--round-length SECONDS|auto`: the option and its parser, for every command that takes it.

`auto` asks `planner.modes.round_length.choose_round_length` to pick the length from the
job list, cluster, table, policy and restart costs; a number is the length itself.
"""

from __future__ import annotations

from typing import Any, Literal

import typer

from planner.cli.common import MAX_ROUND_S
from planner.errors import InputError
from planner.formats.fields import number_text, short
from planner.rounds.engine import DEFAULT_ROUND_S

AUTO: Literal["auto"] = "auto"
MIN_ROUND_S = 1.0
RoundLength = float | Literal["auto"]


def parse_round_length(text: str, *, field: str = "--round-length") -> RoundLength:
    """'auto', or seconds from MIN_ROUND_S to MAX_ROUND_S; InputError naming `field` otherwise."""
    stripped = text.strip()
    if stripped.lower() == AUTO:
        return AUTO
    value = number_text(stripped)
    if value is not None and MIN_ROUND_S <= value <= MAX_ROUND_S:  # NaN fails both comparisons
        return value
    raise InputError(
        f"expected '{AUTO}' or seconds, at least {MIN_ROUND_S:g} and less than or equal to "
        f"{MAX_ROUND_S:.0f} (30 days), got {short(text)}",
        field=field,
    )


def round_length_option(help: str = "Round length tau in seconds") -> Any:
    """A --round-length option taking seconds or 'auto' (parse it with `parse_round_length`)."""
    return typer.Option(
        f"{DEFAULT_ROUND_S:g}",
        "--round-length",
        metavar="SECONDS|auto",
        help=f"{help}, or 'auto': simulate a few lengths on these jobs and keep the best "
        "(see docs/restarts.md, 'Round length'); default 360.",
    )
