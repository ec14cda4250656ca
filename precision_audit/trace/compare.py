"""The tracer's comparisons: a real tensor against its float64 shadow (or an op's float64 value), in blocks.

:func:`error_between` is the largest difference; :func:`count_changed` counts the values that differ from the
shadow rounded once to the real tensor's dtype; :func:`half_ulps` says an op's addition in half-ulps of its
format; ``_first_inexact`` finds the position nearest zero that an integer-valued shadow's real tensor misses.

>>> import torch
>>> error_between(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.25], dtype=torch.float64))
0.25
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["count_changed", "error_between", "half_ulps"]


def error_between(real: Any, shadow: Any) -> float:
    """max |real - shadow| as float64 (inf where one is finite and the other not, 0 where both equal)."""
    import torch

    if not (isinstance(real, torch.Tensor) and isinstance(shadow, torch.Tensor)) or real.numel() == 0:
        return 0.0
    if real.dtype == torch.bool or real.is_complex():
        return float((real != shadow.to(real.dtype)).any())
    if real.shape != shadow.shape:
        return math.inf
    (top,), _ = _max_abs_diffs(real, [shadow])  # NaN when any difference is NaN (inf - inf, or a NaN on one side)
    return top if math.isfinite(top) else _error_slow(real, shadow)


_BLOCK = 1 << 18  # elements per step of a comparison (2 MiB of float64 scratch): 2**15 cost torch's per-op
# overhead on every 32K elements (128K x 128 outputs: 21 ms a comparison against 10 ms)


def _max_abs_diffs(real: Any, others: Sequence[Any], locate: bool = False) -> tuple[list[float], int | None]:
    """max |real - other| in float64 for each of ``others`` (same shape), in cache-sized blocks: each block of
    ``real`` converted to float64 once (exact), each difference rounded once; NaN where a difference is NaN.
    ``locate``: also the flat index of the last one's largest difference (else None)."""
    import torch

    r = real.detach().reshape(-1)
    os_ = [o.detach().reshape(-1) for o in others]
    n = r.numel()
    k = min(n, _BLOCK)
    up, diff = torch.empty(k, dtype=torch.float64), torch.empty(k, dtype=torch.float64)
    tops = [torch.zeros((), dtype=torch.float64) for _ in os_]
    peaks = []  # locate: each block's largest difference
    for a in range(0, n, k):
        m = min(n, a + k) - a
        u, d = up[:m], diff[:m]
        u.copy_(r[a:a + m])
        for j, o in enumerate(os_):
            torch.sub(u, o[a:a + m], out=d)
            top = d.abs_().max()
            tops[j] = torch.maximum(tops[j], top)
            if locate and j == len(os_) - 1:
                peaks.append(top)
    if not locate:
        return [float(t) for t in tops], None
    a = k * int(torch.argmax(torch.stack(peaks)))  # the block holding the largest (a NaN counts as the largest)
    m = min(n, a + k) - a
    d = diff[:m]
    torch.sub(up[:m].copy_(r[a:a + m]), os_[-1][a:a + m], out=d)
    return [float(t) for t in tops], a + int(torch.argmax(d.abs_()))


def count_changed(real: Any, shadow: Any) -> int:
    """How many values of ``real`` differ from ``shadow`` rounded once to ``real``'s dtype (nan equal to nan),
    in blocks (:data:`_BLOCK`), the rounded block in one reused buffer.

    >>> import torch
    >>> count_changed(torch.tensor([1.0, 2.0, float("nan")]), torch.tensor([1.0, 2.5, float("nan")], dtype=torch.float64))
    1
    """
    import torch

    r, s = real.detach().reshape(-1), shadow.detach().reshape(-1)
    n = r.numel()
    k = max(1, min(n, _BLOCK))
    buf, ne = torch.empty(k, dtype=real.dtype), torch.empty(k, dtype=torch.bool)
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(real.element_size()) \
        if real.is_floating_point() else None
    changed = 0
    for a in range(0, n, k):
        m = min(n, a + k) - a
        x, b = r[a:a + m], buf[:m].copy_(s[a:a + m])
        if bits is None:
            changed += int(torch.ne(x, b, out=ne[:m]).sum())
            continue
        torch.ne(x.view(bits), b.view(bits), out=ne[:m])  # other bits: a change, unless equal as numbers
        if int(torch.count_nonzero(ne[:m])):  # (-0 beside 0) or both nan
            xm, bm = x[ne[:m]], b[ne[:m]]
            changed += int(torch.count_nonzero(~((xm == bm) | (xm.isnan() & bm.isnan()))))
    return changed


