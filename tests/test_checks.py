"""Tests of the shared helpers: context-length parsing/validation and Row.to_dict.

Expected values are closed-form (k = 2**10, M = 2**20, G = 2**30; the bound
2**53 is the largest n such that float64 holds every integer 0..n, IEEE 754
binary64 p = 53) or plain JSON facts (RFC 8259 has no NaN/Infinity).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precision_audit.checks import (
    MAX_LENGTH,
    ArgumentTypeError,
    check_callable,
    check_choice,
    check_flag,
    check_instance,
    check_int,
    check_length,
    check_lengths,
    check_names,
    check_number,
    check_recipes,
    parse_length,
)
from precision_audit.rows import Row
from precision_audit.rope.schedules import check_schedule


# ---------------------------------------------------------------------------
# parse_length
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, want",
    [
        ("8192", 8192),
        ("8k", 8 * 2**10),
        ("32K", 32 * 2**10),
        ("1M", 2**20),
        ("1m", 2**20),
        (" 4k ", 4 * 2**10),
        ("\t16K\n", 16 * 2**10),
        ("1G", 2**30),
        ("1", 1),
        (8192, 8192),
        (np.int64(4096), 4096),
        (2**53, 2**53),  # the largest allowed length
        ("8388608G", 2**53),  # 2**23 * 2**30
    ],
)
def test_parse_length_valid(text, want: int) -> None:
    got = parse_length(text)
    assert got == want and type(got) is int


@pytest.mark.parametrize(
    "text",
    ["0", "-5", "1.5k", "abc", "", "   ", "8kb", "k", "1e3", "0x10", "+5", "8 k k", "0k",
     2**53 + 1, "8388609G", 0, -1, True, False, None, 1.5],
)
def test_parse_length_errors(text) -> None:
    with pytest.raises(ValueError) as info:
        parse_length(text)
    msg = str(info.value)
    assert "length" in msg
    if isinstance(text, str) and text.strip() not in ("0", "0k", "8388609G", "-5"):  # -5: "length -5 must be..."
        assert repr(text) in msg  # the bad input is named


def test_parse_length_too_large_names_the_bound() -> None:
    with pytest.raises(ValueError, match=r"2\*\*53"):
        parse_length(2**53 + 1)
    with pytest.raises(ValueError, match=r"2\*\*53"):
        parse_length("8388609G")


def test_parse_length_bool_is_not_a_length() -> None:
    # bool is an int subclass; True must not silently become length 1.
    for b in (True, False, np.bool_(True)):
        with pytest.raises(ValueError):
            parse_length(b)


@settings(max_examples=200, deadline=None, database=None)
@given(n=st.integers(1, 2**33), suffix=st.sampled_from(["", "k", "K", "m", "M", "g", "G"]),
       pad=st.sampled_from(["", " ", "  ", "\t"]))
def test_parse_length_roundtrip(n: int, suffix: str, pad: str) -> None:
    mult = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[suffix.lower()]
    text = f"{pad}{n}{suffix}{pad}"
    if n * mult <= 2**53:
        assert parse_length(text) == n * mult
    else:
        with pytest.raises(ValueError):
            parse_length(text)


# ---------------------------------------------------------------------------
# check_length / check_lengths
# ---------------------------------------------------------------------------
def test_max_length_is_float64_exact_integer_bound() -> None:
    # IEEE binary64: every integer up to 2**53 is exact, 2**53 + 1 is not.
    assert MAX_LENGTH == 2**53
    assert float(2**53) == 2**53 and float(2**53 + 1) != 2**53 + 1


@pytest.mark.parametrize("bad", [0, -3, 2**53 + 1, 1.5, math.nan, math.inf, "8", None, True])
def test_check_length_errors(bad) -> None:
    with pytest.raises(ValueError):
        check_length(bad)


def test_check_length_accepts_integers() -> None:
    assert check_length(1) == 1
    assert check_length(np.int32(7)) == 7 and type(check_length(np.int32(7))) is int
    assert check_length(2**53) == 2**53


@pytest.mark.parametrize(
    "given_, want",
    [
        ([8192, 1024, 8192, 4096, 1024], (1024, 4096, 8192)),
        ((3, 1, 2), (1, 2, 3)),
        ([5], (5,)),
        (5, (5,)),
        (np.int64(5), (5,)),
        (np.array([4, 2, 4]), (2, 4)),
        (iter([9, 3, 9]), (3, 9)),
        (range(3, 0, -1), (1, 2, 3)),
    ],
)
def test_check_lengths_sorts_and_dedups(given_, want) -> None:
    got = check_lengths(given_)
    assert got == want
    assert isinstance(got, tuple) and all(type(v) is int for v in got)


@pytest.mark.parametrize("bad", [[], (), [1, 0], [4, -1], [True], True, [2**53 + 1], "8k"])
def test_check_lengths_errors(bad) -> None:
    with pytest.raises(ValueError):
        check_lengths(bad)


# ---------------------------------------------------------------------------
# argument validators: a wrong type is an ArgumentTypeError (TypeError and ValueError), a wrong value a
# ValueError; every message names the argument and shows the value
# ---------------------------------------------------------------------------
def test_argument_type_error_is_both() -> None:
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)


@pytest.mark.parametrize("fn, bad, error, match", [
    (lambda v: check_int(v, "chunk", minimum=1), 0, ValueError, r"^chunk 0 must be at least 1$"),
    (lambda v: check_int(v, "chunk", maximum=8), 9, ValueError, r"^chunk 9 must be at most 8$"),
    (lambda v: check_int(v, "chunk"), True, ArgumentTypeError, r"^chunk True must be an integer$"),
    (lambda v: check_int(v, "chunk"), 2.0, ArgumentTypeError, r"^chunk 2.0 must be an integer$"),
    (lambda v: check_int(v, "chunk"), None, ArgumentTypeError, r"^chunk None must be an integer$"),
    (lambda v: check_number(v, "tolerance", positive=True), math.nan, ValueError, r"^tolerance nan must be a finite"),
    (lambda v: check_number(v, "tolerance", positive=True), 0, ValueError, r"^tolerance 0 must be a finite number > 0"),
    (lambda v: check_number(v, "tolerance", positive=True), -1, ValueError, r"^tolerance -1 must"),
    (lambda v: check_number(v, "tolerance"), math.inf, ValueError, r"^tolerance inf must be a finite number$"),
    (lambda v: check_number(v, "tolerance"), 2**1100, ValueError, r"^tolerance 2\*\*1100 is beyond float64's range"),
    (lambda v: check_number(v, "tolerance"), 3**700, ValueError, r"^tolerance \d+\.\.\. is beyond float64's range"),
    (lambda v: check_number(v, "tolerance"), "8", ArgumentTypeError, r"^tolerance '8' must be a finite number$"),
    (lambda v: check_number(v, "tolerance"), np.bool_(True), ArgumentTypeError, r"^tolerance np.True_ must"),
    (lambda v: check_flag(v, "exact"), 1, ArgumentTypeError, r"^exact 1 must be True or False$"),
    (lambda v: check_choice(v, "engine", ("numpy", "torch")), "jax", ValueError, r"^unknown engine 'jax'; valid: numpy"),
    (lambda v: check_choice(v, "engine", ("numpy",)), ["numpy"], ArgumentTypeError, r"^engine \['numpy'\] must be a str"),
    (lambda v: check_callable(v, "progress"), "print", ArgumentTypeError, r"^progress 'print' must be callable"),
    (lambda v: check_instance(v, int, "n", "a count"), "3", ArgumentTypeError, r"^n '3' must be a int, not str \(a count\)$"),
    (lambda v: check_names(v, "dtypes", "format name"), None, ArgumentTypeError, r"^dtypes None must be a format name"),
    (lambda v: check_names(v, "dtypes", "format name"), b"bf16", ArgumentTypeError, r"^dtypes b'bf16' must be"),
    (lambda v: check_names(v, "dtypes", "format name"), [], ValueError, r"^no format name given \(dtypes \[\] is empty\)$"),
])
def test_validators_reject_with_the_name_and_value(fn, bad, error, match: str) -> None:
    with pytest.raises(error, match=match):
        fn(bad)


def test_validators_pass_good_values_through() -> None:
    assert check_int(np.int16(3), "n") == 3 and type(check_int(np.int16(3), "n")) is int
    assert check_number(np.float32(0.5), "x", positive=True) == 0.5 and check_number(2**60, "x") == 2.0**60
    assert check_number(math.inf, "x", finite=False) == math.inf
    assert check_flag(np.bool_(False), "f") is False
    assert check_choice("torch", "engine", ("numpy", "torch")) == "torch"
    assert check_callable(None, "progress") is None and check_callable(print, "progress") is print
    assert check_names("bf16", "dtypes", "format name") == ["bf16"]
    assert check_names(("bf16", "fp16"), "dtypes", "format name") == ["bf16", "fp16"]
    assert check_names(3, "dtypes", "format name", int) == [3]


class _Recipe:
    """Stands in for a recipe class: the validators take the class as an argument."""


@pytest.mark.parametrize("bad, error, match", [
    ("fp32", ArgumentTypeError, r"^recipes 'fp32' is text, not a _Recipe or an iterable of _Recipe \(use preset"),
    (None, ArgumentTypeError, r"^recipes None is not a _Recipe or an iterable of _Recipe"),
    (8, ArgumentTypeError, r"^recipes 8 is not a _Recipe"),
    ({"fp32": 1}, ArgumentTypeError, r"^recipes \{'fp32': 1\} is not a _Recipe"),
    (["fp32"], ArgumentTypeError, r"^recipes\[0\] 'fp32' is not a _Recipe"),
    ([_Recipe(), None], ArgumentTypeError, r"^recipes\[1\] None is not a _Recipe"),
    ([], ValueError, r"^no recipe given \(recipes \[\] is empty\)$"),
    (iter([]), ValueError, r"^no recipe given"),
])
def test_check_recipes(bad, error, match: str) -> None:
    with pytest.raises(error, match=match):
        check_recipes(bad, _Recipe, hint="use preset(name, dtype)")


def test_check_recipes_and_schedule_pass_good_values_through() -> None:
    from precision_audit.rope.schedules import RopeSchedule

    r = _Recipe()
    assert check_recipes(r, _Recipe) == [r] and check_recipes((r, r), _Recipe) == [r, r]
    assert check_recipes(iter([r]), _Recipe) == [r]
    s = RopeSchedule(head_dim=8)
    assert check_schedule(s) is s
    for bad in (None, "llama", {"head_dim": 8}, 8):
        with pytest.raises(TypeError, match=rf"^schedule {re.escape(repr(bad))} must be a RopeSchedule, not "):
            check_schedule(bad)
    with pytest.raises(ValueError, match="^sched None must be a RopeSchedule"):
        check_schedule(None, "sched")


# ---------------------------------------------------------------------------
# Row.to_dict
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Inner(Row):
    a: float
    b: object


@dataclasses.dataclass(frozen=True)
class Sample(Row):
    length: int
    fmt: str
    ratio: float
    worst: float
    neg: float
    missing: float
    count: object
    scale: object
    half: object
    flag: object
    arr: object
    nested: object
    pairs: object
    inner: Inner


def _sample() -> Sample:
    return Sample(
        length=8192,
        fmt="bfloat16",
        ratio=0.109375,
        worst=math.inf,
        neg=-math.inf,
        missing=math.nan,
        count=np.int64(896),
        scale=np.float32(0.5),
        half=np.float16(np.inf),
        flag=np.bool_(True),
        arr=np.array([1.0, np.nan, -np.inf, 2.5]),
        nested={"k": [np.float64(np.nan), (np.int32(3), np.uint8(4))]},
        pairs=((1, 2.0), (np.int16(-1), float("nan"))),
        inner=Inner(a=math.nan, b=np.float64(0.25)),
    )


def _walk(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from _walk(x)
    else:
        yield v


def test_row_to_dict_is_strict_json() -> None:
    d = _sample().to_dict()
    # RFC 8259 JSON has no NaN / Infinity: allow_nan=False must not raise.
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text) == d
    # every leaf is a plain Python scalar (numpy scalars converted)
    for leaf in _walk(d):
        assert leaf is None or type(leaf) in (int, float, bool, str), (leaf, type(leaf))


def test_row_to_dict_values() -> None:
    d = _sample().to_dict()
    assert d["length"] == 8192 and d["fmt"] == "bfloat16" and d["ratio"] == 0.109375
    assert d["worst"] is None and d["neg"] is None and d["missing"] is None  # nan/inf -> None
    assert d["count"] == 896 and type(d["count"]) is int
    assert d["scale"] == 0.5 and type(d["scale"]) is float
    assert d["half"] is None  # float16 inf -> None
    assert d["flag"] is True
    assert d["arr"] == [1.0, None, None, 2.5]
    assert d["nested"] == {"k": [None, [3, 4]]}
    assert d["pairs"] == [[1, 2.0], [-1, None]]
    assert d["inner"] == {"a": None, "b": 0.25}
    assert list(d) == [f.name for f in dataclasses.fields(Sample)]  # field order kept


def test_row_to_dict_does_not_mutate_row() -> None:
    s = _sample()
    s.to_dict()
    assert math.isnan(s.missing) and isinstance(s.arr, np.ndarray) and np.isnan(s.arr[1])
