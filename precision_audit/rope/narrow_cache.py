"""Stored cos/sin in a narrow cache format without a float64 cos and sin per element.

A narrow cache (bfloat16, float16, float8) keeps 3 to 11 significant bits, so
the stored value ``round_C(round_T(cos a) ...)`` is decided by a float32
estimate of ``cos a`` unless that estimate lies near a rounding boundary of
the cache format.  The estimate (:func:`estimate`): ``a`` reduced modulo pi
in float64 (Cody-Waite with two terms of pi: ``x`` within 2**-50 for ``|a| <
2**26``), then ``sin a = (-1)**q sin x`` and ``cos a = (-1)**q sin(pi/2 - |x|)``
with numpy's float32 ``sin`` of the arguments rounded to float32.  Its error is
at most ``(2 K + 1.6) * 2**-24`` relative, K the float32 kernel's error in ulps
(numpy documents 1.49 ulp; glibc's are below 1), plus ``2**-50`` absolute.  The stages after cos/sin
(rounding to the trig format T, the product by the attention factor in T, the
cast to the cache format C) are monotone roundings, each within 2**-24
relative for float32, so the stored value is ``round_C`` of any value within
``(2 K + 6.6) * 2**-24`` of the estimate (scaled by the factor) that no
midpoint of C separates from it.  Elements whose estimate lies within the
guard, ``2**-19`` relative (K up to 12 ulps), of a midpoint of C, or below C's
smallest normal number or ``2**-23`` (where the absolute error could matter),
or at C's largest finite number, are computed exactly, as the engine computes
them (float64 ``np.cos`` of the angle, then every rounding); all others are
rounded from the estimate.  Every stored value is therefore the exactly
computed one, to the bit; a kernel check (:func:`_kernels_ok`) keeps the fast
path off on a machine whose float32 kernels are less accurate than assumed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..formats import Format, round_to
from . import fused
from .oracle import F64

U32 = npt.NDArray[np.uint32]

# pi = P1 + P2 (+ 1.3e-24): P1 of 25 significant bits, so q * P1 is exact for integers q < 2**28; P2 = pi - P1
# rounded to float64 (the next 53 bits); pi/2 = P1/2 + P2/2 likewise
_P1 = float.fromhex("0x1.921fb5p+1")
_P2 = float.fromhex("0x1.110b4611a6263p-25")
_INV_PI = float.fromhex("0x1.45f306dc9c883p-2")
_MAX_ANGLE = 2.0**26  # |a| / pi stays below 2**25
_GUARD_ULPS = 32  # the guard 2**-19 relative, in float32 ulps of the estimate's binade (2**-19 * 2**24): 2K + 6.6 for K <= 12.7
# an estimate below _TINY * factor is computed exactly: there the reduced argument's absolute error
# (below 2**-50: q * P2 rounded, the subtractions) could exceed 2**-27 of it
_TINY = 2.0**-23


@functools.lru_cache(maxsize=64)
def _opmath_scale(trig: str, scale: float) -> float:
    """The attention factor as the engine multiplies it: a float32 scalar (float64 for a float64 trig stage)."""
    return float(round_to(scale, "float64" if trig == "float64" else "float32")[()])


def eligible(trig: Format, cache: Format, scale: float) -> bool:
    """The fast path serves this trig format, cache format and attention factor."""
    return (
        trig.name in ("float32", "float64")
        and cache.significand_bits <= 15
        and np.dtype(cache.numpy_type).itemsize <= 2
        and cache.overflow != "saturate"
        and math.isfinite(scale)
        and 2.0**-20 <= scale <= 2.0**20
        and _kernels_ok()
    )


@functools.lru_cache(maxsize=1)
def _kernels_ok() -> bool:
    """numpy's float32 sin on [-1.6, 1.6] within 8 float32 ulps of the float64 one (the guard allows 12).

    A grid of 2**17 points and a few ends; run once per process."""
    x = np.concatenate([np.linspace(-1.6, 1.6, 2**17), [2.0**-30, -(2.0**-30), math.pi / 2, -math.pi / 2]])
    x32 = x.astype(np.float32)
    ref = x32.astype(np.float64)
    for f in (np.sin,):
        got = f(x32).astype(np.float64)
        want = f(ref)
        ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        if not np.all(np.abs(got - want) <= 8 * ulp):
            return False
    return True


@dataclass
class _Estimate:
    """float32 estimates of cos and sin of a block's angles, as bit patterns: ``both`` holds the cos, then
    the sin (flat uint32, each in the angles' layout)."""

    angle: F64  # the angles (flat)
    both: U32


def estimate(angle: F64, out: F64, scratch: tuple[F64, F64, F64], bounded: bool = False,
             fuse: bool = False) -> _Estimate | None:
    """Estimate cos and sin of ``angle`` (C-contiguous float64) into ``out`` (float64 buffer of the same size,
    used as two float32 halves); None if some angle is not finite or too large (then compute exactly).
    ``bounded``: the caller knows every angle is finite and below ``_MAX_ANGLE``; ``fuse``: the arithmetic in one
    fused kernel (:func:`.fused.estimate`, the same bits)."""
    a = angle.reshape(-1)
    n = a.size
    if n == 0:
        return None
    if fuse:  # the same arithmetic in one pass (numpy's float32 sin kept)
        halves = out.reshape(-1).view(np.float32)
        if not fused.estimate(a, halves, scratch[0].reshape(-1).view(np.uint32)[:n], bounded,
                              (_MAX_ANGLE, _INV_PI, _P1, _P2)):
            return None
        return _Estimate(a, halves[: 2 * n].view(np.uint32))
    if not bounded:
        top, bottom = np.max(a), np.min(a)
        if not (abs(top) < _MAX_ANGLE and abs(bottom) < _MAX_ANGLE):  # nan fails too
            return None
    q, x, tmp = (s.reshape(-1)[:n] for s in scratch)
    np.multiply(a, _INV_PI, out=q)
    np.rint(q, out=q)
    np.multiply(q, _P1, out=x)
    np.subtract(a, x, out=x)  # exact (Sterbenz)
    np.multiply(q, _P2, out=tmp)
    np.subtract(x, tmp, out=x)  # a - q pi within 2**-50, |x| <= pi/2 + 2**-50
    halves = out.reshape(-1).view(np.float32)
    c32, s32 = halves[:n], halves[n : 2 * n]
    np.copyto(s32, x, casting="same_kind")
    np.abs(x, out=tmp)  # cos x = sin(pi/2 - |x|), pi/2 - |x| within 2**-50 (the first subtraction is exact)
    np.subtract(_P1 / 2, tmp, out=tmp)
    np.add(tmp, _P2 / 2, out=tmp)
    np.copyto(c32, tmp, casting="same_kind")
    np.sin(c32, out=c32)
    np.sin(s32, out=s32)
    qi = x.view(np.int32)[:n]  # |q| < 2**25: exact; its parity is the sign (-1)**q of both
    np.copyto(qi, q, casting="unsafe")
    sign = qi.view(np.uint32)
    np.left_shift(sign, np.uint32(31), out=sign)
    both = halves[: 2 * n].view(np.uint32)
    np.bitwise_xor(both[:n], sign, out=both[:n])
    np.bitwise_xor(both[n:], sign, out=both[n:])
    return _Estimate(a, halves[: 2 * n].view(np.uint32))


def stored_into(est: _Estimate, trig: Format, cache: Format, scale: float, out: F64,
                scratch: tuple[F64, F64, F64, F64], fuse: bool = False) -> None:
    """The stored cos and sin of the estimate's angles in ``cache`` into ``out`` (flat float64: the cos, then
    the sin, each in the angles' layout), as the engine computes them: every stored value is the exactly
    computed one (see the module docstring).  ``scratch``: four float64 buffers of the angles' size; ``fuse``: the
    rounding and the flags in one fused kernel (:func:`.fused.stored`, the same bits)."""
    n = est.angle.size
    n2 = 2 * n
    scaled, u, x = (b.reshape(-1).view(np.uint32)[:n2] for b in scratch[:3])
    flag = scratch[3].reshape(-1).view(np.bool_)[:n2]
    more = scratch[3].reshape(-1).view(np.bool_)[n2 : 2 * n2]
    s = _opmath_scale(trig.name, scale)
    drop = 24 - cache.significand_bits  # float32 significand bits below the cache format's last one
    half, mask = 1 << (drop - 1), (1 << drop) - 1
    bits = est.both
    lo = np.float32(max(2.0**cache.min_exponent, _TINY * s)).view(np.uint32)
    hi = np.float32(cache.max_finite).view(np.uint32) if cache.max_finite < 2.0 * max(s, 1.0) else None
    if fuse:  # the same rounding and flags in one pass
        if fused.stored(bits, s, half, mask, _GUARD_ULPS, lo, hi, out[:n2], flag):
            _fix_flagged(est.angle, np.flatnonzero(flag), trig, cache, scale, out)
        return
    if s != 1.0:  # the estimate times the factor, rounded to float32 (2**-24 more, inside the guard)
        np.multiply(bits.view(np.float32), np.float32(s), out=scaled.view(np.float32))
        bits = scaled
    # a tie is a midpoint, always within the guard: the others round half up, by a carry into the kept
    # bits (normal range: a carry into the exponent is right)
    np.add(bits, np.uint32(half), out=u)
    # near a midpoint: the dropped bits of bits + half within the guard of 0
    np.add(u, np.uint32(_GUARD_ULPS), out=x)
    np.bitwise_and(x, np.uint32(mask), out=x)
    np.less_equal(x, np.uint32(2 * _GUARD_ULPS), out=flag)
    np.bitwise_and(u, np.uint32(~mask & 0xFFFFFFFF), out=u)
    np.copyto(out[:n2], u.view(np.float32))
    # out of the cache format's normal range (or so small that the reduction's error could matter): lo, hi
    np.bitwise_and(bits, np.uint32(0x7FFFFFFF), out=x)
    if hi is not None or np.min(x) < lo:
        np.less(x, lo, out=more)
        np.logical_or(flag, more, out=flag)
        if hi is not None:
            np.greater_equal(x, hi, out=more)
            np.logical_or(flag, more, out=flag)
    if flag.any():
        _fix_flagged(est.angle, np.flatnonzero(flag), trig, cache, scale, out)


def _fix_flagged(angle: F64, idx: npt.NDArray[np.intp], trig: Format, cache: Format, scale: float, out: F64) -> None:
    """Overwrite the flagged elements of ``out`` (``idx``: sorted, below n the cos, from n on the sin) with the
    exactly computed values."""
    n = angle.size
    split = int(np.searchsorted(idx, n))
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.concatenate([np.cos(angle[idx[:split]]), np.sin(angle[idx[split:] - n])])
    out[idx] = exact_chain(v, trig, cache, scale)


def exact_chain(v: F64, trig: Format, cache: Format, scale: float) -> F64:
    """Float64 cos or sin values rounded to the trig format, times the attention factor there (when not 1),
    cast to the cache format: the engine's stages after cos/sin.  (From float32, numpy's and ml_dtypes'
    casts round to nearest even once, as ``round_to`` does, with less overhead on a few values.)"""
    with np.errstate(invalid="ignore", over="ignore"):
        if trig.name == "float32":
            v32 = v.astype(np.float32)
            if scale != 1.0:  # a float32 product is the float64 product of float32 values, rounded once
                v32 = (v32.astype(np.float64) * _opmath_scale(trig.name, scale)).astype(np.float32)
            return v32.astype(cache.numpy_type).astype(np.float64)
        v = round_to(v, trig)
        if scale != 1.0:
            v = round_to(v * _opmath_scale(trig.name, scale), trig)
        return round_to(v, cache)


def exact_stored(angle: F64, which: str, trig: Format, cache: Format, scale: float) -> F64:
    """The engine's stored cos or sin of some angles (float64 ``np.cos``/``np.sin``, then :func:`exact_chain`)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return exact_chain(np.cos(angle) if which == "cos" else np.sin(angle), trig, cache, scale)
