"""The RoPE oracle and wrap where a small slip would still pass the 1e-15 checks (mutation testing, issue 21:
``python scripts/mutation.py "rope oracle + wrap"``).

Expected values: mpmath at 200 bits (``m * theta`` with the float64 ``theta`` taken exactly, reduced mod 2*pi,
then rounded once to float64), and float64 facts (float32 and long double inputs hold values float64 holds).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest

from precision_audit.rope import exact_angles, wrap
from precision_audit.rope.oracle import _oracle_into, _split
from precision_audit.rope.schedules import RopeSchedule

mpmath.mp.prec = 200
MP_2PI = 2 * mpmath.pi


def mp_wrapped(m: int, theta: float) -> float:
    """m * theta mod 2*pi in [-pi, pi], correctly rounded to float64 (mpmath, 200 bits)."""
    v = mpmath.mpf(m) * mpmath.mpf(theta)
    return float(v - MP_2PI * mpmath.nint(v / MP_2PI))


# (position, frequency index of the default schedule: head_dim 128, base 10000): near 2**26 the low part of the
# two-term product, m * lo, reaches ~0.25 rad, so the period k must come from p1 + p2 (p1 - p2 or p1 alone picks
# the neighbouring period near +-pi, and the wrap back costs the third term of 2*pi: ~2.4e-16 rad, one ulp).
# At these points the oracle is correctly rounded.
CORRECTLY_ROUNDED = [(67104866, 2), (67104870, 3), (67104871, 11), (67104876, 8), (67104878, 6), (67104878, 18),
                     (67104890, 2), (67104893, 6)]


def test_oracle_correctly_rounded_near_the_period_boundary():
    theta = RopeSchedule().inv_freq()
    for m, i in CORRECTLY_ROUNDED:
        got = float(exact_angles([m], theta[i : i + 1])[0, 0])
        assert got == mp_wrapped(m, float(theta[i])), (m, i)


# theta built so that m * theta lies within ~1e-8 rad of an odd multiple of pi: the rounded sum p1 + p2 then
# puts the reduced angle r just beyond +pi or -pi (|r| - pi ~ 1e-9), and only the final wrap brings it back.
BEYOND_PI = [(56062411, 0.8050028674344644), (34314547, 0.8079406814419283), (54701576, 0.28580140220832134),
             (42880005, 0.38336899036239835)]
BELOW_MINUS_PI = [(49286491, 0.5153256340331284), (66421793, 0.05393077889522173)]


def oracle_into(m: float, theta: float) -> float:
    """The engine's in-place oracle on one (position, frequency), in its own scratch rows."""
    hi, lo = _split(np.array([theta]))
    w = SimpleNamespace(**{name: np.empty((1, 1)) for name in ("p1", "p2", "k", "t", "ex")})
    _oracle_into(np.array([m], dtype=np.float64), hi, lo, w)
    return float(w.ex[0, 0])


@pytest.mark.parametrize("m, theta", BEYOND_PI + BELOW_MINUS_PI)
def test_oracle_wraps_angles_rounded_past_pi(m, theta):
    # the angle is an odd multiple of pi to ~1e-8: |result| is pi to that accuracy, inside [-pi, pi]
    exact = mp_wrapped(m, theta)
    assert abs(abs(exact) - math.pi) < 1e-7
    for got in (float(exact_angles([m], [theta])[0, 0]), oracle_into(float(m), theta)):
        assert -math.pi <= got <= math.pi
        assert abs(got - exact) < 1e-15


def test_oracle_into_wraps_each_side_on_its_own():
    # one point beyond +pi and one below -pi, each alone in its block: each needs the wrap by itself
    for m, theta in (BEYOND_PI[0], BELOW_MINUS_PI[0]):
        assert abs(oracle_into(float(m), theta) - mp_wrapped(m, theta)) < 1e-15


def test_oracle_computes_in_float64_whatever_the_input_type():
    # float32 frequencies and long double positions are converted to float64 first (exact: every value they
    # hold here is a float64), so the angles are the float64 oracle's, bit for bit (near 2**26 a long double
    # product would round differently in ~2 % of the entries, where x86 has an 80-bit long double)
    theta32 = np.array([0.7498942, 0.1, 1e-4], dtype=np.float32)
    m = [0, 1, 12345, 2**20 + 3, 2**26 - 1]
    got = exact_angles(m, theta32)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, exact_angles(m, theta32.astype(np.float64)))
    theta = RopeSchedule().inv_freq()
    ms = np.arange(2**26 - 200, 2**26)
    got = exact_angles(ms.astype(np.longdouble), theta)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, exact_angles(ms, theta))


def test_wrap_computes_in_float64():
    # wrap(x) = x - 2*pi*rint(x / 2*pi) in float64: float32 input gives the float64 result of its (exact) value
    x32 = np.array([3 * np.pi / 2, -np.pi / 2, 100.0, -7.25, 12345.678], dtype=np.float32)
    got = wrap(x32)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, wrap(x32.astype(np.float64)))
    for x, w in zip(x32.astype(np.float64), got):  # each within float64 rounding of the mpmath reduction
        v = mpmath.mpf(float(x))
        assert float(w) == pytest.approx(float(v - MP_2PI * mpmath.nint(v / MP_2PI)), abs=4e-12)