def half_ulps(added: float, exact: float, dtype: str) -> float | None:
    """``added`` in half-ulps of ``dtype`` at ``exact`` (the op's own float64 value where it adds the most): 1 is
    one correct rounding's worst case; None for an integer or unknown dtype, or a non-finite value.

    >>> half_ulps(8.0, 4095.0, "bfloat16"), half_ulps(2.0**-9, 0.99, "bfloat16"), half_ulps(1.0, 3.0, "int64")
    (1.0, 1.0, None)
    """
    from ..formats import get_format, spacing

    try:
        fmt = get_format(dtype)
    except ValueError:
        return None
    if not (math.isfinite(added) and math.isfinite(exact)):
        return None
    return 2 * added / float(spacing([exact], fmt)[0])  # not added / (ulp / 2): half of float64's 5e-324 is 0


def _errors(real: Any, shadow: Any, local: Any, carried: float | None) -> tuple[float, float, float | None]:
    """(max |real - shadow|, max |real - local|, the float64 value ``local`` holds where the second is reached)
    of one op's output.  An op that only moves values has no ``local`` (it adds nothing) and may pass
    ``carried``, the largest error its inputs carry; otherwise both comparisons share one float64 conversion of
    ``real`` per block (:func:`_max_abs_diffs`).  The value is None where not located."""
    import torch

    if local is None:
        return (error_between(real, shadow) if carried is None else carried), 0.0, None
    plain = all(isinstance(t, torch.Tensor) and t.shape == real.shape for t in (real, shadow, local)) \
        and real.numel() > 0 and real.dtype != torch.bool and not real.is_complex()
    if not plain:
        return error_between(real, shadow), error_between(real, local), None
    (err, add), at = _max_abs_diffs(real, [shadow, local], locate=True)
    value = float(local.detach().reshape(-1)[at]) if at is not None and math.isfinite(add) else None
    return (err if math.isfinite(err) else _error_slow(real, shadow),
            add if math.isfinite(add) else _error_slow(real, local), value)


def _error_slow(real: Any, shadow: Any) -> float:
    """:func:`error_between` where a difference is not finite: equal values (infinities, NaN beside NaN) count 0,
    the rest inf."""
    import torch

    a, b = real.detach().double(), shadow.detach().double()
    d = (a - b).abs()
    same = (a == b) | (a.isnan() & b.isnan())
    d = torch.where(same, torch.zeros_like(d), d)
    d = torch.where(d.isnan(), torch.full_like(d, math.inf), d)
    return float(d.max())


_PREFIX = 4096  # elements checked first: a shadow with a non-integer there is not integer-valued


def _first_inexact(real: Any, shadow: Any) -> int | None:
    """For an integer-valued shadow (positions, distances): the shadow's value nearest zero among the elements
    the real one misses (an increasing ``arange``: its first inexact element; distances -(L-1)..0: the same
    magnitude, negative)."""
    import torch

    if real.numel() == 0 or real.dtype == torch.bool or real.is_complex() or real.shape != shadow.shape:
        return None
    s = shadow.detach().reshape(-1)
    if s.is_floating_point():
        head = s[:_PREFIX]
        if not bool((head == head.round()).all()) or not bool((s == s.round()).all()):
            return None
    bad = (real.detach().reshape(-1).double() != s.double()).nonzero().reshape(-1)
    if bad.numel() == 0:
        return None
    missed = s[bad]
    return int(missed[int(missed.abs().argmin())])
