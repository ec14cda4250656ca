"""Fused kernels (numba) for the RoPE engine's stages: each does in one pass over a block what the numpy stage does
in several, with the same IEEE operations in the same order, so the same bits (issue 52).

Work in progress on branch ``fused``: the oracle (:func:`oracle_into`, 13 numpy passes) and the angle errors
(:func:`angle_errors`, 6 to 12 passes).  numba is optional: :func:`available` says whether it imports; the
numpy stages stay the reference the tests hold these to, bit for bit.

What keeps the bits: ``fastmath=False`` (no reassociation, no contraction of a product and a sum into an FMA);
``np.rint`` rounds half to even as numpy's does; the wrap is done where numpy's stage does it (on a whole block,
only when some value needs it: wrapping a value that needs none can change the sign of a zero); a column's sum
runs row after row, as numpy sums a C-contiguous array over axis 0.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether numba imports here (the kernels compile on first use, cached on disk after)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def enabled() -> bool:
    """Whether the engine uses the kernels: numba imports and ``PRECISION_AUDIT_FUSED`` is not ``0`` (A/B timing)."""
    import os

    return available() and os.environ.get("PRECISION_AUDIT_FUSED", "1") != "0"


@functools.lru_cache(maxsize=1)
def _kernels() -> Any:
    import numba

    jit = functools.partial(numba.njit, cache=True, nogil=True, fastmath=False, error_model="numpy")

    @jit
    def oracle(m: F64, hi: F64, lo: F64, p1: F64, p2: F64, ex: F64, two_pi: float, c1: float, c2: float,
               c3: float) -> None:
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
                if not (r / two_pi <= 0.5 and r / two_pi >= -0.5):
                    needs = True
        if needs:  # numpy's stage: wrap the whole block when some value needs it
            for i in range(n):
                for j in range(nf):
                    r = ex[i, j]
                    ex[i, j] = r - np.rint(r / two_pi) * two_pi

    @jit
    def angle_errors(angle: F64, p1: F64, p2: F64, wraps: bool, t: float, two_pi: float, pi: float,
                     bmax: F64, acc: F64, fresh: bool) -> bool:
        n, nf = angle.shape
        if not wraps:  # |angle - p1 - p2| while none exceeds t (nor is nan)
            for i in range(n):
                for j in range(nf):
                    d = abs((angle[i, j] - p1[i, j]) - p2[i, j])
                    if not d <= t:
                        wraps = True
                        break
                if wraps:
                    break
        for j in range(nf):
            bmax[j] = -np.inf
        for i in range(n):
            for j in range(nf):
                d = (angle[i, j] - p1[i, j]) - p2[i, j]
                if wraps:
                    d = d - np.rint(d / two_pi) * two_pi
                    d = abs(d)
                    if not math.isfinite(d):
                        d = pi
                else:
                    d = abs(d)
                if d > bmax[j]:
                    bmax[j] = d
                if fresh and i == 0:
                    acc[j] = d
                else:
                    acc[j] = acc[j] + d
        return wraps

    @jit
    def rotation_errors(rot: F64, ex: F64, signed: F64, keep: bool, wraps: bool, t: float, two_pi: float,
                        pi: float, bmax: F64, acc: F64, fresh: bool) -> tuple[bool, bool]:
        n, nf = rot.shape
        if not wraps:  # |rot - ex| while none exceeds t (nor is nan)
            for i in range(n):
                for j in range(nf):
                    if not abs(rot[i, j] - ex[i, j]) <= t:
                        wraps = True
                        break
                if wraps:
                    break
        for j in range(nf):
            bmax[j] = -np.inf
        has_nan = False
        for i in range(n):
            for j in range(nf):
                x = rot[i, j] - ex[i, j]
                if keep:
                    if wraps:
                        x = x - np.rint(x / two_pi) * two_pi
                    signed[i, j] = x
                    a = abs(x)
                else:
                    a = abs(x)
                    if wraps:
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
        return wraps, has_nan

    return oracle, angle_errors, rotation_errors


def oracle_into(m: F64, hi: F64, lo: F64, p1: F64, p2: F64, ex: F64) -> None:
    """:func:`.oracle._oracle_into` in one pass: ``p1``, ``p2`` and the wrapped exact angle ``ex`` (C-contiguous
    float64 buffers of ``m.size`` x ``hi.size``), the same bits."""
    from .oracle import _TWO_PI, _TWO_PI_C1, _TWO_PI_C2, _TWO_PI_C3

    _kernels()[0](m, hi, lo, p1, p2, ex, _TWO_PI, _TWO_PI_C1, _TWO_PI_C2, _TWO_PI_C3)


def angle_errors(angle: F64, p1: F64, p2: F64, wraps: bool, t: float, acc: F64 | None) -> tuple[F64, F64, bool]:
    """The angle errors of a block in one pass (two where a wrap is first found needed): per column the max of
    ``|wrap(angle - p1 - p2)|`` (non-finite: pi; the wrap only where ``wraps`` or some error exceeds ``t``), the
    running column sum continued from ``acc`` (None: the first block) row after row, and whether the block
    wrapped.  The same bits as :func:`.chunk_stats._angle_errors` with its :class:`._Reduction`."""
    from .oracle import _TWO_PI

    nf = angle.shape[1]
    bmax = np.empty(nf)
    out = np.empty(nf) if acc is None else acc
    wrapped = _kernels()[1](angle, p1, p2, wraps, t, _TWO_PI, math.pi, bmax, out, acc is None)
    return bmax, out, bool(wrapped)


def rotation_errors(rot: F64, ex: F64, signed: F64 | None, wraps: bool, t: float,
                    acc: F64 | None) -> tuple[F64, F64, bool, bool]:
    """The rotation errors of a block in one pass (two where a wrap is first found needed): per column the max of
    ``|wrap(rot - ex)|`` (nan: pi), the running column sum continued from ``acc`` (None: the first block), whether
    the block wrapped and whether a nan occurred; ``signed`` (or None) receives ``wrap(rot - ex)`` (unwrapped
    where no wrap was needed, nan kept).  The same bits as :func:`.chunk_stats._rotation_errors`."""
    from .oracle import _TWO_PI

    nf = rot.shape[1]
    bmax = np.empty(nf)
    out = np.empty(nf) if acc is None else acc
    keep = signed is not None
    wrapped, has_nan = _kernels()[2](rot, ex, signed if keep else rot, keep, wraps, t, _TWO_PI, math.pi, bmax, out,
                                     acc is None)
    return bmax, out, bool(wrapped), bool(has_nan)
