"""Field parsing for every file rota reads: a cell or JSON value becomes a number,
flag, string or choice, or an InputError naming the file, row and field.

Every document parses its values here. The checks run in one order: convert,
NaN, infinity, whole number, minimum, positive. Files of different families have
always worded some messages differently (a trace says "must be finite", a table
"is NaN"); each family's wording is one `Wording` below, so existing messages,
tests and docs stay as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from planner.errors import InputError

T = TypeVar("T", bound=str)


@dataclass(frozen=True)
class Where:
    """The file and (for row-by-row files) the row a value comes from."""

    path: object = None
    row: int | None = None

    def error(self, field: str | None, message: str) -> InputError:
        return InputError(message, path=self.path, row=self.row, field=field)


@dataclass(frozen=True)
class Wording:
    """Messages for each failed check. Templates may use {value!r} (the value as
    given), {number} (as parsed; an int for whole numbers), {minimum}, {expected}."""

    unparsable: str = "expected {expected}, got {value!r}"
    nan: str = "is NaN"
    infinite: str = "is infinite"
    fractional: str = "expected an integer, got {value!r}"
    below: str = "must be >= {minimum}, got {number}"
    not_positive: str = "must be positive, got {value!r}"


def _same(message: str) -> Wording:
    return Wording(message, message, message, message, message, message)


# The wording of each family of files.
PLAIN = Wording()
TABLE_NUMBER = Wording(below="must not be negative, got {number}")  # throughput table values
TABLE_INTEGER = Wording(infinite=PLAIN.fractional)  # throughput table counts: infinity is "not an integer"
JOB_LIST = Wording(below="must be non-negative, got {value!r}")  # job lists (CSV / JSON)
TRACE = Wording(  # Gavel .trace lines
    nan="must be finite, got {value!r}",
    infinite="must be finite, got {value!r}",
    below="must be >= {minimum}, got {value!r}",
)
COUNT = replace(  # a cluster's GPU counts
    _same("expected a positive integer, got {value!r}"), not_positive="must be a positive integer, got {number}"
)
PRICE = _same("expected a non-negative number, got {value!r}")  # a cluster's prices
NON_NEGATIVE_FINITE = replace(  # progress reports
    _same("must be a non-negative finite number, got {value!r}"), unparsable=PLAIN.unparsable
)

# Bounds on magnitudes (a typo such as 1e308 steps must not make a simulation run forever).
MAX_STEPS = 1e12  # a job's total steps
MAX_TIME_S = 1e10  # a clock, arrival or duration in seconds (~317 years)
MAX_ID = 253  # characters of a job id

TRUE_WORDS = ("1", "true", "yes", "y")
FALSE_WORDS = ("", "0", "false", "no", "n")


# The one number syntax of text cells: ASCII digits with an optional sign, decimal point and
# exponent (and the words nan / inf / infinity, which the finite checks then refuse). Python's
# float() alone also takes '1_000', full-width and Arabic-Indic digits and Unicode white space.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_SPACE = " \t\r\n"  # the white space a cell may carry around a number (ASCII only)

# How much of a value an error message quotes.
SHORT = 80


def short(value: Any, limit: int = SHORT) -> str:
    """repr(value), cut to about `limit` characters with its full length said (a 1 MB name
    must not come back as a 1 MB error)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as text"
    return f"{text[: limit - 3]}... ({size})"


class _Quoted:
    """A value in a message template: {value!r} quotes it shortened."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return short(self.value)

    def __str__(self) -> str:
        text = str(self.value)
        return text if len(text) <= SHORT else short(text)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def number_text(text: str) -> float | None:
    """The number a text cell spells in the one accepted syntax, else None."""
    text = text.strip(_SPACE)
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return float(text)
    except (ValueError, OverflowError):  # pragma: no cover - the pattern admits only float() syntax
        return None


# --------------------------------------------------------------------------- predicates


def is_blank(value: Any, *, nan: bool = False) -> bool:
    """None or a blank string. NaN counts only with nan=True: a table reports
    a NaN cell as NaN, not as missing."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return nan and isinstance(value, float) and math.isnan(value)


