"""Fused kernels (numba) for the RoPE engine's stages: each does in one pass over a block what the numpy stage does
in several, with the same IEEE operations in the same order, so the same bits (issue 52).

The oracle (:func:`oracle_into`, 13 numpy passes), the angle errors (:func:`angle_errors`, 6 to 12), the rotation
errors (:func:`rotation_errors`, 4 to 9), the narrow-cache estimate's arithmetic around numpy's float32 ``sin``
(:func:`estimate`, 15) and its rounding to the cache (:func:`stored`, 10 over both halves), the float32 cache's
polynomial cos/sin, flags and rounding (:func:`f32_stored`, about 45), the pair errors at one distance
(:func:`pair_fold`, 4 to 7; numpy's pairwise sum kept).  numba is optional (``pip install
precision-audit[fast]``): the engine uses the kernels for passes of :data:`MIN_ANGLES` angles or more when numba
imports (``PRECISION_AUDIT_FUSED=0`` turns them off); the numpy stages stay the reference the tests hold these to,
bit for bit (tests/test_fused.py), and serve every shorter pass and every machine without numba.

What keeps the bits: ``fastmath=False`` (no reassociation, no contraction of a product and a sum into an FMA);
``np.rint`` rounds half to even as numpy's does; the wrap is done where numpy's stage does it (on a whole block,
only when some value needs it: wrapping a value that needs none can change the sign of a zero); a column's sum
runs row after row, as numpy sums a C-contiguous array over axis 0.
"""

from __future__ import annotations

import functools
import math
import types
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

