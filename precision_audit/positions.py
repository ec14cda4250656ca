"""Position-id auditor: what happens to the positions 0..L-1 cast to a format.

Two independent computations give the same numbers:

* :func:`measure_positions` rounds every position (in chunks, so any length up
  to 2**53 runs in bounded memory) and counts; one pass serves every shorter
  length of a sweep.
* :func:`predict_positions` derives each metric in closed form from the
  format's binade structure, so it answers L = 2**40 instantly.

>>> r = predict_positions(8192, "bfloat16")
>>> r.exact_count, r.exact_fraction, r.distinct_values, r.first_inexact, r.max_run
(896, 0.109375, 897, 257, 33)
>>> m = measure_positions(8192, "bfloat16")[0]
>>> m.method, m.max_run == r.max_run, m.collision_fraction == r.collision_fraction
('empirical', True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .checks import check_callable, check_choice, check_int, check_lengths, check_names, describe
from .rows import Row
from .formats import Format, get_format, round_into
from .verdicts import positions_verdict

__all__ = [
    "BAICHUAN_DTYPES",
    "BAICHUAN_LENGTHS",
    "CONSTRUCTIONS",
    "CPU_ARANGE_LIMIT",
    "EMPIRICAL_LIMIT",
    "PositionRow",
    "audit_positions",
    "construction",
    "cpu_arange_rows",
    "measure_positions",
    "positions_to_scan",
    "predict_positions",
    "reproduce_baichuan",
]

Method = Literal["auto", "empirical", "closed-form"]
Engine = Literal["numpy", "torch", "torch-arange"]

EMPIRICAL_LIMIT = 2**26  # `auto` measures lengths up to here, predicts beyond
MAX_MEASURED = 2**32  # measuring more would take many minutes
CHUNK = 2**20


@dataclass(frozen=True)
class PositionRow(Row):
    """What the positions 0..length-1 become when cast to ``dtype``.

    * ``exact_count`` / ``exact_fraction``: positions whose value survives.
    * ``distinct_values``: different values among the ``length`` results
      (all non-finite results count as one value).
    * ``max_run``: most consecutive positions sharing one value.
    * ``collision_fraction``: share of positions sharing their value with
      at least one other position.
    * ``max_abs_error``: largest ``|rounded - exact|`` over finite results.
    * ``first_inexact``: smallest position that does not survive, or None.
    * ``non_finite`` / ``overflow_position``: how many positions become inf
      or nan, and the first that does (None if none).
    * ``method``: ``"empirical"`` (measured) or ``"closed-form"`` (derived).
    """

    dtype: str
    length: int
    exact_count: int
    exact_fraction: float
    distinct_values: int
    max_run: int
    collision_fraction: float
    max_abs_error: float
    first_inexact: int | None
    non_finite: int
    overflow_position: int | None
    method: str

    @property
    def colliding_positions(self) -> int:
        """Positions whose value another (earlier) position already has: ``length - distinct_values``."""
        return self.length - self.distinct_values

    @property
    def verdict(self) -> str:
        """``safe`` when every position keeps a value of its own and none overflows, else ``broken``
        (:func:`precision_audit.verdicts.positions_verdict`)."""
        return positions_verdict(self.colliding_positions, self.non_finite)



PositionAudit = PositionRow  # the name before the rows were named *Row (kept for existing code)

LABEL: tuple[str, str | None] = ("position ids in the dtype", "build position ids as int64/float32, never in the dtype")
"""Position ids as the bottom line names them, and the fix."""

# --------------------------------------------------------------------------
# Closed form.  All arithmetic on Python ints: exact for any length.
# An integer n >= 2**p lies in the binade [2**e, 2**(e+1)) with e = bit_length-1
# and there the representable numbers are the multiples of s = 2**(e-p+1).


def _step(v: int, p: int) -> int:
    """Spacing of the binade holding the integer v >= 1 (1 below 2**p)."""
    return 1 << max(v.bit_length() - p, 0)


def _round_int(n: int, p: int) -> int:
    """Round the integer n >= 0 to p significant bits, ties to even (no overflow)."""
    s = _step(n, p)
    q, rem = divmod(n, s)
    if 2 * rem > s or (2 * rem == s and q % 2):
        q += 1
    return q * s


def _count_representable(x: int, p: int) -> int:
    """How many integers in [0, x] have p significant bits (x >= 0)."""
    if x < 2**p:
        return x + 1
    e = x.bit_length() - 1
    return 2**p + (e - p) * 2 ** (p - 1) + (x - 2**e) // _step(x, p) + 1


def _preimage(v: int, p: int) -> tuple[int, int]:
    """Smallest and largest integer that round to the representable integer v."""
    if v == 0:
        return 0, 0
    s_up = _step(v, p)
    s_down = _step(v - 1, p)  # spacing below v (smaller at a binade boundary)
    even = (v // s_up) % 2 == 0  # significand parity; 2**e is even both ways
    # Midpoints v +- s/2, doubled to stay integral; a tie goes to the even side.
    lo2, hi2 = 2 * v - s_down, 2 * v + s_up
    lo = lo2 // 2 + (lo2 % 2 or not even)
    hi = hi2 // 2 - (hi2 % 2 == 0 and not even)
    return lo, hi


def _max_full_run(u: int, p: int) -> int:
    """Largest preimage size among representable integers 0..u.

    Sizes grow with the binade: below 2**p every value is alone; in the binade
    of u the boundary 2**e, the odd significands (size s-1) and the even ones
    (size s+1) are the only three kinds, and each beats every lower binade.
    """
    if u < 2**p:
        return 1
    e = u.bit_length() - 1
    s = _step(u, p)
    j_u = (u - 2**e) // s
    sizes = [_preimage(2**e + j * s, p) for j in range(min(j_u, 2) + 1)]
    return max(hi - lo + 1 for lo, hi in sizes)


def predict_positions(length: int, dtype: str | Format) -> PositionRow:
    """Position metrics for ``length`` and ``dtype`` in closed form.

    Exact for any length up to 2**53; costs O(1).

    >>> predict_positions(2**40, "bf16").distinct_values
    4353
    >>> r = predict_positions(65536, "float16")
    >>> r.non_finite, r.overflow_position, r.first_inexact
    (16, 65520, 2049)
    """
    f = get_format(dtype)
    lens = check_lengths(length)
    if len(lens) != 1:
        raise ValueError(f"length {describe(length)} must be one length (measure_positions takes several)")
    (L,) = lens
    if f.rounding == "toward-zero":
        return _predict_truncated(L, f)
    p, top = f.significand_bits, f.overflow_integer
    saturate = f.overflow == "saturate"
    n_last = min(L, top) - 1  # last position that rounds without overflow
    non_finite = 0 if saturate else max(L - top, 0)

    exact = _count_representable(min(L - 1, math.floor(f.max_finite)), p)
    first_inexact = f.max_exact_integer + 1
    # Largest error: in the binade of n_last up to s/2, in the one below s/4.
    err = 0.0
    if n_last > 2**p:
        e = n_last.bit_length() - 1
        s = _step(n_last, p)
        err = float(max(min(n_last - 2**e, s // 2), s // 4 if e > p else 0))
    if saturate and L > top:
        err = max(err, (L - 1) - f.max_finite)

    # The last finite value and the run of positions that share it.
    if saturate and L > top:
        v_last: float = f.max_finite
        if f.max_finite.is_integer():
            lo_last = _preimage(int(f.max_finite), p)[0]
        else:  # a non-integer maximum is hit only by saturation
            lo_last = top
        hi_last = L - 1
    else:
        v_last = _round_int(n_last, p)
        lo_last, hi_last = _preimage(int(v_last), p)
        hi_last = min(hi_last, n_last)
    run_last = hi_last - lo_last + 1
    below = math.ceil(v_last)  # values hit before the last: representable integers < v_last
    distinct = _count_representable(below - 1, p) + 1 + (non_finite > 0)
    prev_run = _max_full_run(below - 1, p) if below > 0 else 0
    max_run = max(prev_run, run_last, non_finite)

    # Positions alone with their value: values below 2**p, odd significands in
    # the binade [2**p, 2**(p+1)) (spacing 2), plus the last runs if of size 1.
    singles = min(below, 2**p)
    if below > 2**p:
        j_max = min((below - 2**p + 1) // 2 - 1, 2 ** (p - 1) - 1)  # 2**p + 2j < v_last
        singles += (j_max + 1) // 2
    singles += (run_last == 1) + (non_finite == 1)

    return PositionRow(
        dtype=f.name,
        length=L,
        exact_count=exact,
        exact_fraction=exact / L,
        distinct_values=distinct,
        max_run=max_run,
        collision_fraction=(L - singles) / L,
        max_abs_error=err,
        first_inexact=first_inexact if first_inexact < L else None,
        non_finite=non_finite,
        overflow_position=top if non_finite else None,
        method="closed-form",
    )


def _predict_truncated(L: int, f: Format) -> PositionRow:
    """:func:`predict_positions` for a format that truncates (``tf32-rz``): n becomes n - n mod s(n).

    Every representable integer is hit by itself and the s - 1 integers above it (s: the spacing of its
    binade), so values are the representable integers up to L - 1, a full run is a spacing, the last run
    ends at L - 1, and only values below 2**p stand alone.  No integer below 2**1024 truncates to inf.

    >>> r = predict_positions(131072, "tf32-rz")
    >>> r.exact_count, r.distinct_values, r.max_abs_error, r.max_run
    (8192, 8192, 63.0, 64)
    """
    p = f.significand_bits
    last = L - 1
    v_last = last - (last % _step(last, p) if last >= 2**p else 0)
    run_last = last - v_last + 1
    exact = _count_representable(last, p)
    err = 0
    if last >= 2**p:
        e = last.bit_length() - 1
        s = _step(last, p)
        err = max(min(last - 2**e, s - 1), s // 2 - 1 if e > p else 0)
    max_run = max(run_last, _step(v_last - 1, p) if v_last > 0 else 0)
    singles = min(v_last, 2**p) + (run_last == 1)
    first = f.max_exact_integer + 1
    return PositionRow(dtype=f.name, length=L, exact_count=exact, exact_fraction=exact / L, distinct_values=exact,
                       max_run=max_run, collision_fraction=(L - singles) / L, max_abs_error=float(err),
                       first_inexact=first if first < L else None, non_finite=0, overflow_position=None,
                       method="closed-form")


# --------------------------------------------------------------------------
# Empirical: round every position, count, one pass for a sweep of lengths.


class _Tally:
    """Running counts over the positions seen so far (a prefix 0..n-1)."""

    def __init__(self) -> None:
        self.n = 0
        self.exact = 0
        self.non_finite = 0
        self.first_non_finite: int | None = None
        self.first_inexact: int | None = None
        self.max_err = 0.0
        self.runs = 0  # values seen (runs of equal values, in order)
        self.prev = np.nan  # value of the open run
        self.run = 0  # length of the open run
        self.max_closed = 0
        self.singles_closed = 0
        self._iota = np.zeros(0)

    def add(self, values: np.ndarray) -> None:
        """Count the next ``len(values)`` rounded positions (float64, in position order)."""
        n0, k = self.n, len(values)
        if k == 0:
            return
        if self._iota.size != k:
            self._iota = np.arange(k, dtype=np.float64)
        d = np.subtract(values, float(n0))  # exact: integers below 2**53 (or inf, nan)
        d -= self._iota  # value - position
        hi, lo = float(d.max()), float(d.min())
        if not (math.isfinite(hi) and math.isfinite(lo)):
            return self._add_any(values)
        exact = int(np.count_nonzero(d == 0))
        self.exact += exact
        if self.first_inexact is None and exact < k:
            self.first_inexact = n0 + int(np.argmax(d != 0))
        self.max_err = max(self.max_err, hi, -lo)
        step = np.subtract(values[1:], values[:-1], out=d[: k - 1])
        if (k > 1 and step.min() < 0) or (n0 and values[0] < self.prev):
            raise RuntimeError("rounded positions are not monotone")
        starts = np.flatnonzero(step)
        starts += 1
        if not n0 or values[0] != self.prev:
            starts = np.r_[0, starts]
        self._runs(starts, k)
        self.prev = values[-1]
        self.n += k

    def _add_any(self, values: np.ndarray) -> None:
        """:meth:`add` for a chunk with non-finite values (every one counts as one value, inf)."""
        n0, k = self.n, len(values)
        finite = np.isfinite(values)
        if not finite.any():  # past the overflow: one value, inf
            self.first_inexact = n0 if self.first_inexact is None else self.first_inexact
            self.first_non_finite = n0 if self.first_non_finite is None else self.first_non_finite
            self.non_finite += k
            self._runs(np.zeros(0 if n0 and self.prev == np.inf else 1, dtype=np.intp), k)
            self.prev = np.inf
            self.n += k
            return
        pos = np.arange(n0, n0 + k, dtype=np.float64)
        same = values == pos
        self.exact += int(np.count_nonzero(same))
        if self.first_inexact is None and not same.all():
            self.first_inexact = n0 + int(np.argmin(same))
        bad = k - int(np.count_nonzero(finite))
        if bad and self.first_non_finite is None:
            self.first_non_finite = n0 + int(np.argmin(finite))
        self.non_finite += bad
        if bad < k:
            self.max_err = max(self.max_err, float(np.max(np.abs(values[finite] - pos[finite]))))
        keys = np.where(finite, values, np.inf)  # every non-finite result is one value
        head = np.concatenate(([self.prev], keys[:-1]))
        if np.any(keys < head):  # rounding is monotone; anything else is a bug
            raise RuntimeError("rounded positions are not monotone")
        starts = np.flatnonzero(keys != head) if n0 else np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        self._runs(starts, k)
        self.prev = keys[-1]
        self.n += k

    def _runs(self, starts: np.ndarray, k: int) -> None:
        """Merge a chunk of ``k`` values whose new values start at indices ``starts``."""
        if len(starts) == 0:
            self.run += k
        else:
            self._close(self.run + int(starts[0]))
            runs = np.diff(np.r_[starts, k])
            closed = runs[:-1]
            if len(closed):
                self.max_closed = max(self.max_closed, int(closed.max()))
                self.singles_closed += int(np.count_nonzero(closed == 1))
            self.run = int(runs[-1])
            self.runs += len(starts)

    def _close(self, run: int) -> None:
        if run:
            self.max_closed = max(self.max_closed, run)
            self.singles_closed += run == 1

    def result(self, dtype: str) -> PositionRow:
        singles = self.singles_closed + (self.run == 1)
        return PositionRow(
            dtype=dtype,
            length=self.n,
            exact_count=self.exact,
            exact_fraction=self.exact / self.n,
            distinct_values=self.runs,
            max_run=max(self.max_closed, self.run),
            collision_fraction=(self.n - singles) / self.n,
            max_abs_error=self.max_err,
            first_inexact=self.first_inexact,
            non_finite=self.non_finite,
            overflow_position=self.first_non_finite,
            method="empirical",
        )


Rounder = Callable[[int, int], np.ndarray]


def _numpy_engine(f: Format, stop: int) -> Rounder:
    """Exact positions correctly rounded (:func:`~precision_audit.formats.round_to`).

    The buffers are reused from chunk to chunk: the returned array is valid
    until the next call.
    """
    bufs: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def rounded(a: int, b: int) -> np.ndarray:
        n = b - a
        if n not in bufs:
            bufs.clear()
            bufs[n] = (np.arange(n, dtype=np.float64), np.empty(n), np.empty(n), np.empty(n))
        iota, out, s1, s2 = bufs[n]
        np.add(iota, a, out=out)  # exact: integers below 2**53
        return round_into(out, f, out, (s1, s2))

    return rounded


def _torch_dtype(f: Format) -> Any:
    if f.torch_dtype is None:
        raise ValueError(f"torch has no dtype for {f.name}; use engine='numpy'")
    return f.torch_dtype


def _torch_engine(f: Format, stop: int) -> Rounder:
    """int64 positions cast by torch: ``position_ids.to(dtype)``.

    Each element is rounded once from its exact value (through float32, so
    exact to 2**24); a GPU ``torch.arange(L, dtype=...)``, which evaluates
    ``start + i * step`` per element in float32, gives the same values.
    """
    import torch

    dt = _torch_dtype(f)
    return lambda a, b: torch.arange(a, b, dtype=torch.int64).to(dt).to(torch.float64).numpy()


def _torch_arange_engine(f: Format, stop: int) -> Rounder:
    """``torch.arange(L, dtype=dtype)`` as this machine's torch build computes it.

    torch's vectorised CPU kernel rounds the first position of each SIMD
    block to ``dtype`` and adds the offsets to that rounded base, so above
    the exact-integer range its values can differ from the correctly rounded
    positions (for example bf16 4113..4127 -> 4096 instead of 4128 on AVX2);
    the result depends on the CPU's vector width.  Above torch's parallel
    grain (32768 elements) the range is split between threads and each
    thread's blocks start at its own offset, so the values also depend on the
    thread count (``torch.get_num_threads()``; the CLI reports it).  The whole
    range is built once so every prefix is what ``torch.arange(L, dtype=...)``
    returns.
    """
    import torch

    try:
        full = torch.arange(stop, dtype=_torch_dtype(f))
    except (RuntimeError, NotImplementedError):
        raise ValueError(f"torch has no arange kernel for {f.name}; use engine='torch'") from None
    return lambda a, b: full[a:b].to(torch.float64).numpy()


CONSTRUCTIONS: dict[str, str] = {
    "numpy": "each position rounded once to nearest even: torch.arange(L).to(dtype), and torch.arange(L, "
             "dtype=dtype) on CUDA (the same values, recorded on an H200)",
    "torch": "int64 positions .to(dtype) by this machine's torch (one rounding, through float32: to 2**24)",
    "torch-arange": "torch.arange(L, dtype=dtype) by this CPU's torch kernel (a rounded block start plus lane "
                    "offsets: not one rounding above the exact range, e.g. bf16 4113..4127 -> 4096 on the CPUs "
                    "measured)",
}
"""What each engine's figures describe: the construction of the positions it stands for."""

