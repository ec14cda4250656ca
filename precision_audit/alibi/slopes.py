"""ALiBi slopes: the exact rule of Press et al. and Bloom's float32 construction (:data:`SLOPE_FUNCTIONS`).

>>> alibi_slopes(8).tolist()
[0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import check_above


__all__ = ["MAX_HEADS", "SLOPE_FUNCTIONS", "SLOPE_RULES", "alibi_slopes", "bloom_slopes", "check_heads", "mpt_slopes"]

MAX_HEADS = 4096  # Bloom-176B has 112
SLOPE_RULES = ("exact", "bloom")


def check_heads(num_heads: Any) -> int:
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)):
        raise ValueError(f"num_heads {num_heads!r} is not an integer")
    if num_heads < 1:
        raise ValueError(f"num_heads {num_heads} must be at least 1")
    if num_heads > MAX_HEADS:
        raise ValueError(f"num_heads {num_heads} exceeds {MAX_HEADS}")
    return int(num_heads)


def _slope_exponents(num_heads: int) -> list[tuple[int, int]]:
    """Slope of each head as ``2 ** (-8 * a / b)``, returned as ``(a, b)`` pairs.

    Powers of two: ``a = h + 1, b = n``.  Other counts (the ALiBi reference
    ``get_slopes``): the slopes of the closest lower power of two ``c``, then
    ``get_slopes(2c)[0::2][: n - c]``, i.e. ``a = 2t + 1, b = 2c``.
    """
    n = check_heads(num_heads)
    c = 1 << (n.bit_length() - 1)  # closest power of two <= n
    first = [(h + 1, c) for h in range(c)]
    extra = [(2 * t + 1, 2 * c) for t in range(n - c)]
    return first + extra


def alibi_slopes(num_heads: int) -> npt.NDArray[np.float64]:
    """The ALiBi slopes in float64 (the reference rule for any head count).

    The exponent ``-8a/b`` is a dyadic rational, exact in float64, so each
    slope is ``2.0 ** exponent`` rounded once.

    >>> alibi_slopes(2).tolist()
    [0.0625, 0.00390625]
    >>> [round(float(s), 6) for s in alibi_slopes(3)]
    [0.0625, 0.003906, 0.25]
    >>> alibi_slopes(0)
    Traceback (most recent call last):
    ...
    ValueError: num_heads 0 must be at least 1
    """
    return np.array([2.0 ** (-8.0 * a / b) for a, b in _slope_exponents(num_heads)])


def _round_f32(num: int, shift: int) -> float:
    """``num * 2**shift`` (num > 0) rounded to 24 significant bits, ties to even."""
    drop = num.bit_length() - 24
    if drop > 0:
        q, r = divmod(num, 1 << drop)
        half = 1 << (drop - 1)
        if r > half or (r == half and q & 1):
            q += 1
        num, shift = q, shift + drop
    return math.ldexp(num, shift)


def bloom_slopes(num_heads: int) -> npt.NDArray[np.float64]:
    """Slopes as Bloom's ``_get_alibi_slopes`` defines them, in float32.

    The base ``2 ** -(8 / c)`` is computed in Python float64 and stored as a
    float32 tensor (rounded once); each slope is ``base ** power`` in float32,
    here correctly rounded from the exact power.  torch's vectorised ``pow``
    (SLEEF, 1-ulp accuracy) can differ from this by one float32 ulp for some
    heads (e.g. head 14 of 32..63 heads); pass torch's slopes to
    :func:`alibi_bias` to reproduce a tensor bit for bit.

    >>> bloom_slopes(8).tolist() == alibi_slopes(8).tolist()
    True
    >>> float(bloom_slopes(12)[8]) == float(np.float32(2 ** -0.5))
    True
    """
    out = []
    for a, b in _slope_exponents(num_heads):
        # b is a power of two, so -8/b is a dyadic rational, exact in float64: the float64 base is
        # 2.0 ** (-8/b) rounded once by the power, then rounded again to float32 (the stored tensor).
        base = 2.0 ** (-8.0 / b)
        m, e = math.frexp(float(np.float32(base)))  # base = m * 2**e exactly
        mant, exp = int(m * 2**24), e - 24
        out.append(_round_f32(mant**a, exp * a))
    return np.array(out)


SLOPE_FUNCTIONS: dict[str, Callable[[int], npt.NDArray[np.float64]]] = {
    "exact": alibi_slopes,
    "bloom": bloom_slopes,
}


def mpt_slopes(num_heads: int, alibi_bias_max: float = 8.0) -> npt.NDArray[np.float64]:
    """MPT's slopes (float64): ``2**-(k * alibi_bias_max / n2)`` for k = 1..n2, n2 the next power of two,
    interleaved (odd then even indices) and cut to ``num_heads`` when that is not a power of two (llm-foundry's
    and transformers' ``build_mpt_alibi_tensor``).  ``alibi_bias_max = 8`` gives :func:`alibi_slopes`.

    >>> mpt_slopes(4).tolist()  # 2**-(8k/4)
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> bool((mpt_slopes(12) == alibi_slopes(12)).all()), mpt_slopes(4, 16.0).tolist()[:2]
    (True, [0.0625, 0.00390625])
    """
    n = check_heads(num_heads)
    bias_max = check_above(alibi_bias_max, "alibi_bias_max", 0.0)
    n2 = 1 << max(0, math.ceil(math.log2(n)))
    s = [2.0 ** -(k * bias_max / n2) for k in range(1, n2 + 1)]
    if n2 != n:
        s = (s[1::2] + s[::2])[:n]
    return np.array(s, dtype=np.float64)
