"""Stored cos/sin in a float32 cache without numpy's scalar float64 ``cos`` and ``sin`` per element.

A float32 trig stage stored in a float32 cache (SGLang, TensorRT-LLM,
TransformerEngine, torchtune, FlashInfer's stand-ins) keeps ``fl32(cos a)``:
the engine computes it as float64 ``np.cos`` rounded to float32, about 17 ns
an element where numpy calls the C library per element.  Here ``cos a`` and
``sin a`` come from float64 operations that vectorize (:func:`estimate`):

* ``a`` reduced modulo pi/2: ``q = rint(a * 2/pi)``, ``x = (a - q P1) - q P2``
  with ``P1`` pi/2 to 25 bits (``q P1`` exact for ``|q| < 2**28``, the
  subtraction exact by Sterbenz) and ``P2`` the next 53 bits:
  ``|x - (a - q pi/2)| <= 2**-52`` for ``|a| < 2**26``, ``|x| <= pi/4 + 2**-52``;
* ``sin x`` by its Taylor series to ``x**15`` (coefficients ``1/n!`` rounded
  to float64; the next term is below ``2**-54`` on ``|x| <= pi/4``) in
  Horner's scheme, ``cos x = sqrt(1 - sin(x)**2)`` (at least ``sqrt(1/2)``
  there: well conditioned, each operation correctly rounded), then the
  quadrant ``q mod 4`` by bit operations.

Each result is within ``E = 2**-49`` of the exact value (the reduction's
2**-52 moves sin x and cos x by at most as much; truncation below 2**-54; the
Horner steps and the coefficients' roundings a few ulps of values below 1; the
cosine adds ``|tan x|`` times the sine's error, at most 1, and three roundings
below 2**-53; a test checks the bound against mpmath on adversarial angles).  An estimate
``v`` with ``|v| >= 2**-6`` is rounded to float32 directly unless it lies
within ``2**11`` float64 ulps of ``v`` (at least ``E`` plus ``np.cos``'s own
error, which is below an ulp) of a float32 rounding midpoint; those and the
small ones (about 1 % of elements) are computed as the engine computes them.
Every stored value is therefore the engine's, to the bit, on any machine: the
estimate uses only correctly rounded float64 operations.  The attention
factor multiplies the float32 value in float32 afterwards (exact float64
product, rounded once), as the engine does.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ..formats import Format
from . import fused
from .narrow_cache import _opmath_scale, exact_chain
from .oracle import F64

__all__ = ["eligible", "estimate", "stored_into"]

_P1 = float.fromhex("0x1.921fb5p+0")  # pi/2 to 25 significant bits
_P2 = float.fromhex("0x1.110b4611a6263p-26")  # pi/2 - _P1, rounded to float64
_TWO_OVER_PI = 2 / math.pi
_SIN = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 8))  # x**3 ... x**15
MAX_ANGLE = 2.0**26
_GUARD = 2**11  # float64 ulps around a float32 midpoint that are computed exactly
_SMALL = 2.0**-6  # estimates below this magnitude are computed exactly
_DROP = 52 - 23  # float64 fraction bits below float32's last one
# the fused kernel's constants (:func:`.fused.f32_stored`), in the order it takes them
_FUSED_CONSTS = (_TWO_OVER_PI, _P1, _P2, *_SIN, np.uint64((1 << (_DROP - 1)) + _GUARD),
                 np.uint64((1 << _DROP) - 1), np.uint64(2 * _GUARD), np.float64(_SMALL).view(np.uint64))


def eligible(trig: Format, cache: Format, scale: float) -> bool:
    """The path serves a float32 trig stage stored in a float32 cache (any finite attention factor in
    [2**-20, 2**20])."""
    return trig.name == "float32" and cache.name == "float32" and math.isfinite(scale) and 2.0**-20 <= scale <= 2.0**20


def estimate(angle: F64, cos: F64, sin: F64, scratch: tuple[F64, F64, F64]) -> None:
    """``cos(angle)`` and ``sin(angle)`` within ``2**-49`` (float64, flat arrays of the angles' size;
    ``|angle| < 2**26``, finite) into ``cos`` and ``sin``.  ``scratch``: three float64 buffers as large.

    >>> a = np.array([0.0, 1.0, 100.0, 2.0**25 + 0.5])
    >>> c, s = np.empty(4), np.empty(4)
    >>> estimate(a, c, s, (np.empty(4), np.empty(4), np.empty(4)))
    >>> bool(np.all(np.abs(c - np.cos(a)) < 2**-49) and np.all(np.abs(s - np.sin(a)) < 2**-49))
    True
    """
    n = angle.size
    q, x, x2 = (b.reshape(-1)[:n] for b in scratch)
    np.multiply(angle, _TWO_OVER_PI, out=q)
    np.rint(q, out=q)
    np.multiply(q, _P1, out=x)
    np.subtract(angle, x, out=x)  # exact
    np.multiply(q, _P2, out=x2)
    np.subtract(x, x2, out=x)
    np.multiply(x, x, out=x2)
    np.multiply(x2, _SIN[-1], out=sin)
    for c in _SIN[-2::-1]:
        np.add(sin, c, out=sin)
        np.multiply(sin, x2, out=sin)
    np.multiply(sin, x, out=sin)
    np.add(sin, x, out=sin)  # sin x = x + x * (x2 * P(x2))
    np.multiply(sin, sin, out=cos)
    np.subtract(1.0, cos, out=cos)
    np.sqrt(cos, out=cos)  # cos x = sqrt(1 - sin(x)**2) >= sqrt(1/2)
    # the quadrant n = q mod 4: (sin a, cos a) = (s, c), (c, -s), (-s, -c), (-c, s), with integer bit operations:
    # q + 1.5 * 2**52 holds q + 2**51 in its low bits (|q| < 2**51), so its last two bits are n
    np.add(q, 1.5 * 2.0**52, out=q)
    nb, mask, t = q.view(np.uint64), x.view(np.uint64), x2.view(np.uint64)
    sb, cb = sin.view(np.uint64), cos.view(np.uint64)
    np.bitwise_and(nb, np.uint64(1), out=mask)
    np.negative(mask, out=mask)  # all ones where n is odd: swap
    np.bitwise_xor(sb, cb, out=t)
    np.bitwise_and(t, mask, out=t)
    np.bitwise_xor(sb, t, out=sb)
    np.bitwise_xor(cb, t, out=cb)
    np.bitwise_and(nb, np.uint64(2), out=t)  # n in {2, 3}: sin a negated
    np.left_shift(t, np.uint64(62), out=t)
    np.bitwise_xor(sb, t, out=sb)
    np.add(nb, np.uint64(1), out=nb)  # n in {1, 2}: cos a negated
    np.bitwise_and(nb, np.uint64(2), out=nb)
    np.left_shift(nb, np.uint64(62), out=nb)
    np.bitwise_xor(cb, nb, out=cb)


def stored_into(angle: F64, trig: Format, cache: Format, scale: float, out: F64,
                scratch: tuple[F64, F64, F64], fuse: bool = False) -> None:
    """The stored cos and sin of ``angle`` (C-contiguous float64, finite, below :data:`MAX_ANGLE`) in a float32
    cache into ``out`` (flat float64: the cos, then the sin), exactly as the engine computes them.
    ``scratch``: three float64 buffers of the angles' size; ``fuse``: the estimate, the flags and the rounding in
    one fused kernel (:func:`.fused.f32_stored`, the same bits)."""
    a = angle.reshape(-1)
    n = a.size
    both = out[: 2 * n]
    if fuse:
        flags = scratch[0].reshape(-1).view(np.bool_)[: 2 * n]
        if fused.f32_stored(a, both, flags, _opmath_scale(trig.name, scale), _FUSED_CONSTS):
            _fix(a, np.flatnonzero(flags), trig, cache, scale, both)
        return
    estimate(a, both[:n], both[n:], scratch)
    bits = both.view(np.uint64)
    u = scratch[0].reshape(-1)[:n].view(np.uint64)
    flag: npt.NDArray[np.bool_] = np.empty(2 * n, dtype=bool)
    small: npt.NDArray[np.bool_] = np.empty(n, dtype=bool)
    for h in (slice(0, n), slice(n, 2 * n)):
        np.add(bits[h], np.uint64((1 << (_DROP - 1)) + _GUARD), out=u)
        np.bitwise_and(u, np.uint64((1 << _DROP) - 1), out=u)
        np.less_equal(u, np.uint64(2 * _GUARD), out=flag[h])  # near a float32 midpoint
        np.bitwise_and(bits[h], np.uint64(0x7FFFFFFFFFFFFFFF), out=u)
        np.less(u, np.float64(_SMALL).view(np.uint64), out=small)  # |v| below 2**-6
        np.logical_or(flag[h], small, out=flag[h])
    v32 = scratch[1].reshape(-1).view(np.float32)[: 2 * n]
    np.copyto(v32, both, casting="same_kind")  # round to nearest even, once
    s = _opmath_scale(trig.name, scale)
    if s != 1.0:  # the float32 product: exact in float64, rounded once
        np.copyto(both, v32)
        np.multiply(both, s, out=both)
        np.copyto(v32, both, casting="same_kind")
    np.copyto(both, v32)
    idx = np.flatnonzero(flag)
    if idx.size:
        _fix(a, idx, trig, cache, scale, both)


def _fix(a: F64, idx: npt.NDArray[np.intp], trig: Format, cache: Format, scale: float, both: F64) -> None:
    """Overwrite the flagged elements of ``both`` (``idx`` sorted; below ``a.size`` the cos, from it on the sin)
    with the engine's values."""
    split = int(np.searchsorted(idx, a.size))
    v = np.concatenate([np.cos(a[idx[:split]]), np.sin(a[idx[split:] - a.size])])
    both[idx] = exact_chain(v, trig, cache, scale)
