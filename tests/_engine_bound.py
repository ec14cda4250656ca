"""How far the two float32 evaluations of a schedule's inverse frequencies may lie apart: a derived bound.

The numpy engine (``inv_freq_in("float32")``) rounds every operation correctly; the torch engine
(``engine="torch"``) runs this machine's kernels, bit for bit what transformers computes (test_schedules).
Tests that compare a live module with the numpy engine's row first check the two engines' frequencies against
the bound below, then allow the angle error that bound implies: ``(L - 1) * radians_per_position``.  Nothing
in the bound is measured from the engines.

Derivation (forward error analysis, as in Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 2-3),
with u = 2**-24, float32's unit roundoff:

* Both engines evaluate the same formula (schedules' one written formula per rope type) on the same float32
  operands (Python scalars are rounded to float32 by both).  +, -, *, / are IEEE 754 operations in both,
  correctly rounded: an operation whose operands are identical in the two engines returns identical bits
  (the exponents 2i/d, YaRN's ramp weights, dynamic NTK's length ratio).  Such a value is *shared*: error 0.
* ``pow`` is where they part.  numpy's is correctly rounded: |error| <= u |x|.  torch's float32 CPU kernel is
  SLEEF's ``powf_u10`` (AVX2 / AVX-512; documented error bound 1.0 ulp) or the C library's ``powf`` with
  ``ATEN_CPU_CAPABILITY=default`` (glibc: 0.82 ulp): |error| <= 1 ulp <= 2u |x|.  Both return
  ``pow(x, 0) = 1`` exactly (C99 Annex F), so the exponent-0 frequency is shared.
* From there each engine's value is carried as (v, e): v the exact result of the formula on the shared
  operands (evaluated in float64), e a bound on |engine's value - v|.  An operation propagates its operands'
  bounds through its exact sensitivity, then adds its own rounding, u times the largest magnitude the
  result can have (2u for torch's pow):
  a +- b: ea + eb;  a * b: |a| eb + |b| ea + ea eb;  a / b: (ea + |a / b| eb) / (|b| - eb);
  a ** b (b shared): |v| (exp(|b| t) - 1), t = -ln(1 - ea / |a|) (covers (1 +- ea/|a|) ** b for any b).
  A comparison (Llama 3's wavelength bands) is decided by both engines as by the exact values when the
  operands lie more than their bounds apart; otherwise the bound refuses (AssertionError).
  float64 evaluates v to ~1e-16 relative, 10**8 times below u: every operation adds 2**-40 |v| for it.
* The two engines' values then lie within e_numpy + e_torch of each other; in float32 ulps at the smallest
  magnitude either can have, rounded up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from precision_audit.rope.schedules import _FORMULAS, RopeSchedule, ulp_distance

U = 2.0**-24  # float32 unit roundoff: a correctly rounded operation's relative error
F64_SLACK = 2.0**-40  # per operation: float64's own error in evaluating the exact value v
POW_ERROR = {"numpy": U, "torch": 2 * U}  # correctly rounded; faithful (<= 1 ulp <= 2u relative)


@dataclass(frozen=True)
class _Val:
    """One engine's value: ``v`` exact (shared where ``e == 0``, then it is the float32 both hold), ``e`` its bound."""

    v: np.ndarray
    e: np.ndarray


