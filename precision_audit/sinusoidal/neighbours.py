"""Nearest stored neighbours.  The streaming pass keeps each row's nearest neighbour within a window of
lags; then, per length, lags beyond the window where a nearer neighbour may hide are searched too, and the
result is certified when no other lag can hold one (see ``SinusoidalRow.nn_certified``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .recipes import Array
from .tables import _StoredRows, exact_distances


def _tail_forward(rows_of: Any, positions: Array, length: int, window: int) -> Array:
    """min over k = 1..window, p + k < length of |S(p) - S(p+k)|, for p in the last window positions."""
    lo = max(0, length - window)
    s, c = rows_of(positions[lo:length])
    r = np.concatenate([s, c], axis=1)
    out = np.full(length - lo, np.inf)
    with np.errstate(invalid="ignore"):
        for k in range(1, length - lo):
            d = np.sqrt(np.sum((r[:-k] - r[k:]) ** 2, axis=1))
            out[:-k] = np.minimum(out[:-k], d)
    return out


FAR_SEARCH_BUDGET = 2**27  # max (far lags x length x dim) searched beyond the window, per length


def _far_neighbours(rows_of: Any, positions: Array, length: int, lags: npt.NDArray[np.int64], chunk: int) -> Array:
    """min over the given lags k of |S(p) - S(p +- k)| (both sides, inside length), for every p < length."""
    out = np.full(length, np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(0, length, chunk):
            b = min(a + chunk, length)
            S = np.concatenate(rows_of(positions[a:b]), axis=1)
            for k in lags:  # ascending
                hi = min(b, length - int(k))  # pairs (p, p+k) with p in [a, hi)
                if hi <= a:
                    break
                T = np.concatenate(rows_of(positions[a + k : hi + k]), axis=1)
                d = np.sqrt(np.sum((S[: hi - a] - T) ** 2, axis=1))
                out[a:hi] = np.minimum(out[a:hi], d)
                out[a + k : hi + k] = np.minimum(out[a + k : hi + k], d)
    return out


def _max_shrink(nn_s: Array, prefmin: Array, L: int, chunk: int) -> float:
    """max over p < L of 1 - nn_s[p] / nn_e[p], nn_e[p] = prefmin[max(p, L-1-p) - 1], in blocks."""
    out = -math.inf
    step = 2**18
    for a in range(0, L, step):
        b = min(L, a + step)
        p = np.arange(a, b)
        idx = np.maximum(p, L - 1 - p) - 1
        m = float(np.max(1.0 - nn_s[a:b] / prefmin[idx]))
        if math.isnan(m):
            return m
        out = max(out, m)
    return out


def _certified(far_min: float, e2: Array, emax: float, nn_s: Array, chunk: int) -> bool:
    """all(far_min - e2 - emax >= nn_s), in blocks."""
    step = 2**18
    for a in range(0, len(nn_s), step):
        b = min(len(nn_s), a + step)
        if not np.all(far_min - e2[a:b] - emax >= nn_s[a:b]):
            return False
    return True


class _WindowNeighbours:
    """Pass 1: each row's nearest stored neighbour among p+1 .. p+window (``fwd``) and p-window .. p-1 (``bwd``)."""

    def __init__(self, n: int, window: int) -> None:
        self.window = window
        self.fwd = np.full(n, np.inf)  # nearest stored neighbour among p+1 .. p+window
        self.bwd = np.full(n, np.inf)  # ... among p-window .. p-1
        self.bwd_tails: dict[int, Array] = {}

    def add(self, a: int, b: int, e: int, S: Array) -> None:
        """Pairs (p, p+k) for p in [a, b): ``S`` holds the rows of positions a .. e-1 (e = b + reach, or the end)."""
        for k in range(1, min(self.window, e - a - 1) + 1):
            m = min(b, e - k) - a  # pairs (p, p+k) with p in [a, a+m)
            d = np.sqrt(np.sum((S[:m] - S[k : k + m]) ** 2, axis=1))
            self.fwd[a : a + m] = np.minimum(self.fwd[a : a + m], d)
            self.bwd[a + k : a + k + m] = np.minimum(self.bwd[a + k : a + k + m], d)

    def merge_chunk(self, a: int, near: list[Array]) -> None:
        """Fold the distances ``near[k-1]`` from rows a, a+1, ... to the row k ahead (as :meth:`add` does)."""
        for k, d in enumerate(near, start=1):
            m = len(d)
            np.minimum(self.fwd[a : a + m], d, out=self.fwd[a : a + m])
            np.minimum(self.bwd[a + k : a + k + m], d, out=self.bwd[a + k : a + k + m])

    def merge(self, lengths: tuple[int, ...]) -> None:
        """Keep the last ``window`` backward distances of each length, then one merged O(L) array in ``fwd``."""
        self.bwd_tails = {L: self.bwd[max(0, L - self.window) : L].copy() for L in lengths}
        np.minimum(self.fwd, self.bwd, out=self.fwd)  # nearest neighbour within the window, both sides
        self.bwd = np.empty(0)  # freed: both sides now live in fwd


