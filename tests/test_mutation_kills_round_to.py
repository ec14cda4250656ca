"""Exact conversion of integers and fractions to float64, the first step of ``round_to`` (mutation testing,
issue 21: ``python scripts/mutation.py round_to``).

Expected values come from an oracle written here on exact rationals (``fractions.Fraction``):

* to nearest even: CPython's ``int / int`` and ``float(Fraction)`` are correctly rounded (to nearest even,
  OverflowError beyond the float64 range, taken as inf);
* to odd (the step that makes a later rounding to a narrow format correct, Boldo & Melquiond 2008): the value
  itself when it is a float64; otherwise, of the two float64 neighbours around it, the one whose significand
  is odd (its bit pattern's last bit is 1); the largest finite float64 for values in [max, 2**1024), inf from
  2**1024 on.  The neighbours come from ``math.nextafter`` (subnormals included).
"""

from __future__ import annotations

import math
import random
import struct
import warnings
from fractions import Fraction

import numpy as np
import pytest

from precision_audit.formats import _ints_to_float64, _rational_to_float, format_names, round_to

MAX = Fraction(*(1.7976931348623157e308).as_integer_ratio())


def _odd(v: float) -> bool:
    return struct.unpack("<q", struct.pack("<d", abs(v)))[0] & 1 == 1


def oracle(x: Fraction, odd: bool) -> float:
    """``x`` as float64, rounded to nearest even or to odd (see the module docstring)."""
    a = abs(x)
    if not odd:
        try:
            v = float(a)
        except OverflowError:
            v = math.inf
    elif a >= 2**1024:
        v = math.inf
    elif a >= MAX:
        v = float(MAX)
    else:
        v = float(a)  # a neighbour or the value itself
        if Fraction(v) != a:
            lo = v if Fraction(v) < a else math.nextafter(v, 0.0)
            hi = math.nextafter(lo, math.inf)
            v = lo if _odd(lo) else hi
    return -v if x < 0 else v


def same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _cases() -> list[Fraction]:
    rng = random.Random(21)
    out = [Fraction(0), Fraction(3, 2), Fraction(-3, 2), Fraction(1, 3), Fraction(-7, 10), Fraction(2**53),
           Fraction(2**53 + 1), Fraction(-(2**53) - 1), Fraction(2**60), Fraction(2**60 + 2**8),
           Fraction(2**60 + 2**7), Fraction(2**60 + 2**7 + 1), Fraction(2**60 + 3 * 2**7), Fraction(2**64 - 1),
           Fraction(-(2**63)), Fraction(2**1024 - 2**970), Fraction(2**1024 - 2**969), Fraction(2**1024),
           Fraction(-(2**1030)), Fraction(1, 2**1074), Fraction(1, 2**1075), Fraction(3, 2**1076),
           Fraction(1, 3 * 2**1070), Fraction(5, 2**1080), Fraction(2**200 + 1, 3)]
    for _ in range(400):
        num = rng.randrange(1, 2 ** rng.randrange(1, 200)) * rng.choice((1, -1))
        den = rng.randrange(1, 2 ** rng.randrange(1, 120))
        out.append(Fraction(num, den) * Fraction(2) ** rng.randrange(-1100, 1000))
    for _ in range(200):  # exact float64 values with odd and even significands, as fractions
        v = rng.uniform(1, 2) * 2.0 ** rng.randrange(-1070, 1020)
        out.append(Fraction(v))
    return out


CASES = _cases()


@pytest.mark.parametrize("odd", [False, True])
def test_rational_to_float_is_correctly_rounded(odd: bool) -> None:
    bad = [(x, _rational_to_float(x.numerator, x.denominator, odd), oracle(x, odd)) for x in CASES
           if not same(_rational_to_float(x.numerator, x.denominator, odd), oracle(x, odd))]
    assert not bad, bad[:3]


@pytest.mark.parametrize("odd", [False, True])
def test_rational_to_float_unreduced_fractions_and_zero(odd: bool) -> None:
    # the contract is num / den for any den > 0, reduced or not; zero is +0.0
    for num, den in ((0, 3), (0, 2**80), (6, 4), (-6, 4), (2**70 * 3, 2**70), (2**60 + 2**8, 1)):
        assert same(_rational_to_float(num, den, odd), oracle(Fraction(num, den), odd)), (num, den)


@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_ints_to_float64_rounds_once(odd: bool, dtype: type) -> None:
    rng = random.Random(5)
    top = 2**64 - 1 if dtype is np.uint64 else 2**63 - 1
    low = 0 if dtype is np.uint64 else -(2**63)
    vals = [0, 1, 2**53, 2**53 + 1, 2**60 + 2**7, 2**60 + 2**7 + 1, 2**60 + 3 * 2**7, 2**60 + 2**8, top, low]
    vals += [rng.randrange(low, top) >> rng.randrange(0, 60) for _ in range(2000)]
    a = np.array(vals, dtype=dtype)
    got = _ints_to_float64(a, odd)
    assert got.dtype == np.float64
    want = [oracle(Fraction(int(v)), odd) for v in a]
    assert all(same(g, w) for g, w in zip(got.tolist(), want))