_TF32_CONSTRUCTION = ("tf32 / tf32-rz: float32 positions as a tensor-core GEMM reads them (to nearest even in "
                      "cuBLAS, truncated in Triton's tl.dot; recorded on an H200)")


def construction(engine: Engine, dtypes: str | Format | Iterable[str | Format] = ()) -> str:
    """What figures measured by ``engine`` describe (:data:`CONSTRUCTIONS`), and how TF32 positions arise.

    >>> construction("numpy", ["tf32"]).split("; ")[1][:24]
    'tf32 / tf32-rz: float32 '
    """
    check_choice(engine, "engine", tuple(_ENGINES))
    fmts = [get_format(d) for d in check_names(dtypes, "dtypes", "format name", Format)] if dtypes else []
    tf32 = any(f.name.startswith("tf32") for f in fmts)
    return CONSTRUCTIONS[engine] + (f"; {_TF32_CONSTRUCTION}" if tf32 else "")

CPU_ARANGE_LIMIT = 2**22
"""The longest length :func:`cpu_arange_rows` builds with torch (a whole ``torch.arange`` at once)."""


def cpu_arange_rows(lengths: int | Iterable[int], dtypes: str | Format | Iterable[str | Format]) -> list[PositionRow]:
    """The other construction: ``torch.arange(L, dtype=dtype)`` as this CPU's torch computes it, measured.

    Rows for the formats torch has an arange kernel for and that round integers (narrower than float32: float32's
    arange is exact to 2**24), at the lengths up to :data:`CPU_ARANGE_LIMIT`; the values depend on the CPU's vector
    width and torch's thread count (see :func:`_torch_arange_engine`), so compare them with the one-rounding
    rows rather than pin them.

    >>> [(r.dtype, r.length, r.exact_count) for r in cpu_arange_rows([8192, 2**30], ["bf16", "fp32", "tf32", "e4m3"])]
    [('bfloat16', 8192, 896)]
    """
    lens = [n for n in check_lengths(lengths) if n <= CPU_ARANGE_LIMIT]
    fmts = [f for f in dict.fromkeys(get_format(d) for d in check_names(dtypes, "dtypes", "format name", Format))
            if f.torch_dtype is not None and f.significand_bits < 24]
    rows: list[PositionRow] = []
    for f in fmts if lens else []:
        try:
            rows += audit_positions(lens, f, method="empirical", engine="torch-arange")
        except ValueError:  # torch has the dtype but no arange kernel for it (float8)
            continue
    return rows