class _Bound:
    """The engine interface of ``schedules`` (arange, add, pow, ...) on (value, error bound) pairs."""

    def __init__(self, pow_error: float) -> None:
        self.pow_error = pow_error

    @staticmethod
    def _val(a: Any) -> _Val:
        if isinstance(a, _Val):
            return a
        v = np.asarray(np.float32(a), dtype=np.float64)  # a Python scalar, rounded to float32 by both engines
        return _Val(v, np.zeros_like(v))

    def _binary(self, a: Any, b: Any, exact: Callable[[Any, Any], Any],
                propagate: Callable[[_Val, _Val, np.ndarray], np.ndarray]) -> _Val:
        a, b = self._val(a), self._val(b)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = exact(a.v, b.v)
            shared_v = exact(a.v.astype(np.float32), b.v.astype(np.float32)).astype(np.float64)  # IEEE float32
            prop = propagate(a, b, v)
        shared = (a.e == 0) & (b.e == 0)
        e = prop + U * (np.abs(v) + prop) + F64_SLACK * np.abs(v)
        return _Val(np.where(shared, shared_v, v), np.where(shared, 0.0, e))

    def arange(self, start: int, stop: int, step: int = 1) -> _Val:
        v = np.arange(start, stop, step, dtype=np.float32).astype(np.float64)  # small integers: exact
        return _Val(v, np.zeros_like(v))

    def array(self, values: Sequence[float]) -> _Val:
        v = np.asarray(values, dtype=np.float32).astype(np.float64)
        return _Val(v, np.zeros_like(v))

    def integer(self, n: int) -> _Val:
        return self._val(n)

    def zeros(self, n: int) -> _Val:
        return _Val(np.zeros(n), np.zeros(n))

    def add(self, a: Any, b: Any) -> _Val:
        return self._binary(a, b, lambda x, y: x + y, lambda a, b, v: a.e + b.e)

    def sub(self, a: Any, b: Any) -> _Val:
        return self._binary(a, b, lambda x, y: x - y, lambda a, b, v: a.e + b.e)

    def mul(self, a: Any, b: Any) -> _Val:
        return self._binary(a, b, lambda x, y: x * y, lambda a, b, v: np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e)

    def div(self, a: Any, b: Any) -> _Val:
        def propagate(a: _Val, b: _Val, v: np.ndarray) -> np.ndarray:
            assert np.all(b.e < np.abs(b.v)), "a divisor's bound reaches zero"
            return (a.e + np.abs(v) * b.e) / (np.abs(b.v) - b.e)

        return self._binary(a, b, lambda x, y: x / y, propagate)

    def pow(self, a: Any, b: Any) -> _Val:
        a, b = self._val(a), self._val(b)
        assert np.all(b.e == 0) and np.all(a.v > 0), "every formula raises a positive base to shared exponents"
        v = a.v**b.v
        t = a.e / a.v
        assert np.all(t < 0.5)
        prop = v * np.expm1(np.abs(b.v) * -np.log1p(-t))
        e = prop + self.pow_error * (v + prop) + F64_SLACK * v
        v, e = np.broadcast_arrays(v, e)
        one = np.broadcast_to(b.v == 0, v.shape)  # pow(x, 0) = 1 exactly in both engines
        return _Val(np.where(one, 1.0, v), np.where(one, 0.0, e))

    def _decided(self, a: Any, b: Any) -> tuple[_Val, _Val]:
        a, b = self._val(a), self._val(b)
        shared = (a.e == 0) & (b.e == 0)
        assert np.all(shared | (np.abs(a.v - b.v) > a.e + b.e)), "a comparison within the engines' bound"
        return a, b

    def gt(self, a: Any, b: Any) -> np.ndarray:
        a, b = self._decided(a, b)
        return a.v > b.v

    def lt(self, a: Any, b: Any) -> np.ndarray:
        a, b = self._decided(a, b)
        return a.v < b.v

    def where(self, cond: Any, a: Any, b: Any) -> _Val:
        a, b = self._val(a), self._val(b)
        return _Val(np.where(cond, a.v, b.v), np.where(cond, a.e, b.e))

    def clamp(self, a: Any, lo: float, hi: float) -> _Val:
        a = self._val(a)  # clamping moves two values no further apart
        return _Val(np.clip(a.v, lo, hi), a.e)

    def cat(self, a: Any, b: Any) -> _Val:
        a, b = self._val(a), self._val(b)
        return _Val(np.concatenate([a.v, b.v]), np.concatenate([a.e, b.e]))

    def result(self, a: Any) -> _Val:
        return self._val(a)


def _evaluate(schedule: RopeSchedule, seq_len: int | None, engine: str) -> _Val:
    return _FORMULAS[schedule.scaling](schedule, _Bound(POW_ERROR[engine]), seq_len)


def engine_bound(schedule: RopeSchedule, seq_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per frequency: (most float32 ulps, most radians per position) between the two engines' float32 values."""
    num, tor = _evaluate(schedule, seq_len, "numpy"), _evaluate(schedule, seq_len, "torch")
    gap = num.e + tor.e
    low = np.abs(num.v) - np.maximum(num.e, tor.e)  # the smallest magnitude either engine's value can have
    assert np.all((gap == 0) | (low > 0))
    with np.errstate(divide="ignore"):
        ulp = np.ldexp(1.0, np.frexp(np.where(low > 0, low, 1.0))[1] - 24)  # float32 spacing in low's binade
    return np.where(gap == 0, 0, np.ceil(gap / ulp)).astype(np.int64), gap


def assert_engines_within_bound(schedule: RopeSchedule, seq_len: int | None = None) -> float:
    """Assert the numpy and torch engines' float32 frequencies within :func:`engine_bound` (ulps, per frequency).

    Returns the bound's largest frequency difference in radians per position: the angle ``m * theta_i`` of the
    two engines then differs by at most ``(L - 1)`` times that, and so may a max rotation error.
    """
    ulps, radians = engine_bound(schedule, seq_len)
    ours = schedule.inv_freq_in("float32", seq_len)
    theirs = schedule.inv_freq_in("float32", seq_len, engine="torch")
    dist = ulp_distance(ours, theirs, "float32")
    assert np.all(dist <= ulps), (schedule.describe(), seq_len, dist.tolist(), ulps.tolist())
    return float(radians.max())


__all__ = ["U", "assert_engines_within_bound", "engine_bound"]
