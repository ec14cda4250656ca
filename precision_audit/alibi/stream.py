"""The ALiBi auditor's streaming engine: two chunked passes over the keys, per-head reductions, no per-key
running arrays.

Pass 1 folds each chunk of stored magnitudes into per-head totals (distinct values, the longest run of
equal values, order inversions, non-finite values, the largest error) and running log-sum-exps, and
snapshots them at every length; pass 2 needs each length's log-sum-exps for the largest
attention-probability change.  Counts and maxima do not depend on how the keys are grouped, so each chunk
is reduced at once (and at the lengths that end inside it); the log-sum-exps and probability changes are
computed on exactly the blocks the reference engine used (chunk prefixes), so every float is the same to
the bit.  Buffers are reused from chunk to chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


class StreamPlan(Protocol):
    """What the passes need from :func:`precision_audit.alibi.audit_alibi`'s plan."""

    lengths: tuple[int, ...]
    num_heads: int
    s_exact: F64
    sign: float
    width: int

    def chunks(self) -> Iterable[tuple[int, int]]: ...

    def stored_into(self, k: F64, out: F64, scratch: tuple[F64, F64]) -> None: ...


def _lse_merge(m: F64, s: F64, values: F64, sign: float, scratch: F64) -> tuple[F64, F64]:
    """Fold the block ``sign * values`` (heads, w) into a running log-sum-exp kept as ``m + log(s)``
    (``scratch``: (heads, w), C-contiguous)."""
    block = scratch
    np.multiply(values, sign, out=block)
    new_m = np.maximum(m, block.max(axis=1))
    np.subtract(block, new_m[:, None], out=block)
    np.exp(block, out=block)
    s = s * np.exp(m - new_m) + block.sum(axis=1)
    return new_m, s


@dataclass
class _AtLength:
    """Per-head totals over keys ``0 .. L-1``, shape (heads,); pass 2 fills ``dp``."""

    distinct: np.ndarray
    run: np.ndarray
    inversions: np.ndarray
    nonfinite: np.ndarray
    err: np.ndarray
    lse_p: tuple[np.ndarray, np.ndarray]  # log-sum-exp (m, s) = m + log(s) of the stored logits
    lse_q: tuple[np.ndarray, np.ndarray]  # ... of the reference logits
    dp: np.ndarray  # max_j |p_j - q_j|

    def add_prob_change(self, l: F64, x: F64, buf: "_Buffers", rows: npt.NDArray[np.intp] | None = None) -> None:
        """Fold some keys' stored and reference logits ``l`` and ``x`` (heads, w) into ``dp``
        (only the heads ``rows``, if given).

        With t = (l_k - x_k) - (LSE_l - LSE_x) = log(p_k / q_k), |p_k - q_k| equals
        max(p_k, q_k) * (1 - e**-|t|), the larger probability being p_k where t > 0: the
        factor stays in [0, 1] (no 0 * inf, even where q_k underflows and p_k does not).
        LSE_l - LSE_x = (M_l - M_x) + log(S_l / S_x) avoids cancelling two large
        log-sum-exps.
        """
        (mp, sp), (mq, sq) = self.lse_p, self.lse_q
        if rows is not None:
            l, x, mp, sp, mq, sq = l[rows], x[rows], mp[rows], sp[rows], mq[rows], sq[rows]
        shift = (mp - mq) + np.log(sp / sq)
        h, w = l.shape
        t, q, p, d, pos = (buf.view(name, w)[:h] for name in ("t", "q", "p", "d", "pos"))
        np.subtract(l, x, out=t)
        np.subtract(t, shift[:, None], out=t)
        np.subtract(x, mq[:, None], out=q)
        np.exp(q, out=q)
        np.divide(q, sq[:, None], out=q)
        np.subtract(l, mp[:, None], out=p)
        np.exp(p, out=p)
        np.divide(p, sp[:, None], out=p)
        far = np.abs(shift) > _FAR
        direct = np.abs(p[far] - q[far]) if far.any() else None
        np.abs(t, out=d)
        np.negative(d, out=d)
        np.expm1(d, out=d)
        np.greater(t, 0, out=pos)
        np.copyto(q, p, where=pos)  # q: the larger probability
        np.multiply(q, d, out=d)
        np.abs(d, out=d)
        if direct is not None:
            d[far] = direct
        if rows is None:
            self.dp = np.maximum(self.dp, d.max(axis=1))  # propagates NaN
        else:
            self.dp[rows] = np.maximum(self.dp[rows], d.max(axis=1))


class _Buffers:
    """Reused arrays of one pass, as C-contiguous (heads, w + extra) views of (heads, width + 2) buffers."""

    FLOATS = ("mag", "ref", "err", "s1", "s2", "lse", "t", "q", "p", "d")
    BOOLS = ("same", "inv", "pad", "edge", "pos")

    def __init__(self, heads: int, width: int) -> None:
        self.heads = heads
        self.bufs = {n: np.empty(heads * (width + 2)) for n in self.FLOATS}
        self.bufs.update({n: np.empty(heads * (width + 2), dtype=bool) for n in self.BOOLS})

    def view(self, name: str, w: int, extra: int = 0) -> np.ndarray:
        return self.bufs[name][: self.heads * (w + extra)].reshape(self.heads, w + extra)


