"""The arithmetic a schedule formula is written against: one set of operations, two ways to run them.

A formula of :mod:`.rope_types` calls ``o.div``, ``o.pow``, ``o.arange``, ... on an arithmetic context ``o``:

* :class:`_Rounded` (``engine="numpy"``): every operation exact, then correctly rounded to the format (round to
  nearest even), pow through mpmath; the same on every machine;
* :class:`_Torch` (``engine="torch"``): the same operations with real torch tensors in the format's torch dtype,
  this machine's kernels (faithful, not correctly rounded).

Operands are arrays (values of the context's format) or Python numbers (the scalars of the real code: torch
turns a Python float operand of a float32/bfloat16/float16 op into the op's math type, float32, so they are
rounded to float32 there).

>>> o = _Rounded("bfloat16")
>>> o.div(1.0, o.pow(10000.0, o.div(o.arange(0, 8, 2), 8))).tolist()  # 1/1000 -> 131 * 2**-17
[1.0, 0.10009765625, 0.010009765625, 0.00099945068359375]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..formats import Format, get_format, round_to

__all__ = ["round_mp"]

F64 = npt.NDArray[np.float64]


def round_mp(v: Any, fmt: Format) -> float:
    """An mpmath value correctly rounded to ``fmt`` (a :class:`~precision_audit.formats.Format`).

    float(v) rounds to nearest float64; if inexact it is turned into the
    round-to-odd float64 value (step toward v when its last bit is even), which
    :func:`round_to` rounds correctly to any narrower format.
    """
    import mpmath

    x = float(v)
    if fmt.name == "float64" or not math.isfinite(x) or mpmath.mpf(x) == v:
        return x if fmt.name == "float64" else float(round_to(x, fmt)[()])
    if int(np.float64(x).view(np.uint64)) & 1 == 0:
        x = float(np.nextafter(x, math.inf if v > x else -math.inf))
    return float(round_to(x, fmt)[()])


class _Rounded:
    """Every operation exact, then correctly rounded to ``fmt`` (round to nearest even).

    + - * / are done in float64 and rounded once more: double rounding through
    53 bits is innocuous for these operations when the target has <= 25 bits
    (Figueroa 1995), and float64 itself is the exact result's nearest value.
    pow goes through mpmath.  Python scalars are rounded to the op's math type:
    float64 for a float64 context, float32 otherwise (as torch does).
    """

    def __init__(self, fmt: str | Format) -> None:
        self.fmt = get_format(fmt)
        self.scalar_fmt = self.fmt if self.fmt.name == "float64" else get_format("float32")

    def _arr(self, a: Any) -> F64:
        if isinstance(a, np.ndarray):
            return a
        return round_to(np.float64(a), self.scalar_fmt)

    def _r(self, x: F64) -> F64:
        return round_to(x, self.fmt)

    def arange(self, start: int, stop: int, step: int = 1) -> F64:
        return self._r(np.arange(start, stop, step, dtype=np.float64))  # int64 .to(fmt)

    def array(self, values: Sequence[float]) -> F64:
        return self._r(round_to(np.asarray(values, dtype=np.float64), self.scalar_fmt))

    def integer(self, n: int) -> F64:
        return self._r(np.float64(n))  # an int64 tensor entering a float op

    def zeros(self, n: int) -> F64:
        return np.zeros(n)

    def add(self, a: Any, b: Any) -> F64:
        return self._r(self._arr(a) + self._arr(b))

    def sub(self, a: Any, b: Any) -> F64:
        return self._r(self._arr(a) - self._arr(b))

    def mul(self, a: Any, b: Any) -> F64:
        return self._r(self._arr(a) * self._arr(b))

    def div(self, a: Any, b: Any) -> F64:
        with np.errstate(divide="ignore"):
            return self._r(self._arr(a) / self._arr(b))

    def pow(self, a: Any, b: Any) -> F64:
        import mpmath

        x, y = np.broadcast_arrays(self._arr(a), self._arr(b))
        with mpmath.workprec(160):
            out = [round_mp(mpmath.power(mpmath.mpf(float(p)), mpmath.mpf(float(q))), self.fmt)
                   for p, q in zip(x.ravel(), y.ravel())]
        return np.array(out, dtype=np.float64).reshape(x.shape)

    def where(self, cond: Any, a: Any, b: Any) -> F64:
        return np.where(cond, self._arr(a), self._arr(b))

    def gt(self, a: Any, b: Any) -> Any:
        return self._arr(a) > self._arr(b)

    def lt(self, a: Any, b: Any) -> Any:
        return self._arr(a) < self._arr(b)

    def clamp(self, a: Any, lo: float, hi: float) -> F64:
        return np.clip(self._arr(a), lo, hi)

    def cat(self, a: Any, b: Any) -> F64:
        return np.concatenate([a, b])

    def result(self, a: Any) -> F64:
        return np.asarray(self._arr(a), dtype=np.float64)


class _Torch:
    """The same operations with real torch tensors in ``fmt`` (this machine's kernels)."""

    def __init__(self, fmt: str | Format) -> None:
        import torch

        self.torch = torch
        f = get_format(fmt)
        if f.torch_dtype is None:
            raise ValueError(f"format {f.name!r} has no torch dtype; the torch engine cannot run it")
        self.dtype = f.torch_dtype

    def arange(self, start: int, stop: int, step: int = 1) -> Any:
        return self.torch.arange(start, stop, step, dtype=self.torch.int64).to(self.dtype)

    def array(self, values: Sequence[float]) -> Any:
        return self.torch.tensor(list(values), dtype=self.torch.float32).to(self.dtype)

    def integer(self, n: int) -> Any:
        return self.torch.tensor(n, dtype=self.torch.int64).to(self.dtype)

    def zeros(self, n: int) -> Any:
        return self.torch.zeros(n, dtype=self.dtype)

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def sub(self, a: Any, b: Any) -> Any:
        return a - b

    def mul(self, a: Any, b: Any) -> Any:
        return a * b

    def div(self, a: Any, b: Any) -> Any:
        return a / b

    def pow(self, a: Any, b: Any) -> Any:
        return a**b

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.torch.where(cond, a, b)

    def gt(self, a: Any, b: Any) -> Any:
        return a > b

    def lt(self, a: Any, b: Any) -> Any:
        return a < b

    def clamp(self, a: Any, lo: float, hi: float) -> Any:
        return self.torch.clamp(a, lo, hi)

    def cat(self, a: Any, b: Any) -> Any:
        return self.torch.cat([a, b])

    def result(self, a: Any) -> F64:
        t = a if isinstance(a, self.torch.Tensor) else self.torch.tensor(a, dtype=self.dtype)
        return t.to(self.torch.float64).numpy()