# angles in a pass from which the kernels pay for numba's import and their load from the disk cache
MIN_ANGLES = 2**24  # measured: 2**22 angles (64K x 64) 0.3 s slower with them, 2**24 0.2 s faster, 2**26 1.7 s


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether numba imports here and compiles (not ``NUMBA_DISABLE_JIT``); the kernels compile on first use,
    cached on disk after."""
    try:
        import numba
    except ImportError:
        return False
    return not numba.config.DISABLE_JIT


def enabled() -> bool:
    """Whether the engine uses the kernels: numba imports and ``PRECISION_AUDIT_FUSED`` is not ``0`` (A/B timing)."""
    import os

    return os.environ.get("PRECISION_AUDIT_FUSED", "1") != "0" and available()


@functools.lru_cache(maxsize=1)
def _kernels() -> Any:
    import numba

    try:  # compiled once per install: cached beside this file, or in numba's user-wide cache
        numba.njit(cache=True)(lambda: None)
        cache = True
    except RuntimeError:  # no cache directory can be written: compile once per process
        cache = False
    jit = functools.partial(numba.njit, cache=cache, nogil=True, fastmath=False, error_model="numpy")

    @jit
    def oracle(m: F64, hi: F64, lo: F64, p1: F64, p2: F64, ex: F64, two_pi: float, c1: float, c2: float,
               c3: float, t: float) -> None:
        n, nf = p1.shape
        needs = False
        for i in range(n):
            for j in range(nf):
                x1 = m[i] * hi[j]
                x2 = m[i] * lo[j]
                k = np.rint((x1 + x2) / two_pi)
                r = ((x1 - k * c1) - k * c2) + (x2 - k * c3)
                p1[i, j] = x1
                p2[i, j] = x2
                ex[i, j] = r
                needs |= not abs(r) <= t  # r / 2pi within [-0.5, 0.5] after rounding (nan: no)
        if needs:  # numpy's stage: wrap the whole block when some value needs it
            for i in range(n):
                for j in range(nf):
                    r = ex[i, j]
                    ex[i, j] = r - np.rint(r / two_pi) * two_pi

    @jit
    def angle_errors(angle: F64, p1: F64, p2: F64, wraps: bool, t: float, two_pi: float, pi: float,
                     bmax: F64, acc: F64, fresh: bool, tmp: F64) -> bool:
        n, nf = angle.shape
        if not wraps:  # |angle - p1 - p2| into bmax and tmp, kept if none exceeds t (nor is nan)
            over = False
            for j in range(nf):
                d = abs((angle[0, j] - p1[0, j]) - p2[0, j])
                over |= not d <= t
                bmax[j] = d
                tmp[j] = d if fresh else acc[j] + d
            for i in range(1, n):
                for j in range(nf):
                    d = abs((angle[i, j] - p1[i, j]) - p2[i, j])
                    over |= not d <= t
                    m = bmax[j]
                    bmax[j] = d if d > m else m
                    tmp[j] = tmp[j] + d
            if not over:
                for j in range(nf):
                    acc[j] = tmp[j]
                return False
        # wrapped (a block that needs it, or any block after one that did)
        for j in range(nf):
            bmax[j] = -np.inf
        for i in range(n):
            for j in range(nf):
                d = (angle[i, j] - p1[i, j]) - p2[i, j]
                d = abs(d - np.rint(d / two_pi) * two_pi)
                if not math.isfinite(d):
                    d = pi
                if d > bmax[j]:
                    bmax[j] = d
                if fresh and i == 0:
                    acc[j] = d
                else:
                    acc[j] = acc[j] + d
        return True

    @jit
    def rotation_errors(rot: F64, ex: F64, signed: F64, keep: bool, wraps: bool, t: float, two_pi: float,
                        pi: float, bmax: F64, acc: F64, fresh: bool, tmp: F64) -> tuple[bool, bool]:
        n, nf = rot.shape
        if not wraps:  # |rot - ex| into bmax and tmp (signed: rot - ex), kept if none exceeds t (nor is nan)
            over = False
            for j in range(nf):
                x = rot[0, j] - ex[0, j]
                if keep:
                    signed[0, j] = x
                a = abs(x)
                over |= not a <= t
                bmax[j] = a
                tmp[j] = a if fresh else acc[j] + a
            for i in range(1, n):
                for j in range(nf):
                    x = rot[i, j] - ex[i, j]
                    if keep:
                        signed[i, j] = x
                    a = abs(x)
                    over |= not a <= t
                    m = bmax[j]
                    bmax[j] = a if a > m else m
                    tmp[j] = tmp[j] + a
            if not over:
                for j in range(nf):
                    acc[j] = tmp[j]
                return False, False
        # wrapped (a block that needs it, or any block after one that did)
        for j in range(nf):
            bmax[j] = -np.inf
        has_nan = False
        for i in range(n):
            for j in range(nf):
                x = rot[i, j] - ex[i, j]
                if keep:
                    x = x - np.rint(x / two_pi) * two_pi
                    signed[i, j] = x
                    a = abs(x)
                else:
                    a = abs(x)
                    b = two_pi - a
                    if b < a:  # numpy's minimum: a nan stays
                        a = b
                if not math.isfinite(a):
                    has_nan = True
                    a = pi
                if a > bmax[j]:
                    bmax[j] = a
                if fresh and i == 0:
                    acc[j] = a
                else:
                    acc[j] = acc[j] + a
        return True, has_nan

    @jit
    def estimate_args(a: F64, c32: Any, s32: Any, sign: Any, bounded: bool, max_angle: float, inv_pi: float,
                      p1: float, p2: float) -> bool:
        n = a.size
        if not bounded:  # every angle finite and below max_angle, or the caller computes exactly
            for i in range(n):
                if not abs(a[i]) < max_angle:
                    return False
        hp1, hp2 = p1 / 2, p2 / 2
        for i in range(n):
            q = np.rint(a[i] * inv_pi)
            x = (a[i] - q * p1) - q * p2
            s32[i] = np.float32(x)
            c32[i] = np.float32((hp1 - abs(x)) + hp2)
            sign[i] = np.uint32(np.int32(q) & 1) << np.uint32(31)
        return True

    @jit
    def apply_sign(both: Any, sign: Any) -> None:
        n = sign.size
        for i in range(n):
            both[i] ^= sign[i]
            both[n + i] ^= sign[i]

    @jit
    def stored(bits: Any, scale: Any, scaled: bool, half: Any, mask: Any, guard: Any, lo: Any, hi: Any,
               out: F64, flag: Any) -> int:
        flagged = 0
        keep = ~mask
        top = np.uint32(0x7FFFFFFF)
        two = guard + guard
        for i in range(bits.size):
            b = np.uint32(bits[i])
            if scaled:
                b = np.float32(np.uint32(b).view(np.float32) * scale).view(np.uint32)
            u = np.uint32(b + half)
            x = b & top
            f = ((np.uint32(u + guard) & mask) <= two) | (x < lo) | (x >= hi)
            flag[i] = f
            flagged += f
            out[i] = np.uint32(u & keep).view(np.float32)
        return flagged

    @jit
    def pair_fold(cur: F64, prev: F64, x: F64, two_pi: float, pi: float, bmax: F64) -> bool:
        n, nf = cur.shape
        for j in range(nf):
            bmax[j] = 0.0
        wrapped = False
        for i in range(n):
            for j in range(nf):
                a = abs(cur[i, j] - prev[i, j])
                b = two_pi - a
                wrapped |= not a <= pi
                a = a if a <= b else b  # numpy's minimum: a nan stays
                a = a if abs(a) < np.inf else pi  # nan (or inf) as pi
                x[i, j] = a
                m = bmax[j]
                bmax[j] = a if a > m else m
        return wrapped

    @jit
    def _f32_flag(v: float, half_guard: Any, low: Any, two_guard: Any, small: Any) -> bool:
        b = np.float64(v).view(np.uint64)
        return ((np.uint64(b + half_guard) & low) <= two_guard) | ((b & np.uint64(0x7FFFFFFFFFFFFFFF)) < small)

    @jit
    def f32_stored(a: F64, cos: F64, sin: F64, flag: Any, scale: float, scaled: bool, two_over_pi: float, p1: float,
                   p2: float, c0: float, c1: float, c2: float, c3: float, c4: float, c5: float, c6: float,
                   half_guard: Any, low: Any, two_guard: Any, small: Any) -> int:
        n = a.size
        flagged = 0
        for i in range(n):
            q = np.rint(a[i] * two_over_pi)
            x = (a[i] - q * p1) - q * p2
            x2 = x * x
            p = x2 * c6
            p = (p + c5) * x2
            p = (p + c4) * x2
            p = (p + c3) * x2
            p = (p + c2) * x2
            p = (p + c1) * x2
            p = (p + c0) * x2
            s = p * x + x  # sin x = x + x * (x2 * P(x2))
            c = math.sqrt(1.0 - s * s)  # cos x >= sqrt(1/2)
            quad = np.int64(q) & 3  # q mod 4: (sin a, cos a) = (s, c), (c, -s), (-s, -c), (-c, s)
            if quad & 1:
                s, c = c, s
            if quad & 2:
                s = -s
            if (quad + 1) & 2:
                c = -c
            fc = _f32_flag(c, half_guard, low, two_guard, small)
            fs = _f32_flag(s, half_guard, low, two_guard, small)
            flag[i] = fc
            flag[n + i] = fs
            flagged += fc + fs
            c32, s32 = np.float32(c), np.float32(s)
            if scaled:  # the float32 product: exact in float64, rounded once
                c32 = np.float32(np.float64(c32) * scale)
                s32 = np.float32(np.float64(s32) * scale)
            cos[i] = c32
            sin[i] = s32
        return flagged

    return types.SimpleNamespace(oracle=oracle, angle_errors=angle_errors, rotation_errors=rotation_errors,
                                 estimate_args=estimate_args, apply_sign=apply_sign, stored=stored,
                                 pair_fold=pair_fold, f32_stored=f32_stored)


def oracle_into(m: F64, hi: F64, lo: F64, p1: F64, p2: F64, ex: F64) -> None:
    """:func:`.oracle._oracle_into` in one pass: ``p1``, ``p2`` and the wrapped exact angle ``ex`` (C-contiguous
    float64 buffers of ``m.size`` x ``hi.size``), the same bits."""
    from .oracle import _TWO_PI, _TWO_PI_C1, _TWO_PI_C2, _TWO_PI_C3, _WRAP_T

    _kernels().oracle(m, hi, lo, p1, p2, ex, _TWO_PI, _TWO_PI_C1, _TWO_PI_C2, _TWO_PI_C3, _WRAP_T)


def angle_errors(angle: F64, p1: F64, p2: F64, wraps: bool, t: float, acc: F64 | None) -> tuple[F64, F64, bool]:
    """The angle errors of a block in one pass (a second where a wrap is first found needed): per column the max of
    ``|wrap(angle - p1 - p2)|`` (non-finite: pi; the wrap only where ``wraps`` or some error exceeds ``t``), the
    running column sum continued from ``acc`` (None: the first block) row after row, and whether the block
    wrapped.  The same bits as :func:`.chunk_stats._angle_errors` with its :class:`._Reduction`."""
    from .oracle import _TWO_PI

    nf = angle.shape[1]
    bmax = np.empty(nf)
    out = np.empty(nf) if acc is None else acc
    wrapped = _kernels().angle_errors(angle, p1, p2, wraps, t, _TWO_PI, math.pi, bmax, out, acc is None, np.empty(nf))
    return bmax, out, bool(wrapped)


def rotation_errors(rot: F64, ex: F64, signed: F64 | None, wraps: bool, t: float,
                    acc: F64 | None) -> tuple[F64, F64, bool, bool]:
    """The rotation errors of a block in one pass (a second where a wrap is first found needed): per column the max of
    ``|wrap(rot - ex)|`` (nan: pi), the running column sum continued from ``acc`` (None: the first block), whether
    the block wrapped and whether a nan occurred; ``signed`` (or None) receives ``wrap(rot - ex)`` (unwrapped
    where no wrap was needed, nan kept).  The same bits as :func:`.chunk_stats._rotation_errors`."""
    from .oracle import _TWO_PI

    nf = rot.shape[1]
    bmax = np.empty(nf)
    out = np.empty(nf) if acc is None else acc
    keep = signed is not None
    wrapped, has_nan = _kernels().rotation_errors(rot, ex, signed if keep else rot, keep, wraps, t, _TWO_PI, math.pi, bmax, out,
                                     acc is None, np.empty(nf))
    return bmax, out, bool(wrapped), bool(has_nan)


def estimate(a: F64, halves: Any, sign: Any, bounded: bool, consts: tuple[float, float, float, float]) -> bool:
    """:func:`.narrow_cache.estimate` with its arithmetic fused (numpy's float32 ``sin`` kept: a SIMD kernel):
    the cos then the sin bit patterns of ``a``'s angles in ``halves`` (float32, twice ``a.size``), signs applied;
    ``sign``: a uint32 scratch of ``a.size``.  False where some angle is not finite or too large (unless
    ``bounded``).  ``consts``: the largest angle, 1/pi, and pi in two parts (:mod:`.narrow_cache`).  The same
    bits as the numpy stage."""
    n = a.size
    k = _kernels()
    c32, s32 = halves[:n], halves[n : 2 * n]
    if not k.estimate_args(a, c32, s32, sign, bounded, *consts):
        return False
    np.sin(c32, out=c32)
    np.sin(s32, out=s32)
    k.apply_sign(halves[: 2 * n].view(np.uint32), sign)
    return True


def stored(bits: Any, scale: float, half: int, mask: int, guard: int, lo: Any, hi: Any, out: F64,
           flag: Any) -> int:
    """:func:`.narrow_cache.stored_into`'s rounding in one pass: the cache values of the estimate ``bits``
    (uint32, cos then sin) times ``scale`` in float32 (when not 1) into ``out``, rounded half up at ``mask``'s
    bits, and in ``flag`` the elements to compute exactly (near a midpoint within ``guard``, below ``lo``, at or
    above ``hi`` when given); returns how many."""
    u32 = np.uint32
    return int(_kernels().stored(bits, np.float32(scale), scale != 1.0, u32(half), u32(mask), u32(guard), u32(lo),
                             u32(0xFFFFFFFF if hi is None else hi), out, flag))


def pair_fold(cur: F64, prev: F64, x: F64) -> tuple[F64, float, bool]:
    """:func:`.pairs.fold_pairs` of ``cur - prev`` in one pass and numpy's sum: per column the max of
    ``|wrap(cur - prev)|`` (nan: pi), their sum (numpy's pairwise ``add.reduce`` over ``x``, C-contiguous of
    ``cur``'s shape, which receives the values), and whether some pair needed the wrap.  Wrapping as
    ``min(|x|, 2 pi - |x|)`` changes no value up to pi, so it is done on every value: the same bits."""
    from .oracle import _TWO_PI

    bmax = np.empty(cur.shape[1])
    wrapped = _kernels().pair_fold(cur, prev, x, _TWO_PI, math.pi, bmax)
    return bmax, float(np.add.reduce(x, axis=None)), bool(wrapped)


def f32_stored(a: F64, out: F64, flag: Any, scale: float, consts: tuple[Any, ...]) -> int:
    """:func:`.float32_cache.stored_into`'s estimate, flags and float32 rounding in one pass: the float32 cache's
    cos then sin of ``a``'s angles (flat, finite, below its largest angle) into ``out`` (float64, twice ``a.size``),
    times ``scale`` in float32 when not 1, and in ``flag`` the elements to compute exactly; returns how many.
    ``consts``: 2/pi, pi/2 in two parts, the sine's coefficients and the flags' bit constants
    (:mod:`.float32_cache`).  The same bits as the numpy stage."""
    n = a.size
    return int(_kernels().f32_stored(a, out[:n], out[n : 2 * n], flag, scale, scale != 1.0, *consts))
