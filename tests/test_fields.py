"""The one field parser: conversions, check order, and each file family's wording."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.errors import InputError
from planner.formats.fields import (
    COUNT,
    JOB_LIST,
    NON_NEGATIVE_FINITE,
    PRICE,
    TABLE_INTEGER,
    TABLE_NUMBER,
    TRACE,
    Where,
    is_blank,
    is_number,
    optional_float,
    optional_int,
    optional_text,
    parse_choice,
    parse_flag,
    parse_float,
    parse_int,
    required_text,
    whole,
)

AT = Where("f.csv", 3)


def message(parse, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        parse(*args, **kwargs)
    assert info.value.path == "f.csv" and info.value.row == 3 and info.value.field == "x"
    return str(info.value).removeprefix("f.csv: row 3: field 'x': ")


def test_conversions():
    assert parse_float(" 2.5 ", AT, "x") == 2.5
    assert parse_float(3, AT, "x") == 3.0 and isinstance(parse_float(3, AT, "x"), float)
    assert parse_int("4", AT, "x") == 4 and parse_int(4.0, AT, "x") == 4 and parse_int(" 7 ", AT, "x") == 7
    assert parse_int(2**60 + 1, AT, "x", strict=True) == 2**60 + 1  # typed ints stay exact
    assert math.isnan(parse_float(float("nan"), AT, "x", finite=False))
    assert optional_float("  ", AT, "x") is None and optional_int(None, AT, "x") is None
    assert optional_int("5", AT, "x", minimum=1) == 5


def test_plain_wording_and_check_order():
    assert message(parse_float, "abc", AT, "x") == "expected a number, got 'abc'"
    assert message(parse_int, "abc", AT, "x") == "expected an integer, got 'abc'"
    assert message(parse_float, "nan", AT, "x") == "is NaN"
    assert message(parse_float, "-inf", AT, "x") == "is infinite"
    assert message(parse_int, "1.5", AT, "x", minimum=2) == "expected an integer, got '1.5'"  # whole before range
    assert message(parse_int, "0", AT, "x", minimum=1) == "must be >= 1, got 0"
    assert message(parse_float, "-1", AT, "x", minimum=0, positive=True) == "must be >= 0, got -1.0"
    assert message(parse_float, "0", AT, "x", minimum=0, positive=True) == "must be positive, got '0'"
    assert message(parse_float, [1], AT, "x") == "expected a number, got [1]"


@pytest.mark.parametrize(
    "call,expected",
    [
        (lambda: parse_float("-2", AT, "x", minimum=0, wording=TABLE_NUMBER), "must not be negative, got -2.0"),
        (lambda: parse_int("inf", AT, "x", wording=TABLE_INTEGER), "expected an integer, got 'inf'"),
        (lambda: parse_float("-5", AT, "x", minimum=0, wording=JOB_LIST), "must be non-negative, got '-5'"),
        (lambda: parse_float("nan", AT, "x", wording=TRACE), "must be finite, got 'nan'"),
        (lambda: parse_int("-1", AT, "x", minimum=0, wording=TRACE), "must be >= 0, got '-1'"),
        (lambda: parse_int("4", AT, "x", strict=True, wording=COUNT), "expected a positive integer, got '4'"),
        (lambda: parse_int(True, AT, "x", strict=True, wording=COUNT), "expected a positive integer, got True"),
        (
            lambda: parse_int(0.0, AT, "x", positive=True, strict=True, wording=COUNT),
            "must be a positive integer, got 0",
        ),
        (
            lambda: parse_float(-1, AT, "x", minimum=0, strict=True, wording=PRICE),
            "expected a non-negative number, got -1",
        ),
        (lambda: parse_float("x", AT, "x", minimum=0, wording=NON_NEGATIVE_FINITE), "expected a number, got 'x'"),
        (
            lambda: parse_float("inf", AT, "x", minimum=0, wording=NON_NEGATIVE_FINITE),
            "must be a non-negative finite number, got 'inf'",
        ),
        (lambda: whole(2.5, "2.5", AT, "x"), "expected an integer, got '2.5'"),
    ],
)
def test_family_wording(call, expected):
    assert message(call) == expected


def test_blank_flags_text_and_choices():
    assert is_blank(None) and is_blank(" ") and not is_blank(0) and not is_blank(float("nan"))
    assert is_blank(float("nan"), nan=True)
    assert is_number(1) and is_number(2.5) and not is_number(True) and not is_number("1")
    assert not is_number(float("inf")) and is_number(float("inf"), finite=False)
    assert parse_flag("Yes", AT, "x") is True and parse_flag("", AT, "x") is False and parse_flag(True, AT, "x")
    assert message(parse_flag, "maybe", AT, "x") == "expected true or false, got 'maybe'"
    assert optional_text("  a ") == "a" and optional_text("") is None
    assert required_text(" a", AT, "x") == "a"
    assert message(required_text, " ", AT, "x") == "is required"
    assert parse_choice(" OK ", AT, "x", ("ok", "oom"), what="status") == "ok"
    assert parse_choice("", AT, "x", ("ok",), what="status") is None
    assert message(parse_choice, "great", AT, "x", ("ok", "oom"), what="status") == (
        "unknown status 'great' (expected one of ok, oom)"
    )


@given(
    st.one_of(
        st.text(alphabet=" \t0123456789.-+eEinfaINFA_x", max_size=12),
        st.floats().map(repr),
        st.integers().map(str),
    ),
    st.sampled_from([None, 0, 1]),
    st.booleans(),
)
def test_optional_float_takes_its_quick_path_to_the_same_answer(text, minimum, positive):
    """Text cells take a quick path; it must agree with the full one, errors included."""
    where = Where("jobs.csv", 3)

    def full():
        if is_blank(text):
            return None
        return parse_float(text, where, "arrival_s", minimum=minimum, positive=positive, wording=JOB_LIST)

    try:
        expected = ("value", full())
    except InputError as exc:
        expected = ("error", str(exc))
    try:
        got = ("value", optional_float(text, where, "arrival_s", minimum=minimum, positive=positive, wording=JOB_LIST))
    except InputError as exc:
        got = ("error", str(exc))
    assert got == expected
