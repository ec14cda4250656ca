"""The oracle: exact RoPE angles ``m * theta_i`` for integer positions, wrapped to [-pi, pi].

``theta`` is split into two float64 terms (Veltkamp), so ``m * hi`` is exact and
``m * lo`` is far below 1e-16 rad; the product is reduced modulo 2*pi with a
three-term 2*pi (Cody-Waite), accurate to ~1e-16 rad for positions up to 2**26.
Every error the rope auditor reports is measured against these angles.

>>> exact_angles([0, 1, 4], [1.0, 0.5]).tolist()  # 4 - 2*pi, correctly rounded (4 - 2 * np.pi is ...62)
[[0.0, 0.0], [1.0, 0.5], [-2.2831853071795867, 2.0]]
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_ROPE_LENGTH", "ExactAngles", "exact_angles", "wrap"]

F64 = npt.NDArray[np.float64]


class _Rows(Protocol):
    """The float64 buffers :func:`_oracle_into` writes (the engine's :class:`~.engine._Rows` has them)."""

    p1: F64
    p2: F64
    k: F64
    t: F64
    ex: F64

MAX_ROPE_LENGTH = 2**26  # the oracle's two-term product is exact for m < 2**27


# 2*pi as three float64 terms: C1 (25 bits) + C2 (25 bits) = float64(2*pi) exactly,
# C3 = 2*pi - float64(2*pi).  k * C1 and k * C2 are exact for k < 2**28.
_TWO_PI = float.fromhex("0x1.921fb54442d18p+2")
_TWO_PI_C1 = float.fromhex("0x1.921fb5p+2")
_TWO_PI_C2 = _TWO_PI - _TWO_PI_C1  # exact: the low 27 bits of float64(2*pi)
_TWO_PI_C3 = float.fromhex("0x1.1a62633145c07p-52")  # 2*pi - float64(2*pi)


def _wrap_threshold() -> float:
    """The largest float64 x with ``x / 2pi <= 0.5`` after rounding: ``rint(x / 2pi)`` is 0 exactly for
    ``|x| <= T`` (so :func:`wrap` leaves x unchanged), and not 0 above."""
    x = math.pi
    while x / _TWO_PI > 0.5:
        x = math.nextafter(x, 0.0)
    while math.nextafter(x, math.inf) / _TWO_PI <= 0.5:
        x = math.nextafter(x, math.inf)
    return x


_WRAP_T = _wrap_threshold()


def wrap(x: npt.ArrayLike) -> F64:
    """Wrap angles to [-pi, pi] (float64).

    >>> wrap([3 * np.pi / 2, -np.pi / 2]).round(12).tolist()
    [-1.570796326795, -1.570796326795]
    """
    a = np.asarray(x, dtype=np.float64)
    return a - _TWO_PI * np.rint(a / _TWO_PI)


def _split(theta: F64) -> tuple[F64, F64]:
    """Veltkamp split: theta = hi + lo with hi of at most 26 significant bits."""
    t = theta * 134217729.0  # 2**27 + 1
    hi = t - (t - theta)
    return hi, theta - hi


def _exact_parts(m: F64, theta: F64) -> tuple[F64, F64, F64]:
    """m * theta = p1 + p2 (p1 exact, p2 rounded far below 1e-16 rad) and its wrapped value."""
    hi, lo = _split(theta)
    p1 = m[:, None] * hi[None, :]  # exact: <= 27 + 26 bits
    p2 = m[:, None] * lo[None, :]
    k = np.rint((p1 + p2) / _TWO_PI)
    r = (((p1 - k * _TWO_PI_C1) - k * _TWO_PI_C2) + (p2 - k * _TWO_PI_C3))
    return p1, p2, wrap(r)


def exact_angles(positions: npt.ArrayLike, theta: npt.ArrayLike) -> F64:
    """The oracle: ``positions[:, None] * theta[None, :]`` exactly, wrapped to [-pi, pi].

    ``positions`` are integers below 2**27, ``theta`` float64 frequencies.

    >>> float(exact_angles([2**20], [1.0])[0, 0])  # 2**20 mod 2*pi, checked with mpmath in tests
    0.3368260275312118
    """
    m = np.asarray(positions, dtype=np.float64)
    return _exact_parts(m, np.asarray(theta, dtype=np.float64))[2]


class ExactAngles:
    """:func:`exact_angles` for one ``theta`` over many blocks of positions, its float64 buffers made once (the
    same operations, the same bits).  A call returns a view of its buffer, valid until the next call.

    >>> oracle = ExactAngles([1.0, 0.5])
    >>> oracle(np.array([0, 1, 4])).tolist() == exact_angles([0, 1, 4], [1.0, 0.5]).tolist()
    True
    """

    def __init__(self, theta: npt.ArrayLike) -> None:
        t = np.asarray(theta, dtype=np.float64)
        self.hi, self.lo = _split(t)
        self.p1 = self.p2 = self.k = self.t = self.ex = np.empty((0, t.size))

    def __call__(self, positions: npt.ArrayLike) -> F64:
        m = np.asarray(positions, dtype=np.float64)
        n = m.shape[0]
        if self.p1.shape[0] < n:
            for name in ("p1", "p2", "k", "t", "ex"):
                setattr(self, name, np.empty((n, self.hi.size)))
        rows = _View(self, n)
        _oracle_into(m, self.hi, self.lo, rows)
        return rows.ex


class _View:
    """The first ``n`` rows of an :class:`ExactAngles`' buffers (:class:`_Rows`)."""

    def __init__(self, o: ExactAngles, n: int) -> None:
        self.p1, self.p2, self.k, self.t, self.ex = o.p1[:n], o.p2[:n], o.k[:n], o.t[:n], o.ex[:n]


def _wrap_into(x: F64, tmp: F64) -> None:
    """``x = wrap(x)`` in place (the same operations as :func:`wrap`)."""
    np.divide(x, _TWO_PI, out=tmp)
    np.rint(tmp, out=tmp)
    np.multiply(tmp, _TWO_PI, out=tmp)
    np.subtract(x, tmp, out=x)


def _oracle_into(m: F64, hi: F64, lo: F64, w: _Rows) -> None:
    """:func:`_exact_parts` into ``w.p1``, ``w.p2``, ``w.ex`` (same operations, same bits)."""
    p1, p2, k, t, r = w.p1, w.p2, w.k, w.t, w.ex
    np.multiply(m[:, None], hi[None, :], out=p1)
    np.multiply(m[:, None], lo[None, :], out=p2)
    np.add(p1, p2, out=k)
    np.divide(k, _TWO_PI, out=k)
    np.rint(k, out=k)
    np.multiply(k, _TWO_PI_C1, out=t)
    np.subtract(p1, t, out=r)
    np.multiply(k, _TWO_PI_C2, out=t)
    np.subtract(r, t, out=r)
    np.multiply(k, _TWO_PI_C3, out=t)
    np.subtract(p2, t, out=t)
    np.add(r, t, out=r)
    # wrap(r) subtracts 2*pi*rint(r / 2*pi): nothing when every quotient rounds to
    # zero (only the sign of a zero could change, and every use takes |.|)
    if not (np.max(r) / _TWO_PI <= 0.5 and np.min(r) / _TWO_PI >= -0.5):
        _wrap_into(r, t)