class _Totals:
    """Per-head running totals over the keys seen so far (pass 1)."""

    def __init__(self, n: int, sign: float) -> None:
        self.distinct, self.run_start, self.run_max, self.inversions, self.nonfinite = (
            np.zeros(n, dtype=np.int64) for _ in range(5))
        self.err = np.zeros(n)
        self.lse_p = (np.full(n, -np.inf), np.zeros(n))  # stored logits
        self.lse_q = (np.full(n, -np.inf), np.zeros(n))  # reference logits
        self.prev = np.full(n, np.nan)  # the last stored magnitude
        self.sign = sign

    def snapshot(self, mag: F64, ref: F64, cols: int, buf: _Buffers) -> _AtLength:
        """The totals (already folded up to the snapshot's key) with the log-sum-exps over the chunk's first
        ``cols`` keys."""
        return _AtLength(self.distinct.copy(), self.run_max.copy(), self.inversions.copy(), self.nonfinite.copy(),
                         self.err.copy(), _lse_merge(*self.lse_p, mag[:, :cols], self.sign, buf.view("lse", cols)),
                         _lse_merge(*self.lse_q, ref[:, :cols], self.sign, buf.view("lse", cols)),
                         np.zeros(len(self.err)))


def _runs(same: npt.NDArray[np.bool_], pad: npt.NDArray[np.bool_], edge: npt.NDArray[np.bool_]
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal runs of True in each row of ``same`` (heads, w): (row, first column, end column), ends
    exclusive, in row order; ``pad`` and ``edge``: (heads, w + 2) and (heads, w + 1) bool scratch."""
    h, w = same.shape
    pad[:, 0] = False
    pad[:, w + 1] = False
    pad[:, 1 : w + 1] = same
    np.not_equal(pad[:, 1 : w + 2], pad[:, : w + 1], out=edge)
    idx = np.flatnonzero(edge)  # starts and ends alternate in each row (False on both sides)
    starts, ends = idx[0::2], idx[1::2]
    return starts // (w + 1), starts % (w + 1), ends % (w + 1)


def _fold(tot: _Totals, c0: int, same: npt.NDArray[np.bool_], inv: npt.NDArray[np.bool_], bad: F64 | None,
          err: F64, runs: tuple[np.ndarray, np.ndarray, np.ndarray], a: int, e: int) -> None:
    """Fold keys ``c0 + a .. c0 + e - 1`` of the chunk into the totals (runs: those of the whole chunk)."""
    seg = slice(a, e)
    tot.distinct += (e - a) - np.count_nonzero(same[:, seg], axis=1)
    tot.inversions += np.count_nonzero(inv[:, seg], axis=1)
    if bad is not None:
        tot.nonfinite += np.count_nonzero(bad[:, seg], axis=1)
    np.maximum(tot.err, err[:, seg].max(axis=1), out=tot.err)
    row, first, end = runs
    # a run of True in same from column f to end-1 is a run of equal values from key f - 1 (f > 0) or from
    # the carried run's start (f = 0), cut at e; a run starting at or after e (not reached yet) gets a length
    # e - f + 1 <= 1, which never raises the maximum (at least 1)
    end = np.minimum(end, e)
    length = np.where(first == 0, c0 + end - tot.run_start[row], end - first + 1)
    if length.size:
        np.maximum.at(tot.run_max, row, length)
    np.maximum(tot.run_max, 1, out=tot.run_max)


def count_pass(plan: StreamPlan, progress: Callable[[int], None] | None) -> dict[int, _AtLength]:
    """Pass 1: the per-head tallies, snapshot at every length (prefix reductions)."""
    n, width = plan.num_heads, plan.width
    tot = _Totals(n, plan.sign)
    buf = _Buffers(n, width)
    found: dict[int, _AtLength] = {}
    for c0, c1 in plan.chunks():
        w = c1 - c0
        k = np.arange(c0, c1, dtype=np.float64)
        mag, ref, err, same, inv = (buf.view(name, w) for name in ("mag", "ref", "err", "same", "inv"))
        plan.stored_into(k, mag, (buf.view("s1", w), buf.view("s2", w)))
        np.multiply(plan.s_exact[:, None], k[None, :], out=ref)
        np.equal(mag[:, 1:], mag[:, :-1], out=same[:, 1:])
        np.equal(mag[:, 0], tot.prev, out=same[:, 0])
        np.less(mag[:, 1:], mag[:, :-1], out=inv[:, 1:])
        np.less(mag[:, 0], tot.prev, out=inv[:, 0])
        finite = bool(np.isfinite(np.max(mag)) and np.isfinite(np.min(mag)))
        bad = None
        if not finite:  # NaNs are equal to NaNs here
            before = np.concatenate([tot.prev[:, None], mag[:, :-1]], axis=1)
            same |= np.isnan(mag) & np.isnan(before)
            bad = ~np.isfinite(mag)
        if c0 == 0:
            same[:, 0] = False
        np.subtract(mag, ref, out=err)
        np.abs(err, out=err)
        if bad is not None:
            err[bad] = np.inf
        runs = _runs(same, buf.view("pad", w, 2), buf.view("edge", w, 1))
        a = 0
        for L in plan.lengths:
            if c0 < L <= c1:
                _fold(tot, c0, same, inv, bad, err, runs, a, L - c0)
                a = L - c0
                found[L] = tot.snapshot(mag, ref, L - c0, buf)
        if a < w:
            _fold(tot, c0, same, inv, bad, err, runs, a, w)
        _carry(tot, c0, w, same, runs, mag, ref, buf)
        if progress is not None:
            progress(w)
    return found


def _carry(tot: _Totals, c0: int, w: int, same: npt.NDArray[np.bool_], runs: tuple[np.ndarray, np.ndarray, np.ndarray],
           mag: F64, ref: F64, buf: _Buffers) -> None:
    """The state after the whole chunk: the start of each head's current run, the log-sum-exps, the last value."""
    row, first, end = runs
    last = end == w  # runs reaching the chunk's last key
    cont = last & (first > 0)
    tot.run_start[~same[:, w - 1]] = c0 + w - 1  # the last key starts a run
    tot.run_start[row[cont]] = c0 + first[cont] - 1  # (a run from the carried start keeps it)
    tot.lse_p = _lse_merge(*tot.lse_p, mag, tot.sign, buf.view("lse", w))
    tot.lse_q = _lse_merge(*tot.lse_q, ref, tot.sign, buf.view("lse", w))
    tot.prev = mag[:, -1].copy()


def prob_change_pass(plan: StreamPlan, found: dict[int, _AtLength], progress: Callable[[int], None] | None) -> None:
    """Pass 2: the largest attention-probability change, which needs each length's log-sum-exps from pass 1.

    A key's change is at most its larger probability (both computed values), so heads whose stored and
    reference probabilities in a chunk all lie below the head's largest change so far (with a margin far
    above every rounding) are skipped: the maximum is the same.  The chunks holding the largest logits
    come first (the last keys in the key form, the nearest distances in the relative form).  Non-finite
    biases need no exception: a NaN or a +inf logit makes its head's log-sum-exp NaN, so the head's first
    chunk (never skipped: no change yet) already makes its change NaN, and a NaN head is never needed
    again; a -inf logit is a probability 0, whose change q is covered by the reference bound."""
    buf = _Buffers(plan.num_heads, plan.width)
    chunks = list(plan.chunks())
    for c0, c1 in reversed(chunks) if plan.sign > 0 else chunks:
        w = c1 - c0
        k = np.arange(c0, c1, dtype=np.float64)
        m, r = buf.view("mag", w), buf.view("ref", w)
        plan.stored_into(k, m, (buf.view("s1", w), buf.view("s2", w)))
        np.multiply(m, plan.sign, out=m)
        np.multiply(plan.s_exact[:, None], k[None, :], out=r)
        np.multiply(r, plan.sign, out=r)
        for L in plan.lengths:
            if L <= c0:
                continue
            cols = min(c1, L) - c0
            at = found[L]
            l, x = m[:, :cols], r[:, :cols]
            rows = _rows_that_matter(at, l, x)
            if rows is None:
                at.add_prob_change(l, x, buf)
            elif rows.size:
                at.add_prob_change(l, x, buf, rows)
        if progress is not None:
            progress(w)


_MARGIN = 1e-6  # in the exponent: far above the roundings of exp, the subtraction and the division
# |LSE_l - LSE_x| beyond which add_prob_change takes |p - q| from the two softmaxes (both paths agree with the
# exact change to ~1e-15 of max(p, q) below it): t's rounding error, about 2**-52 |LSE_l - LSE_x| wherever the
# change is not saturated (|t| < 40), would exceed 2**-20.  Every recipe stays far below (slope * 2**26 < 2**26).
_FAR = 2.0**32


def _rows_that_matter(at: _AtLength, l: F64, x: F64) -> npt.NDArray[np.intp] | None:
    """The heads whose probability change in these keys could exceed their largest so far (all: None)."""
    (mp, sp), (mq, sq) = at.lse_p, at.lse_q
    with np.errstate(divide="ignore"):
        need = ((l.max(axis=1) - mp >= np.log(at.dp * sp) - _MARGIN)  # a head already NaN: False
                | (x.max(axis=1) - mq >= np.log(at.dp * sq) - _MARGIN))
    return None if need.all() else np.flatnonzero(need)
