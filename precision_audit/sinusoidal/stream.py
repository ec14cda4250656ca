"""The streaming pass of the sinusoidal auditor: every (recipe, dtype) of an audit in one pass over positions.

Chunk by chunk (each read with ``reach`` rows beyond it), workers compute for every (recipe, dtype) the
stored rows, their errors against the exact rows (computed once per chunk for all of them), row hashes,
distances to the next ``window`` rows and dot products with the next ``max_lag`` rows; the main thread
merges them in position order, so the sums are the ones a single thread forms.  A recipe's stored row is
a function of its rounded position, so equal positions (long runs of them in a low-precision recipe) are
computed once: every value is the one the row-by-row computation gives, to the bit (a row's dot product or
distance depends on the two rows' values only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .duplicates import _hash_rows, _RowHashes
from .tables import scratch
from .neighbours import _WindowNeighbours
from .recipes import Array
from .tables import _StoredRows


class _ErrorTally:
    """Each row's ``|S - E|_2``, and per length the max ``|S - E|`` and the non-finite rows below it."""

    def __init__(self, n: int, lengths: tuple[int, ...]) -> None:
        self.lengths = lengths
        self.err_2 = np.empty(n)  # |S - E|_2 per row
        self.max_err = np.zeros(len(lengths))  # max |S - E| over the rows below each length
        self.nonfinite = np.zeros(len(lengths), dtype=np.int64)  # non-finite rows below each length

    @staticmethod
    def compute(S: Array, E: Array) -> tuple[Array, Array, Any]:
        """Per row of ``S`` (stored) and ``E`` (exact): max ``|S - E|``, ``|S - E|_2`` and non-finite."""
        diff, sq = scratch("diff", S.shape), scratch("sq", S.shape)
        np.subtract(S, E, out=diff)
        np.multiply(diff, diff, out=sq)
        err_2 = np.sqrt(np.sum(sq, axis=1))
        np.abs(diff, out=diff)
        err_inf = np.max(diff, axis=1)
        nonfinite = None if np.isfinite(err_2).all() else ~np.all(np.isfinite(S), axis=1)
        return err_inf, err_2, nonfinite

    def merge(self, a: int, part: tuple[Array, Array, Any]) -> None:
        """Fold the rows of positions ``a, a+1, ...`` (in position order)."""
        err_inf, err_2, nonfinite = part
        b = a + len(err_inf)
        self.err_2[a:b] = err_2
        for j, L in enumerate(self.lengths):  # prefix reductions: rows a .. min(b, L) - 1
            if L > a:
                top = min(b, L) - a
                self.max_err[j] = max(self.max_err[j], np.max(err_inf[:top]))
                if nonfinite is not None:
                    self.nonfinite[j] += int(np.count_nonzero(nonfinite[:top]))


class _LagSums:
    """Per length L and lag k <= max_lag, the sum over p < L - k of ``S(p) . S(p+k)`` (the decay curve)."""

    def __init__(self, lengths: tuple[int, ...], max_lag: int) -> None:
        self.lengths, self.max_lag = np.asarray(lengths), max_lag
        self.sums = np.zeros((len(lengths), max_lag + 1))

    def merge(self, a: int, cums: list[Array]) -> None:
        """Fold the running sums ``cums[k]`` of ``S(p) . S(p+k)`` for p = a, a+1, ... (in position order)."""
        for k, cs in enumerate(cums):
            hi = np.minimum(a + len(cs), self.lengths - k) - a  # p < L - k for each length L
            ok = hi > 0
            self.sums[ok, k] += cs[hi[ok] - 1]

    def deviation(self, j: int, L: int, exact: Array, nonfinite: int) -> tuple[float, int]:
        """``decay_max_dev`` and ``decay_max_dev_lag`` of the ``j``-th length ``L`` against the exact curve."""
        if nonfinite:
            return math.nan, 0
        nl = min(self.max_lag, L - 1)
        means = self.sums[j, : nl + 1] / (L - np.arange(nl + 1))
        devs = np.abs(means - exact[: nl + 1])
        dev_lag = int(np.argmax(devs))
        return float(devs[dev_lag]), dev_lag


@dataclass
class Pass:
    """One (recipe, dtype)'s stored rows and its running reductions."""

    rows: _StoredRows
    errors: _ErrorTally
    hashes: _RowHashes
    near: _WindowNeighbours
    lag_sums: _LagSums


@dataclass
class _Part:
    """One (recipe, dtype)'s values on one chunk, merged in position order."""

    errors: tuple[Array, Array, Any]
    hashes: Any
    near: list[Array]  # distance to the row k ahead, k = 1 .. window
    lags: list[Array]  # running sums of S(p) . S(p+k), k = 0 .. max_lag


class _Runs:
    """Runs of equal rounded positions among rows a .. e-1: ``uid`` numbers them, ``first`` their first rows."""

    def __init__(self, u: Array) -> None:
        change = np.empty(len(u), dtype=bool)
        change[:1] = True
        np.not_equal(u[1:], u[:-1], out=change[1:])
        change[1:] &= ~(np.isnan(u[1:]) & np.isnan(u[:-1]))
        self.first = np.flatnonzero(change)
        self.uid = np.cumsum(change) - 1
        self.n = len(u)

    @property
    def worth_it(self) -> bool:
        return len(self.first) * 4 <= self.n

    def pairs(self, k: int, m: int) -> tuple[Any, Any, Any]:
        """For rows i < m and i + k: the first row of each run of equal (row i, row i + k) pairs, the runs'
        lengths, and the pairs' unique-row ids."""
        ua, ub = self.uid[:m], self.uid[k : k + m]
        change = np.empty(m, dtype=bool)
        change[:1] = True
        np.not_equal(ua[1:], ua[:-1], out=change[1:])
        change[1:] |= ub[1:] != ub[:-1]
        starts = np.flatnonzero(change)
        counts = np.diff(np.append(starts, m))
        return counts, ua[starts], ub[starts]


