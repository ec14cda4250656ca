"""A numpy model of exactly what MLX's ``mx.fast.rope`` computes on a CPU stream (tests only).

Read from ml-explore/mlx at commit 846d176227a0ac13d2667e58d2bb68b322109ab0 (version 0.32.2.dev;
the wheel tested is 0.32.4):

* ``fast::rope`` in mlx/fast.cpp (the fallback every CPU stream runs):
  ``positions = (arange(T, float32) + offset) * scale`` in float32;
  without ``freqs``: ``inv_freq = exp(arange(0, -d/2, -1, float32) * float32(logf(base) / (d/2)))``;
  with ``freqs``: ``inv_freq = reciprocal(freqs)`` = ``1.0f / freqs`` (mlx/ops.cpp ``reciprocal``);
  ``theta = positions * inv_freq`` in float32; ``cos(theta)``, ``sin(theta)`` in float32, cast to
  the input dtype; then ``x1*cos - x2*sin``, ``x1*sin + x2*cos`` as MLX ops in the input dtype.
* ``exp``, ``sin``, ``cos`` of the CPU backend (mlx/backend/cpu/simd/math.h): not libm but Cephes
  polynomials in float32 with fused multiply-adds (``simd::exp``; ``simd::sincos`` with a
  three-constant Cody-Waite reduction by pi/4; arguments above 2**23 go to libm,
  ``sincos_checked``).  On x86-64 ``simd::max_size`` is 1, so every op is a scalar float op and
  every ``fma`` is ``std::fma`` (one rounding).

The model below repeats these steps with numpy float32 operations (correctly rounded, as IEEE
float ops are) and an exact float32 fma (:func:`fma32`, written independently of the package's
round-to-odd ``precision_audit.rope.formulas.fma32``); its values are therefore this code's bits on any
IEEE machine, not one machine's.  (1, 0) pairs come out as (cos, sin) cast to the dtype: the
products 1*c, 0*s and the sums c - 0, s + 0 are exact in any format.

The default inverse frequencies (the exp path) are not modelled here: the package's
``precision_audit.rope.formulas.how_inv_freq("exp-log", ...)`` models them, and the tests compare it
with the kernel's own exp (``referees._mlx.fallback_inv_freq``) bit for bit instead of keeping a
second copy of the same Cephes polynomial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import numpy.typing as npt

__all__ = [
    "angles",
    "cast",
    "fma32",
    "freqs_inv_freq",
    "llama3_freqs",
    "proportional_freqs",
    "rope_pairs",
    "sincos32",
    "su_freqs",
    "yarn_freqs",
    "yarn_mscale",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
_f = np.float32
_LIBM_ABOVE = _f(8388608.0)  # 2**23: sincos_checked sends larger arguments to libm


def fma32(a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike) -> F32:
    """``a * b + c`` with one rounding to float32 (what ``std::fma(float, float, float)`` returns).

    The product of two floats is exact in float64; the float64 sum rounds once more, so a
    float64 result lying exactly halfway between two floats is resolved with the sum's exact
    error (TwoSum) instead of ties-to-even.

    >>> float(fma32(np.float32(1 + 2**-23), np.float32(1 - 2**-23), np.float32(-1)))  # -2**-46 exactly
    -1.4210854715202004e-14
    """
    a64, b64, c64 = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (a, b, c))
    p = a64 * b64
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    r = s.astype(np.float32)
    d = s - r.astype(np.float64)
    toward = np.where(d > 0, np.float32(np.inf), np.float32(-np.inf))
    g = np.nextafter(r, toward)
    mid = (d != 0) & (2 * s == r.astype(np.float64) + g.astype(np.float64))
    return np.where(mid & (err * d > 0), g, r).astype(np.float32)


def sincos32(x: npt.ArrayLike) -> tuple[F32, F32]:
    """MLX CPU ``sin`` and ``cos`` on float32 (``simd::sincos``, Cephes), as (sin, cos).

    Arguments above 2**23 in magnitude go to libm in MLX; the model then gives the correctly
    rounded value (libm's sinf/cosf are faithful, not always correctly rounded).

    >>> [float(v) for v in sincos32(np.float32(0.0))]
    [0.0, 1.0]
    """
    x0 = np.asarray(x, dtype=np.float32)
    neg = x0 < 0
    x = np.abs(x0)
    j = np.trunc(x * _f(1.27323954473516)).astype(np.uint32)  # uint32 of x * 4/pi
    j = (j + np.uint32(1)) & ~np.uint32(1)
    y = j.astype(np.float32)
    poly = (j & np.uint32(2)) != 0
    for c in (-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8):
        x = fma32(y, _f(c), x)
    sin_neg = neg ^ ((j & np.uint32(4)) != 0)
    cos_neg = ((j + np.uint32(2)) & np.uint32(4)) == 0  # MLX: ((j - 2) & 4) != 0 in uint32; j - 2 = j + 2 - 4
    z = x * x
    y1 = fma32(z, _f(2.443315711809948e-5), _f(-1.388731625493765e-3))
    y2 = fma32(z, _f(-1.9515295891e-4), _f(8.3321608736e-3))
    y1 = fma32(y1, z, _f(4.166664568298827e-2))
    y2 = fma32(y2, z, _f(-1.6666654611e-1))
    y1 = y1 * z * z
    y2 = fma32(x, y2 * z, x)
    y1 = fma32(z, _f(-0.5), y1) + _f(1.0)
    s = np.where(poly, y1, y2)
    c = np.where(poly, y2, y1)
    s = np.where(sin_neg, -s, s)
    c = np.where(cos_neg, c, -c)
    big = np.abs(x0) > _LIBM_ABOVE
    if np.any(big):
        s = np.where(big, np.sin(x0.astype(np.float64)).astype(np.float32), s)
        c = np.where(big, np.cos(x0.astype(np.float64)).astype(np.float32), c)
    return s.astype(np.float32), c.astype(np.float32)


def freqs_inv_freq(freqs: npt.ArrayLike) -> F32:
    """Frequencies from ``freqs`` (periods): ``1.0f / freqs`` in float32."""
    return (np.float32(1.0) / np.asarray(freqs, dtype=np.float32)).astype(np.float32)


def angles(positions: npt.ArrayLike, inv_freq: npt.ArrayLike, scale: float = 1.0) -> F32:
    """``theta = float32(float32(position) * scale) * inv_freq``, every product rounded to float32."""
    pos = np.asarray(positions, dtype=np.int64).astype(np.float32) * np.float32(scale)
    return (pos[:, None] * np.asarray(inv_freq, dtype=np.float32)[None, :]).astype(np.float32)


def cast(x: npt.ArrayLike, dtype: str) -> F64:
    """float32 values cast to ``dtype`` (round to nearest even) and back to float64."""
    types = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
    return np.asarray(x, dtype=np.float32).astype(types[dtype]).astype(np.float64)


def rope_pairs(positions: npt.ArrayLike, inv_freq: npt.ArrayLike, scale: float = 1.0,
               dtype: str = "float32") -> tuple[F64, F64]:
    """The model's (cos-like, sin-like) for (1, 0) pairs, as ``mlx_rope_pairs`` returns them, from float32
    inverse frequencies (the kernel's: ``fallback_inv_freq``, or :func:`freqs_inv_freq` of mlx-lm's ``freqs``)."""
    s, c = sincos32(angles(positions, inv_freq, scale))
    return cast(c, dtype), cast(s, dtype)


# ---- the ``freqs`` mlx-lm builds (ml-explore/mlx-lm, mlx_lm/models/rope_utils.py, commit
# d78bf58e217c904ec282ed8da9b947491f78c022), every op in float32 as MLX evaluates it (a Python
# scalar meets a float32 array as a float32 value).  ``base ** e`` is MLX's ``power`` (std::pow on
# the CPU); the model takes the correctly rounded power.


def _pow32(base: float, e: F32) -> F32:
    import mpmath

    b = float(np.float32(base))
    with mpmath.workprec(120):
        return np.array([float(np.float32(float(mpmath.power(b, float(v))))) if _safe(b, float(v))
                         else _pow_exact(b, float(v)) for v in e], dtype=np.float32)


def _safe(b: float, v: float) -> bool:
    """The float64 power rounds to float32 as the exact power does (not near a float32 midpoint)."""
    import mpmath

    x = mpmath.power(b, v)
    r = np.float32(float(x))
    lo, hi = np.nextafter(r, np.float32(-np.inf)), np.nextafter(r, np.float32(np.inf))
    gap = min(abs(x - (mpmath.mpf(float(r)) + mpmath.mpf(float(lo))) / 2),
              abs(x - (mpmath.mpf(float(r)) + mpmath.mpf(float(hi))) / 2))
    return bool(gap > abs(x) * mpmath.mpf(2) ** -60)


def _pow_exact(b: float, v: float) -> np.float32:
    import mpmath

    x = mpmath.power(b, v)
    r = np.float32(float(x))
    cands = [np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))]
    return min(cands, key=lambda c: abs(mpmath.mpf(float(c)) - x))


def _exponents(dims: int) -> F32:
    """``arange(0, dims, 2) / dims`` in float32 (an int32 array divided by an int: float32 division)."""
    return (np.arange(0, dims, 2, dtype=np.float32) / np.float32(dims)).astype(np.float32)


def llama3_freqs(dims: int, base: float, factor: float, low_freq_factor: float = 1.0,
                 high_freq_factor: float = 4.0, old_context_len: int = 8192) -> F32:
    """``Llama3RoPE._freqs``: periods base**(2i/d), long ones times ``factor``, the band blended."""
    f = np.float32
    freqs = _pow32(base, _exponents(dims))
    wavelens = f(2 * math.pi) * freqs
    low_wl, high_wl = old_context_len / low_freq_factor, old_context_len / high_freq_factor
    freqs = np.where(wavelens > low_wl, freqs * f(factor), freqs)
    medium = (wavelens > high_wl) & (wavelens < low_wl)
    smooth = (f(old_context_len) / wavelens - f(low_freq_factor)) / f(high_freq_factor - low_freq_factor)
    smooth_freqs = freqs / ((f(1) - smooth) / f(factor) + smooth)
    return np.where(medium, smooth_freqs, freqs).astype(np.float32)


def yarn_freqs(dims: int, base: float, factor: float, original_max_position_embeddings: int = 4096,
               beta_fast: float = 32, beta_slow: float = 1) -> F32:
    """``YarnRoPE._freqs``: (s p * p) / (s p * mask + p * (1 - mask)), p = base**(2i/d)."""
    f = np.float32

    def corr(rot: float) -> float:
        return dims * math.log(original_max_position_embeddings / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), dims - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dims // 2, dtype=np.float32) - f(low)) / f(high - low), 0, 1).astype(np.float32)
    mask = f(1.0) - ramp
    extra = _pow32(base, _exponents(dims))
    inter = f(factor) * extra
    return ((inter * extra) / (inter * mask + extra * (f(1) - mask))).astype(np.float32)


def yarn_mscale(factor: float, mscale: float = 1.0, mscale_all_dim: float = 0.0) -> float:
    """``YarnRoPE.mscale`` (a Python float; mlx-lm multiplies the input by it, in the input dtype)."""
    def m(s: float, k: float) -> float:
        return 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0

    return m(factor, mscale) / m(factor, mscale_all_dim)


def su_freqs(dims: int, base: float, long_factor: Sequence[float] | float) -> F32:
    """``SuScaledRoPE._freqs``: ``long_factor * base**(2i/d)`` (always the long factors)."""
    return (np.asarray(long_factor, dtype=np.float32) * _pow32(base, _exponents(dims))).astype(np.float32)


def proportional_freqs(dims: int, rotated_dims: int, base: float, factor: float = 1.0) -> F32:
    """``ProportionalRoPE._freqs``: ``factor * base**(arange(0, rotated, 2) / dims)`` (float32), then ``inf`` for
    the ``(dims - rotated) / 2`` pairs that do not rotate."""
    e = (np.arange(0, rotated_dims, 2, dtype=np.float32) / np.float32(dims)).astype(np.float32)
    head = (np.float32(factor) * _pow32(base, e)).astype(np.float32)
    return np.concatenate([head, np.full((dims - rotated_dims) // 2, np.inf, dtype=np.float32)])