def test_ints_to_float64_empty_and_small_arrays() -> None:
    for dtype in (np.int64, np.uint64, np.int32, np.int8):
        got = _ints_to_float64(np.array([], dtype=dtype), True)
        assert got.dtype == np.float64 and got.shape == (0,)
        got = _ints_to_float64(np.array([[3, 5]], dtype=dtype), True)
        assert got.dtype == np.float64 and got.tolist() == [[3.0, 5.0]]


def test_object_arrays_hold_any_numbers_and_name_a_bad_element() -> None:
    a = np.array([[Fraction(1, 3), np.int64(7)], [True, 2**60 + 1]], dtype=object)
    got = round_to(a, "float64")
    assert got.shape == (2, 2)
    assert got.tolist() == [[float(Fraction(1, 3)), 7.0], [1.0, float(2**60)]]
    with pytest.raises(TypeError, match=r"^x holds None at index \(1, 0\), which is not a real number$"):
        round_to(np.array([[1, 2], [None, 3]], dtype=object), "bf16")
    with pytest.raises(TypeError, match=r"^x holds 'a' at index 2, which is not a real number$"):
        round_to(np.array([1, 2, "a"], dtype=object), "bf16")
    with pytest.raises(TypeError, match=r"^x holds None, which is not a real number$"):
        round_to(np.array(None, dtype=object), "bf16")


# --------------------------------------------------------------------------- round_to's input conversion

BIG = 2**60 + 2**52 + 1  # float64 would round it to 2**60 + 2**52, a bfloat16 midpoint: a second rounding to even


def test_big_python_ints_among_floats_are_rounded_once():
    # one rounding of BIG to bfloat16 (8 significant bits, spacing 2**53 at 2**60): above the midpoint
    # 2**60 + 2**52, so up to 2**60 + 2**53 (the oracle, rounding the exact integer)
    assert oracle(Fraction(BIG), False) == 2.0**60 + 2.0**52  # float64's nearest value: the bfloat16 midpoint
    for x in ([0.5, BIG], (0.5, BIG), [[0.5], [BIG]], [0.5, -BIG]):
        got = round_to(x, "bf16").reshape(-1).tolist()
        assert got[0] == 0.5 and abs(got[1]) == 2.0**60 + 2.0**53, (x, got)


def test_ml_dtypes_arrays_are_read_as_their_values():
    import ml_dtypes

    for dtype, values in ((ml_dtypes.bfloat16, [1.5, -3.0, 256.0]), (ml_dtypes.float8_e4m3fn, [1.5, -3.0, 448.0]),
                          (ml_dtypes.float4_e2m1fn, [1.5, -3.0, 6.0]), (ml_dtypes.int4, [3.0, -2.0, 7.0])):
        got = round_to(np.array(values, dtype=dtype), "float32")
        assert got.dtype == np.float64 and got.tolist() == values, dtype


@pytest.mark.parametrize("bad", [np.zeros(2, dtype="V2"), np.zeros(2, dtype="V1"), np.zeros(2, dtype="V3"),
                                 np.zeros(2, dtype=[("a", "u1"), ("b", "u1")]), np.zeros(2, dtype=[("a", "f4")])],
                         ids=["V2", "V1", "V3", "struct2", "struct4"])
def test_other_void_arrays_are_refused_by_name(bad):
    with pytest.raises(TypeError, match=r"^x array\(.*\) has dtype .*, not real numbers$"):
        round_to(bad, "bf16")


def rne(x: Fraction, sig: int, max_finite: Fraction) -> float:
    """``x`` rounded to nearest even with ``sig`` significant bits and an unbounded exponent (normal range:
    no value here is subnormal), inf beyond the format's range: exact rationals only."""
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e += 1 if Fraction(2) ** e <= a else 0  # 2**(e-1) <= a < 2**e
    e -= 1 if Fraction(2) ** (e - 1) > a else 0
    ulp = Fraction(2) ** (e - sig)
    q, r = divmod(a, ulp)
    q += 1 if r > ulp / 2 or (r == ulp / 2 and q % 2) else 0
    v = q * ulp
    v_f = math.inf if v > max_finite else float(v)
    return -v_f if x < 0 else v_f