_ENGINES: dict[str, Callable[[Format, int], Rounder]] = {
    "numpy": _numpy_engine,
    "torch": _torch_engine,
    "torch-arange": _torch_arange_engine,
}


def measure_positions(
    lengths: int | Iterable[int],
    dtype: str | Format,
    *,
    engine: Engine = "numpy",
    chunk: int = CHUNK,
    progress: Callable[[int], None] | None = None,
) -> list[PositionRow]:
    """Round every position 0..max(lengths)-1 and measure, one pass for all lengths.

    ``engine="numpy"`` rounds the exact positions with ``round_to`` (correctly
    rounded); ``"torch"`` casts int64 positions with ``.to(dtype)`` (the same
    values up to 2**24, where torch's float32 intermediate stops being exact);
    ``"torch-arange"`` takes ``torch.arange(L, dtype=dtype)`` from this
    machine's torch build (see :func:`_torch_arange_engine`).
    ``progress`` is called after each chunk with the number of positions it held.

    >>> [r.exact_count for r in measure_positions([256, 512, 1024], "bf16")]
    [256, 384, 512]
    """
    f = get_format(dtype)
    lens = check_lengths(lengths, limit=MAX_MEASURED, why="rounding every position; the closed form answers any length")
    check_choice(engine, "engine", tuple(_ENGINES))
    chunk = check_int(chunk, "chunk", minimum=1)
    check_callable(progress, "progress")
    rounded = _ENGINES[engine](f, lens[-1])
    tally, out = _Tally(), []
    for target in lens:
        while tally.n < target:
            start, stop = tally.n, min(tally.n + chunk, target)
            tally.add(rounded(start, stop))
            if progress is not None:
                progress(stop - start)
        out.append(tally.result(f.name))
    return out


