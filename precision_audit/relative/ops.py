"""Per-operation rounding: each arithmetic step of a bucket formula rounded to its format, as real code does.

Values are float64 arrays holding numbers of the working format.  ``*`` and
``/`` are formed in float64 and rounded once more: that double rounding is
innocuous for formats of at most 25 significant bits (Figueroa, "When is
double rounding innocuous?", SIGNUM 1995: 53 >= 2p + 2), so the result is the
correctly rounded one.  ``log`` is correctly rounded too: numpy's float64 log
(within a few float64 ulps of the true value) decides every element whose
rounding is the same anywhere in a +-16 float64 ulp interval around it, and
the rare rest is evaluated in mpmath at 200 bits.  torch's float32 log kernel
is faithful, not correctly rounded, so real code can differ from this model
by one float32 ulp of the log where the value lies that close to a rounding
boundary (the tests compare such cases within a derived bound).

>>> log_in(np.array([1.0, 2.0, 8.0]), "bfloat16").tolist()  # log 2 = 0.693147..., log 8 = 2.07944...
[0.0, 0.69140625, 2.078125]
>>> div_in(np.array([1.0]), np.array([3.0]), "float16").tolist() == [float(np.float16(1 / 3))]
True
"""

from __future__ import annotations

import math  # noqa: F401  (the doctests use it)
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from ..formats import Format, get_format, round_to

__all__ = ["F64", "div_in", "log_in", "mul_in", "truncate"]

F64 = npt.NDArray[np.float64]
_MARGIN_ULPS = 16.0  # numpy's float64 log is within a few ulps; anything nearer a boundary goes to mpmath
_MP_BITS = 200


def mul_in(a: F64, b: F64, fmt: str | Format) -> F64:
    """``a * b`` rounded to ``fmt`` (a and b hold ``fmt`` values).

    >>> mul_in(np.array([3.0]), np.array([7.0]), "float8_e4m3fn").tolist()  # 21: a tie of 20 and 22, to even
    [20.0]
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return round_to(np.multiply(a, b), fmt)


def div_in(a: F64, b: F64, fmt: str | Format) -> F64:
    """``a / b`` rounded to ``fmt`` (a and b hold ``fmt`` values; x / 0 gives inf or nan as IEEE says)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return round_to(np.divide(a, b), fmt)


def _mp_log(x: float, fmt: Format) -> float:
    """log(x) for one positive finite x, correctly rounded to ``fmt`` through mpmath."""
    import mpmath

    with mpmath.workprec(_MP_BITS):
        sign, man, exp, _ = mpmath.log(mpmath.mpf(x))._mpf_  # man_exp drops the sign
    return float(round_to((-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp), fmt)[()])


def log_in(x: F64, fmt: str | Format) -> F64:
    """Natural log of each element, correctly rounded to ``fmt`` (0 -> -inf, inf -> inf, < 0 or nan -> nan).

    >>> log_in(np.array([0.0, math.inf, -1.0]), "float16").tolist()
    [-inf, inf, nan]
    """
    f = get_format(fmt)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(x)
    out = round_to(y, f)
    if f.name == "float64":
        return out
    finite = np.isfinite(y) & (x != 1.0)  # log 1 = 0 exactly
    margin = _MARGIN_ULPS * np.spacing(np.abs(np.where(finite, y, 1.0)))
    with np.errstate(invalid="ignore"):
        lo, hi = round_to(y - margin, f), round_to(y + margin, f)
    for i in np.flatnonzero(finite & (lo != hi)):
        out.flat[i] = _mp_log(float(x.flat[i]), f)
    return out


def truncate(x: F64) -> F64:
    """``.to(torch.long)``: toward zero; a non-finite value has no integer (nan: the bucket is undefined).

    >>> truncate(np.array([2.9, -2.9, math.inf])).tolist()
    [2.0, -2.0, nan]
    """
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(x), np.trunc(x), np.nan)