# _round_rne adds c = 2**(binade + 53 - sig) to x: c must stay a finite float64, so a format whose largest
# binade E has E + 54 - sig > 1023 cannot be rounded in float64 (ValueError); at E + 54 - sig = 1023 it can,
# up to its overflow (derived from the float64 layout: 11 exponent bits, bias 1023, 52 stored bits)
@pytest.mark.parametrize("sig", [3, 11])
def test_a_custom_format_at_the_edge_of_float64_rounds_and_one_binade_more_is_refused(sig: int) -> None:
    from precision_audit.formats import Format

    edge = 1023 - 54 + sig
    top = (2 - Fraction(2) ** (1 - sig)) * Fraction(2) ** edge
    fmt = Format(f"edge{sig}", np.float64, None, sig, -14, float(top), "inf")
    ulp = Fraction(2) ** (edge + 1 - sig)
    xs = [top, top + ulp / 2, top + ulp / 2 - Fraction(2) ** (edge - 52), top - ulp / 2, top - ulp / 4,
          Fraction(2) ** edge + ulp / 2, Fraction(2) ** (edge + 1), Fraction(2) ** (edge + 40), Fraction(3, 2),
          1 + Fraction(2) ** -sig, -(top + ulp), MAX, -MAX]  # x + c overflows float64 at +-MAX: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = round_to(np.array([float(x) for x in xs]), fmt)
    want = [rne(Fraction(float(x)), sig, top) for x in xs]
    assert got.tolist() == want
    assert round_to([np.inf, -np.inf], fmt).tolist() == [np.inf, -np.inf]
    wide = Format(f"wide{sig}", np.float64, None, sig, -14, float(top * 2), "inf")
    with pytest.raises(ValueError, match=f"wide{sig} cannot be rounded in float64"):
        round_to([1.0], wide)


# A signaling NaN (a quiet NaN's bit pattern with the quiet bit clear) raises the invalid flag in float64
# arithmetic and in the float64 -> float32 cast (IEEE 754 section 7.2); round_to must still return nan, without
# a warning, in every format (float64 hands the value through, as a copy does)
SNAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0]


@pytest.mark.parametrize("name", format_names())
def test_a_signaling_nan_rounds_to_nan_in_every_format_without_a_warning(name: str) -> None:
    assert math.isnan(SNAN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = round_to(np.array([SNAN, -SNAN, 1.0, np.nan]), name)
    assert np.isnan(got[[0, 1, 3]]).all() and got[2] == 1.0


def test_the_bfloat16_shortcut_through_float32_rounds_once_and_declines_nan() -> None:
    """``_bfloat16_via_float32`` writes the bfloat16 rounding of nan-free float64 input and returns True (the
    fast path is taken), also where float32 rounding lands on a bfloat16 midpoint (1 + 2**-8 + 2**-30: float32
    gives the midpoint 1 + 2**-8, which ties down to 1; once rounded it is 1 + 2**-7); with a nan it returns
    False and leaves ``out`` alone.  Oracle: :func:`rne` on exact fractions."""
    from precision_audit.formats import _bfloat16_via_float32

    top = (2 - Fraction(2) ** -7) * Fraction(2) ** 127
    half = Fraction(2) ** (127 - 8)
    rng = random.Random(16)
    xs = [Fraction(1), 1 + Fraction(2) ** -8 + Fraction(2) ** -30, -(3 + Fraction(2) ** -6 + Fraction(2) ** -40),
          1 + Fraction(2) ** -8, 1 + 3 * Fraction(2) ** -8, top, top + half, top + half - Fraction(2) ** 80, -MAX]
    xs += [Fraction(rng.uniform(1, 2) * 2.0 ** rng.randrange(-120, 128) * rng.choice((1, -1))) for _ in range(300)]
    x = np.array([float(v) for v in xs])
    out = np.full_like(x, 7.0)
    assert _bfloat16_via_float32(x, out, None) is True
    assert out.tolist() == [rne(Fraction(float(v)), 8, top) for v in xs]  # bfloat16: 8 significant bits
    assert [math.copysign(1, v) for v in round_to([0.0, -0.0], "bf16")] == [1, -1]
    x[5] = np.nan
    out = np.full_like(x, 7.0)
    assert _bfloat16_via_float32(x, out, None) is False
    assert (out == 7.0).all()


def test_a_format_too_wide_for_float32_work_is_refused_by_name() -> None:
    """c = 2**(E + 1 + 24 - p) must be a finite float32 (E + 25 - p <= 127, float32's layout: bias 127, 23
    stored bits): E = 110, p = 3 gives 132, refused in float32 but fine in float64."""
    from precision_audit.formats import Format, _rne_params

    fmt = Format("wide32", np.float64, None, 3, -14, 2.0**110, "inf")
    with pytest.raises(ValueError, match="^wide32 cannot be rounded in float32$"):
        _rne_params(fmt, np.float32)
    assert round_to([5.0, 2.0**110, 2.0**111], fmt).tolist() == [5.0, 2.0**110, math.inf]