def _dots_and_distances(S: Array, b: int, e: int, window: int, max_lag: int) -> tuple[list[Array], list[Array]]:
    """Rows 0 .. b-1 of ``S`` (rows 0 .. e-1 held): distances to the next 1 .. window rows, dot products with
    the next 0 .. max_lag rows (as running sums), each for the rows that have that neighbour."""
    near = []
    for k in range(1, min(window, e - 1) + 1):
        m = min(b, e - k)
        d = scratch("diff", (m, S.shape[1]))
        np.subtract(S[:m], S[k : k + m], out=d)
        np.square(d, out=d)
        near.append(np.sqrt(np.sum(d, axis=1)))
    kmax = min(max_lag, e - 1)
    full = min(b, e - kmax)  # rows with every lag: one einsum over a sliding window (the same dot products)
    dots = np.einsum("ij,ikj->ik", S[:full], sliding_window_view(S, (kmax + 1, S.shape[1]))[:full, 0])
    lags = []
    for k in range(kmax + 1):
        m = min(b, e - k)
        col = dots[:, k]
        if m > full:
            col = np.concatenate([col, np.einsum("ij,ij->i", S[full:m], S[full + k : m + k])])
        lags.append(np.cumsum(col))
    return near, lags


def _dots_and_distances_runs(U: Array, runs: _Runs, b: int, e: int, window: int, max_lag: int
                             ) -> tuple[list[Array], list[Array]]:
    """:func:`_dots_and_distances` from the distinct rows ``U`` (``runs``): each distinct pair once."""
    near = []
    for k in range(1, min(window, e - 1) + 1):
        counts, ia, ib = runs.pairs(k, min(b, e - k))
        near.append(np.repeat(np.sqrt(np.sum((U[ia] - U[ib]) ** 2, axis=1)), counts))
    lags = []
    for k in range(min(max_lag, e - 1) + 1):
        counts, ia, ib = runs.pairs(k, min(b, e - k))
        lags.append(np.cumsum(np.repeat(np.einsum("ij,ij->i", U[ia], U[ib]), counts)))
    return near, lags


def _part(p: Pass, a: int, b: int, e: int, E: Array, window: int, max_lag: int) -> _Part:
    """One (recipe, dtype) on positions a .. b-1 (rows up to e-1 for the neighbours)."""
    u = p.rows.pos[a:e]
    runs = _Runs(u)
    if runs.worth_it:
        U = p.rows.table(u[runs.first], scratch("U", (len(runs.first), 2 * len(p.rows.freq))))
        S = np.take(U, runs.uid[: b - a], axis=0, out=scratch("S", (b - a, U.shape[1])))
        hashes = _hash_rows(U)[runs.uid[: b - a]]
        near, lags = _dots_and_distances_runs(U, runs, b - a, e - a, window, max_lag)
    else:
        S = p.rows.table(u, scratch("S", (e - a, 2 * len(p.rows.freq))))
        hashes = _hash_rows(S[: b - a])
        near, lags = _dots_and_distances(S, b - a, e - a, window, max_lag)
    return _Part(_ErrorTally.compute(S[: b - a], E), hashes, near, lags)


def _exact_rows(a: int, b: int, w64: Array) -> Array:
    """The exact rows of positions a .. b-1: sin half, then cos half."""
    h = len(w64)
    ang, out = scratch("ang", (b - a, h)), scratch("E", (b - a, 2 * h))
    np.multiply(np.arange(a, b, dtype=np.float64)[:, None], w64[None, :], out=ang)
    np.sin(ang, out=out[:, :h])
    np.cos(ang, out=out[:, h:])
    return out


def stream(passes: Sequence[Pass], w64: Array, lmax: int, chunk: int, window: int, max_lag: int, workers: int,
           progress: Callable[[int], None] | None) -> None:
    """Pass 1 over positions 0 .. lmax - 1 for every (recipe, dtype) in ``passes`` (see the module docstring)."""
    reach = max(window, max_lag)
    plan = [(a, min(a + chunk, lmax), min(min(a + chunk, lmax) + reach, lmax)) for a in range(0, lmax, chunk)]

    def work(item: tuple[int, int, int]) -> list[_Part]:
        a, b, e = item
        with np.errstate(invalid="ignore", over="ignore"):
            E = _exact_rows(a, b, w64)
            return [_part(p, a, b, e, E, window, max_lag) for p in passes]

    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 and len(plan) > 1 else None
    try:
        results = pool.map(work, plan) if pool is not None else map(work, plan)
        for (a, b, _), parts in zip(plan, results):
            for p, part in zip(passes, parts):
                p.errors.merge(a, part.errors)
                p.hashes.box[0][a:b] = part.hashes
                p.near.merge_chunk(a, part.near)
                p.lag_sums.merge(a, part.lags)
                if progress is not None:
                    progress(b - a)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