def is_number(value: Any, *, finite: bool = True) -> bool:
    """A JSON number (int or float, not bool), finite unless finite=False."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not finite or math.isfinite(value)


# --------------------------------------------------------------------------- numbers


def _message(template: str, value: Any, number: Any = None, minimum: Any = None, expected: str = "") -> str:
    return template.format(value=_Quoted(value), number=number, minimum=minimum, expected=expected)


def _convert(value: Any, where: Where, field: str | None, *, strict: bool, expected: str, wording: Wording) -> float:
    if strict:  # a typed (JSON / YAML) value: strings do not count as numbers
        if not is_number(value, finite=False):
            raise where.error(field, _message(wording.unparsable, value, expected=expected))
        return float(value)
    if isinstance(value, str):  # a text cell: only the one number syntax (see _NUMBER)
        number = number_text(value)
        if number is None:
            raise where.error(field, _message(wording.unparsable, value, expected=expected))
        return number
    if not is_number(value, finite=False):  # a typed value: true / false are not numbers
        raise where.error(field, _message(wording.unparsable, value, expected=expected))
    try:
        return float(value)
    except OverflowError:  # an int beyond float's range
        raise where.error(field, _message(wording.unparsable, value, expected=expected)) from None


def check_range(
    number: float,
    value: Any,
    where: Where,
    field: str | None,
    *,
    minimum: float | None = None,
    positive: bool = False,
    wording: Wording = PLAIN,
) -> None:
    """`number` (parsed from `value`) is at least `minimum` and, if asked, above 0."""
    if minimum is not None and number < minimum:
        raise where.error(field, _message(wording.below, value, number, minimum))
    if positive and number <= 0:
        raise where.error(field, _message(wording.not_positive, value, number, minimum))


def whole(number: float, value: Any, where: Where, field: str | None, *, wording: Wording = PLAIN) -> int:
    """`number` (parsed from `value`) as an int, or an error if it has a fraction."""
    if not number.is_integer():
        raise where.error(field, _message(wording.fractional, value, number))
    return int(number)


def _number(
    value: Any,
    where: Where,
    field: str | None,
    *,
    integer: bool,
    minimum: float | None,
    positive: bool,
    finite: bool,
    strict: bool,
    wording: Wording,
) -> float | int:
    expected = "an integer" if integer else "a number"
    number: float | int = _convert(value, where, field, strict=strict, expected=expected, wording=wording)
    if finite and math.isnan(number):
        raise where.error(field, _message(wording.nan, value, number))
    if finite and math.isinf(number):
        raise where.error(field, _message(wording.infinite, value, number))
    if integer:  # a typed int stays exact (float() would round one above 2**53)
        number = value if strict and isinstance(value, int) else whole(number, value, where, field, wording=wording)
    check_range(number, value, where, field, minimum=minimum, positive=positive, wording=wording)
    return number


def parse_float(
    value: Any,
    where: Where,
    field: str | None,
    *,
    minimum: float | None = None,
    positive: bool = False,
    finite: bool = True,
    strict: bool = False,
    wording: Wording = PLAIN,
) -> float:
    """A number: text is stripped and converted (strict: only a JSON number counts);
    NaN and infinity are refused unless finite=False."""
    return float(
        _number(
            value,
            where,
            field,
            integer=False,
            minimum=minimum,
            positive=positive,
            finite=finite,
            strict=strict,
            wording=wording,
        )
    )


def parse_int(
    value: Any,
    where: Where,
    field: str | None,
    *,
    minimum: int | None = None,
    positive: bool = False,
    strict: bool = False,
    wording: Wording = PLAIN,
) -> int:
    """A whole number ('4', 4 and 4.0 are 4; strict: not '4')."""
    number = _number(
        value,
        where,
        field,
        integer=True,
        minimum=minimum,
        positive=positive,
        finite=True,
        strict=strict,
        wording=wording,
    )
    return int(number)


def optional_float(
    value: Any,
    where: Where,
    field: str,
    *,
    minimum: float | None = None,
    positive: bool = False,
    wording: Wording = PLAIN,
) -> float | None:
    """None for a blank value, else `parse_float`."""
    if value.__class__ is str:
        # The common cases, a blank cell or a finite number in range, in one step: job lists
        # have 10^5 rows of a few numbers each.
        text = value.strip(_SPACE)
        if not text:
            return None
        number = number_text(text)
        if number is not None:
            if number - number == 0 and (minimum is None or number >= minimum) and (not positive or number > 0):
                return number
    if is_blank(value):
        return None
    return parse_float(value, where, field, minimum=minimum, positive=positive, wording=wording)


def optional_int(
    value: Any, where: Where, field: str, *, minimum: int | None = None, wording: Wording = PLAIN
) -> int | None:
    """None for a blank value, else `parse_int`."""
    if is_blank(value):
        return None
    return parse_int(value, where, field, minimum=minimum, wording=wording)


# --------------------------------------------------------------------------- flags and text


def parse_flag(value: Any, where: Where, field: str) -> bool:
    """true/false, yes/no, y/n, 1/0 (any case); blank is false."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise where.error(field, f"expected true or false, got {short(value)}")


def optional_text(value: Any) -> str | None:
    """The stripped text, or None when blank."""
    return None if is_blank(value) else str(value).strip()


def required_text(value: Any, where: Where, field: str) -> str:
    """The stripped text; blank is an error ('is required')."""
    if is_blank(value):
        raise where.error(field, "is required")
    return str(value).strip()


def parse_choice(value: Any, where: Where, field: str, choices: Sequence[T], *, what: str) -> T | None:
    """One of `choices` (case-insensitive, returned as spelled there); None when blank."""
    if is_blank(value):
        return None
    text = str(value).strip().lower()
    for choice in choices:
        if text == choice:
            return choice
    raise where.error(field, f"unknown {what} {short(text)} (expected one of {', '.join(choices)})")


def versioned_mapping(data: Any, path: object, *, fmt: str, items: str, keys: Iterable[str], what: str) -> dict:
    """The top level of a versioned YAML / JSON document (a cluster, a catalogue): a mapping of the
    known `keys` whose `format` (optional) is `fmt` and whose `items` maps at least one name to a spec."""
    if not isinstance(data, dict):
        raise InputError(f"top level must be a mapping with '{items}'", path=path)
    known = ("format", *keys, items)
    unknown = set(data) - set(known)
    if unknown:
        raise InputError(f"unknown key (expected {', '.join(known)})", path=path, field=sorted(map(str, unknown))[0])
    given = data.get("format", fmt)
    if given != fmt:
        raise InputError(f"unsupported format {short(given)} (expected {fmt})", path=path, field="format")
    mapping = data.get(items)
    if not isinstance(mapping, dict) or not mapping:
        raise InputError(f"must map at least one {what} name to its spec", path=path, field=items)
    return mapping