class _NeighbourSearch:
    """Pass 2, one length at a time: the nearest-neighbour fields of a :class:`SinusoidalRow`."""

    def __init__(self, near: _WindowNeighbours, rows: _StoredRows, err_2: Array, dim: int, base: float,
                 chunk: int, dist: Array | None = None) -> None:
        self.near, self.rows, self.err_2, self.dim, self.chunk = near, rows, err_2, dim, chunk
        kmax = len(rows.pos) - 1
        if dist is None:
            dist = exact_distances(dim, np.arange(1, kmax + 1, dtype=np.float64), base=base) if kmax else np.empty(0)
        self.dist = dist  # D(k) for the lags k = 1 .. len(rows.pos) - 1
        self.prefmin = np.minimum.accumulate(self.dist) if kmax else self.dist

    def at(self, L: int, nonfinite: int) -> tuple[float, float, float, bool]:
        """``exact_nn_distance``, ``min_nn_distance``, ``nn_shrink`` and ``nn_certified`` for length ``L``."""
        if L < 2:
            return math.nan, math.nan, math.nan, True
        exact_nn = float(self.prefmin[L - 2])
        if nonfinite:
            return exact_nn, math.nan, math.nan, False
        # nn_s = fwd[:L] with the last window entries replaced: a view with the tail
        # written in place, put back after this length (no O(L) copy)
        fwd, window = self.near.fwd, self.near.window
        tail = _tail_forward(self.rows, self.rows.pos, L, window)
        saved = fwd[L - len(tail) : L].copy()
        fwd[L - len(tail) : L] = np.minimum(tail, self.near.bwd_tails[L])
        result = (exact_nn, *self._stored_nn(L, fwd[:L]))
        fwd[L - len(tail) : L] = saved
        return result

    def _stored_nn(self, L: int, nn_s: Array) -> tuple[float, float, bool]:
        """min_nn, shrink, certified from the window distances ``nn_s``, searching far lags where needed."""
        window = self.near.window
        far = self.dist[window : L - 1]  # D(k) for the lags k = window+1 .. L-1 not searched yet
        e2 = self.err_2[:L]
        emax = float(np.max(e2))
        far_min = float(np.min(far)) if len(far) else math.inf
        n_far = len(far)
        if len(far) and np.min(nn_s) > 0.0:
            # only lags with D(k) < max nn + 2 max e can hold a nearer neighbour: search them too
            thr = float(np.max(nn_s)) + 2.0 * emax
            cand = np.flatnonzero(far < thr) + window + 1
            if 0 < len(cand) and len(cand) * L * self.dim <= FAR_SEARCH_BUDGET:
                nn_s = np.minimum(nn_s, _far_neighbours(self.rows, self.rows.pos, L, cand, self.chunk))
                keep = far >= thr
                far_min = float(np.min(far, where=keep, initial=math.inf))
                n_far = int(np.count_nonzero(keep))
        min_nn = float(np.min(nn_s))
        shrink = _max_shrink(nn_s, self.prefmin, L, self.chunk)
        # a duplicate: 0 and 100 % are the global extremes
        certified = n_far == 0 or min_nn == 0.0 or _certified(far_min, e2, emax, nn_s, self.chunk)
        return min_nn, shrink, certified
