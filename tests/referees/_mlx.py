"""MLX's ``mx.fast.rope`` run on (1, 0) pairs: the real kernel as a referee (tests only).

A pair (x1, x2) = (1, 0) rotated by angle a comes out as (cos a, sin a), each value as the kernel
stores it in the input dtype.  On a CPU stream ``mx.fast.rope`` runs the fallback composed of MLX
ops (ml-explore/mlx, mlx/fast.cpp, ``fast::rope``; ``RoPE::use_fallback`` in
mlx/backend/metal/rope.cpp returns true for the CPU), which is what the Linux wheel ``mlx[cpu]``
runs.  ``mlx`` is imported lazily; callers get it through :func:`referees.need`.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BIT_EXACT", "DTYPES", "fallback_inv_freq", "mlx_exp", "mlx_rope_pairs"]

F64 = npt.NDArray[np.float64]
DTYPES = ("float32", "float16", "bfloat16")
# x86-64: MLX's CPU backend runs scalar float ops with std::fma (simd::max_size 1), so its exp / sin / cos
# are determined bit for bit by the source; elsewhere (NEON) the compiler may contract differently
BIT_EXACT = platform.machine().lower() in ("x86_64", "amd64")
_CHUNK = 1 << 15  # positions per kernel call: bounds memory at long contexts


def fallback_inv_freq(dims: int, base: float) -> npt.NDArray[np.float32]:
    """The inverse frequencies of ``fast::rope``'s fallback without ``freqs``, computed by MLX's own ops on a
    CPU stream as mlx/fast.cpp composes them: ``exp(arange(0, -d/2, -1, float32) * float32(logf(base) / (d/2)))``.

    ``base`` is a C++ ``float`` there and ``std::log(float)`` is logf: the step is the float32 quotient of
    logf(base) (correctly rounded here, as glibc's logf is for these bases) by d/2.  The exp is MLX's CPU
    kernel (``simd::exp``), the one the rope fallback runs.
    """
    import mlx.core as mx

    half = dims // 2
    step = np.float32(math.log(np.float32(base))) / np.float32(half)
    with mx.stream(mx.cpu):
        return np.array(mx.exp(mx.arange(0, -half, -1, dtype=mx.float32) * mx.array(step)))


def mlx_exp(x: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """MLX's float32 ``exp`` (the CPU kernel ``simd::exp``) of float32 values."""
    import mlx.core as mx

    with mx.stream(mx.cpu):
        return np.array(mx.exp(mx.array(np.asarray(x, dtype=np.float32))))


def _pairs(n: int, dims: int, traditional: bool, dtype: Any) -> Any:
    """``n`` rows of ``dims`` features with every pair set to (1, 0) in the kernel's layout."""
    import mlx.core as mx

    x = np.zeros((n, 1, 1, dims), dtype=np.float32)
    if traditional:
        x[..., 0::2] = 1.0  # pairs are (x[2i], x[2i+1])
    else:
        x[..., : dims // 2] = 1.0  # pairs are (x[i], x[i + dims/2])
    return mx.array(x).astype(dtype)


def _split(out: Any, dims: int, traditional: bool) -> tuple[F64, F64]:
    import mlx.core as mx

    y = np.array(out.astype(mx.float32), dtype=np.float64).reshape(-1, dims)  # bf16/f16 -> f32 is exact
    if traditional:
        return y[:, 0::2], y[:, 1::2]
    return y[:, : dims // 2], y[:, dims // 2 :]


def mlx_rope_pairs(
    positions: Sequence[int] | npt.NDArray[np.integer],
    dims: int,
    base: float | None,
    scale: float = 1.0,
    traditional: bool = False,
    freqs: Sequence[float] | npt.NDArray[np.floating] | None = None,
    dtype: str = "float32",
) -> tuple[F64, F64]:
    """What ``mx.fast.rope`` makes of (1, 0) pairs at ``positions``: (cos-like, sin-like), float64.

    Each row is one position, given to the kernel as its ``offset`` (a vector of offsets, one per
    batch row, sequence length 1), so any positions can be asked for.  ``freqs`` (``dims/2``
    periods, as mlx-lm passes them) replaces ``base``; ``base`` is then ignored.

    >>> c, s = mlx_rope_pairs([0, 1], 4, 10000.0)  # doctest: +SKIP
    >>> c.shape, float(c[0, 0]), float(s[0, 0])  # doctest: +SKIP
    ((2, 2), 1.0, 0.0)
    """
    import mlx.core as mx

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: valid are {', '.join(DTYPES)}")
    if dims <= 0 or dims % 2:
        raise ValueError(f"dims {dims!r} must be a positive even integer")
    pos = np.asarray(positions, dtype=np.int64).ravel()
    if pos.size and (pos.min() < 0 or pos.max() > np.iinfo(np.int32).max):
        raise ValueError(f"positions must lie in [0, 2**31); got {int(pos.min())}..{int(pos.max())}")
    mx_freqs = None if freqs is None else mx.array(np.asarray(freqs, dtype=np.float32))
    mx_base = None if freqs is not None else float(base)  # type: ignore[arg-type]
    mx_dtype = getattr(mx, dtype)
    cos_parts, sin_parts = [], []
    with mx.stream(mx.cpu):
        for start in range(0, pos.size, _CHUNK):
            chunk = pos[start : start + _CHUNK]
            out = mx.fast.rope(_pairs(chunk.size, dims, traditional, mx_dtype), dims, traditional=traditional,
                               base=mx_base, scale=scale, offset=mx.array(chunk.astype(np.int32)), freqs=mx_freqs)
            c, s = _split(out, dims, traditional)
            cos_parts.append(c)
            sin_parts.append(s)
    if not cos_parts:
        return np.zeros((0, dims // 2)), np.zeros((0, dims // 2))
    return np.concatenate(cos_parts), np.concatenate(sin_parts)