def _measured_lengths(lens: tuple[int, ...], method: Method) -> list[int]:
    """The lengths ``method`` measures (the rest are derived in closed form)."""
    check_choice(method, "method", ("auto", "empirical", "closed-form"))
    if method == "closed-form":
        return []
    return [n for n in lens if method == "empirical" or n <= EMPIRICAL_LIMIT]


def positions_to_scan(lengths: int | Iterable[int], n_dtypes: int = 1, method: Method = "auto") -> int:
    """How many positions :func:`audit_positions` rounds (one pass per dtype).

    >>> positions_to_scan([8192, 2**40], n_dtypes=2)
    16384
    """
    return max(_measured_lengths(check_lengths(lengths), method), default=0) * n_dtypes


def audit_positions(
    lengths: int | Iterable[int],
    dtypes: str | Format | Iterable[str | Format],
    *,
    method: Method = "auto",
    engine: Engine = "numpy",
    chunk: int = CHUNK,
    progress: Callable[[int], None] | None = None,
) -> list[PositionRow]:
    """Audit positions for every (dtype, length); rows ordered by dtype, then length.

    Position ids have no subject and one code path (``arange`` in the dtype), so the auditors' call shape
    reduces to ``(lengths, dtypes)``.  ``method="auto"`` measures lengths up to :data:`EMPIRICAL_LIMIT` and uses
    the closed form beyond; ``"empirical"`` or ``"closed-form"`` force one.  ``engine``, ``chunk`` (positions
    per chunk) and ``progress`` as :func:`measure_positions` takes them.

    >>> rows = audit_positions([4096, 8192], ["bf16", "fp16"])
    >>> [(r.dtype, r.length, r.exact_count) for r in rows]
    [('bfloat16', 4096, 768), ('bfloat16', 8192, 896), ('float16', 4096, 3072), ('float16', 8192, 4096)]
    """
    lens = check_lengths(lengths)
    fmts = list(dict.fromkeys(get_format(d) for d in check_names(dtypes, "dtypes", "format name", Format)))
    measured = _measured_lengths(lens, method)
    check_choice(engine, "engine", tuple(_ENGINES))
    chunk = check_int(chunk, "chunk", minimum=1)
    check_callable(progress, "progress")
    rows: list[PositionRow] = []
    for f in fmts:
        by_len = {}
        if measured:
            by_len = {r.length: r for r in measure_positions(measured, f, engine=engine, chunk=chunk,
                                                              progress=progress)}
        rows += [by_len.get(n) or predict_positions(n, f) for n in lens]
    return rows



BAICHUAN_LENGTHS: tuple[int, ...] = tuple(2**k for k in range(10, 18))  # 1K .. 128K
BAICHUAN_DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32")


def reproduce_baichuan() -> list[PositionRow]:
    """The headline: position ids 0..L-1 in bfloat16 and float16 against the
    float32 fix, for L = 1K .. 128K (Baichuan: "about 10 %" exact in bf16 at 8K).

    The figures are the one-rounding construction (:data:`CONSTRUCTIONS` ``"numpy"``): each position rounded
    once, as ``torch.arange(L).to(dtype)`` and CUDA's ``torch.arange(L, dtype=dtype)`` make them (recorded on an
    H200: 896 exact, 897 distinct, runs up to 33 at 8192 in bf16); :func:`cpu_arange_rows` gives torch's CPU
    kernel's (the same counts there, longer runs: 48 on the CPUs measured).

    >>> rows = reproduce_baichuan()
    >>> [(r.dtype, r.exact_fraction) for r in rows if r.length == 8192]
    [('bfloat16', 0.109375), ('float16', 0.5), ('float32', 1.0)]
    """
    return audit_positions(BAICHUAN_LENGTHS, BAICHUAN_DTYPES, method="empirical")
