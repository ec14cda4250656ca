"""Pairwise RoPE errors: the rotation attention sees between two positions D apart.

Attention sees ``phi(m) - phi(m - D)``, the difference of the angles that the
stored (cos, sin) at two positions represent; exact RoPE gives ``D * theta_i``.
The pair error is ``|wrap((phi(m) - phi(m - D)) - D * theta_i)|``.  An error
coherent across positions (a rounded inverse frequency: the angle drifts by
``m * dtheta``) cancels at short distance and grows with D; an error independent
per position (a collision, the rounding of a large angle) does not cancel.

The audit computes it from each position's signed rotation error
``e(m) = wrap(atan2(stored sin, stored cos) - exact(m * theta_i))`` (float64,
the oracle's exact angle, :mod:`.oracle`), which the absolute errors already
need: ``phi(m) - phi(m - D) - D theta_i = e(m) - e(m - D)`` modulo 2 pi,
because the oracle's angles differ by exactly ``D theta_i`` modulo 2 pi.  The
angle of a stored pair does not depend on its magnitude (a YaRN attention
factor).  atan2, the oracle (~1e-16 rad), the wrap and the two subtractions
each add at most about an ulp of 2 pi (~9e-16), so a pair error is within
~4e-15 rad of the exact value for the stored values (tests check it against
``atan2(s_m c_{m-D} - c_m s_{m-D}, c_m c_{m-D} + s_m s_{m-D})`` and an mpmath
``D theta_i mod 2 pi``).  A non-finite stored value makes the error pi, as for
the absolute errors.

>>> row_distances(32768)  # the defaults: 1, 16, 256, 4096 and L/2
(1, 16, 256, 4096, 16384)
>>> row_distances(10)  # capped at L - 1, deduplicated
(1, 5, 9)
>>> row_distances(1000, (16, 4096))  # asked distances: those below L
(16,)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..rows import Row
from .oracle import _TWO_PI, F64

__all__ = ["DEFAULT_DISTANCES", "PairAcc", "PairError", "PairPass", "check_distances", "cross_pairs", "fold_pairs", "pair_block",
           "pair_plan", "row_distances"]

DEFAULT_DISTANCES: tuple[int, ...] = (1, 16, 256, 4096)  # and L // 2; each capped at L - 1
_PI_ROUNDED = math.pi * (1 + 2.0**-40)  # pi, and the rounding of a mean of errors pi (or of a wrap near pi)


@dataclass(frozen=True)
class PairError(Row):
    """The pairwise rotation error at one distance over positions m in [D, L) of a row of length L (rad).

    ``max_rotation_error`` is the max over those positions and every frequency,
    ``mean_rotation_error`` the mean over all (m, i) pairs (``(L - D) * n_freq``
    of them; frequencies that do not rotate count with error 0, as in the
    absolute mean).

    >>> PairError(16, 0.005, 0.001).to_dict()
    {'distance': 16, 'max_rotation_error': 0.005, 'mean_rotation_error': 0.001}
    >>> PairError(0, 0.0, 0.0)
    Traceback (most recent call last):
    ...
    ValueError: distance 0 must be a positive integer
    """

    distance: int
    max_rotation_error: float
    mean_rotation_error: float

    def __post_init__(self) -> None:
        if isinstance(self.distance, bool) or not isinstance(self.distance, int) or self.distance < 1:
            raise ValueError(f"distance {self.distance!r} must be a positive integer")
        for name in ("max_rotation_error", "mean_rotation_error"):
            v = getattr(self, name)
            if not (isinstance(v, float) and 0.0 <= v <= _PI_ROUNDED):
                raise ValueError(f"{name} {v!r} must be a float in [0, pi]")


def check_distances(distances: int | Iterable[int] | None, lengths: Sequence[int]) -> tuple[int, ...] | None:
    """Validated asked distances (sorted, deduplicated), or None for the defaults.

    Each must be a positive integer below the largest length: a row of length L
    carries the asked distances below L (a pair needs two positions in [0, L)).

    >>> check_distances([16, 1, 16], [1024])
    (1, 16)
    >>> check_distances([4096], [1024, 2048])
    Traceback (most recent call last):
    ...
    ValueError: distance 4096 must be below the largest length 2048 (a pair needs two positions)
    """
    if distances is None:
        return None
    if isinstance(distances, (int, np.integer)) or not isinstance(distances, Iterable) or isinstance(distances, str):
        items = [distances]
    else:
        items = list(distances)
    out = []
    for d in items:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise ValueError(f"distance {d!r} must be a positive integer")
        if d >= max(lengths):
            raise ValueError(f"distance {d} must be below the largest length {max(lengths)} (a pair needs two positions)")
        out.append(int(d))
    return tuple(sorted(set(out)))


def row_distances(length: int, distances: Sequence[int] | None = None) -> tuple[int, ...]:
    """The distances a row of this length carries: the asked ones below it, or the defaults
    (:data:`DEFAULT_DISTANCES` and ``length // 2``, each capped at ``length - 1``, deduplicated)."""
    if distances is not None:
        return tuple(d for d in distances if d < length)
    return tuple(sorted({min(d, length - 1) for d in (*DEFAULT_DISTANCES, length // 2)} - {0}))


def pair_plan(rows: Mapping[int, Sequence[int]], chunk: int) -> tuple[dict[int, int], int]:
    """The distances of a chunked pass whose rows of length L carry ``rows[L]``: per distance (increasing) the
    largest length that carries it, and the carry, the longest distance up to ``chunk`` (paired across chunks
    from kept rows; longer ones are recomputed).

    >>> pair_plan({1024: (1, 16, 512), 4096: (1, 16, 2048)}, chunk=1024)
    ({1: 4096, 16: 4096, 512: 1024, 2048: 4096}, 512)
    """
    until: dict[int, int] = {}
    for L, ds in rows.items():
        for d in ds:
            until[d] = max(until.get(d, 0), L)
    return dict(sorted(until.items())), max((d for d in until if d <= chunk), default=0)


def fold_pairs(x: F64, t: F64, wrap: bool = False) -> tuple[float, float, bool]:
    """Max and sum of ``|wrap(x)|`` for ``x = cur - prev``, the differences of wrapped signed errors (in [-pi, pi]
    as :func:`~precision_audit.rope.wrap` gives them; nan: pi), and whether the wrap was needed.  ``x`` is
    overwritten with ``|wrap(x)|``, ``t`` (its shape) is scratch.  ``|x|`` is at most float64 2 pi, where
    ``|wrap(x)| = min(|x|, 2 pi - |x|)``; that step is skipped while no ``|x|`` exceeds pi, and done at once
    when ``wrap`` says an earlier block needed it (it changes no value up to pi).

    >>> x = np.array([[6.0], [0.25]]); mx, sm, wrapped = fold_pairs(x, np.empty_like(x))
    >>> round(mx, 6), round(sm, 6), wrapped  # 6 - 2 pi = -0.283185
    (0.283185, 0.533185, True)
    """
    np.abs(x, out=x)
    if not x.size:
        return 0.0, 0.0, wrap
    top = np.maximum.reduce  # x.max() and x.sum() are these reductions, less a Python layer each
    if not wrap:
        mx = float(top(x, axis=None))
        wrap = not mx <= math.pi  # some pair needs the wrap, or is nan
    if wrap:
        np.subtract(_TWO_PI, x, out=t)  # >= 0: both errors in [-pi, pi] give |x| <= 2 pi
        np.minimum(x, t, out=x)  # nan stays nan
        mx = float(top(x, axis=None))
        if not math.isfinite(mx):
            x[~np.isfinite(x)] = math.pi
            mx = float(top(x, axis=None))
    return mx, float(np.add.reduce(x, axis=None)), wrap


def pair_block(cur: F64, prev: F64, scratch: F64 | None = None) -> tuple[F64, F64]:
    """Max and sum of ``|wrap(cur - prev)|`` over every element (:func:`fold_pairs`), each an array of one value.
    ``scratch``: a float64 buffer of twice ``cur``'s size to work in (or None: a new one).

    >>> mx, sm = pair_block(np.array([[3.0], [0.5]]), np.array([[-3.0], [0.25]]))
    >>> round(float(mx[0]), 6), round(float(sm[0]), 6)  # 6 - 2 pi = -0.283185
    (0.283185, 0.533185)
    """
    n = cur.size
    buf = scratch.reshape(-1) if scratch is not None and scratch.size >= 2 * n else np.empty(2 * n)
    d, t = buf[:n].reshape(cur.shape), buf[n : 2 * n].reshape(cur.shape)
    np.subtract(cur, prev, out=d)
    mx, sm, _ = fold_pairs(d, t)
    return np.array([mx], dtype=np.float64), np.array([sm], dtype=np.float64)


def cross_pairs(start: int, stop: int, head: F64, tail: F64, distances: Iterable[int],
                scratch: F64 | None = None) -> dict[int, tuple[F64, F64]]:
    """Per distance, the max and sum of the pairs of the chunk ``start..stop-1`` whose earlier position lies
    before it: ``head`` holds the chunk's first rows (at least the longest distance's, or all), ``tail`` the
    signed rows just before ``start`` (as many as the longest distance, or back to position 0).
    (:meth:`PairAcc.cross` and a worker that kept the previous chunk give the same bits.)

    >>> e = np.array([[0.0], [0.1], [0.3]])
    >>> {d: (round(float(m[0]), 6), round(float(s[0]), 6)) for d, (m, s) in cross_pairs(2, 3, e[2:], e[:2], [1, 2]).items()}
    {1: (0.2, 0.2), 2: (0.3, 0.3)}
    """
    out: dict[int, tuple[F64, F64]] = {}
    base = start - tail.shape[0]  # the position of the tail's first row
    for d in distances:
        lo, hi = max(start, d), min(stop, start + d)  # positions whose partner is in an earlier chunk
        if lo >= hi:
            continue
        out[d] = pair_block(head[lo - start : hi - start], tail[lo - d - base : hi - d - base], scratch)
    return out


class PairAcc:
    """Running pair reductions of one recipe over a prefix of positions, per distance.

    Chunks come in position order.  A chunk brings its own pairs (both rows in
    the chunk, or a recomputed shifted block) and its first and last ``carry``
    rows of signed errors; the pairs that reach back into earlier chunks are
    formed here from the kept last ``carry`` rows.
    """

    def __init__(self, nf: int, distances: Sequence[int], carry: int) -> None:
        self.max = {d: np.zeros(1) for d in distances}  # over every frequency: a pair error is reported so
        self.sum = {d: np.zeros(1) for d in distances}
        self.carry = carry
        self.tail: F64 = np.zeros((0, nf))  # signed errors of the last min(carry, position) positions
        self.position = 0  # positions merged so far
        self._scratch: F64 = np.empty(0)

    def add(self, start: int, stop: int, pairs: dict[int, tuple[F64, F64]], head: F64 | None,
            tail: F64 | None, cross: dict[int, tuple[F64, F64]] | None = None) -> None:
        """Merge the chunk of positions ``start..stop-1`` (``start`` = the positions merged so far).

        ``cross``: the chunk's pairs that reach back into earlier chunks, formed already (:meth:`cross`, by
        another accumulator that kept those rows); then ``head`` and ``tail`` are not needed, and the kept
        tail is stale until :meth:`resume`."""
        if start != self.position:
            raise ValueError(f"chunk at {start} merged after position {self.position}")
        for d, (mx, sm) in pairs.items():
            np.maximum(self.max[d], mx, out=self.max[d])
            self.sum[d] += sm
        if cross is None and head is not None and tail is not None and stop > start:
            cross = self.cross(start, stop, head)
        if tail is not None and stop > start:
            self.keep(tail)
        for d, (mx, sm) in (cross or {}).items():
            np.maximum(self.max[d], mx, out=self.max[d])
            self.sum[d] += sm
        self.position = stop

    def cross(self, start: int, stop: int, head: F64) -> dict[int, tuple[F64, F64]]:
        """The pairs of the chunk ``start..stop-1`` whose earlier position is in an earlier chunk (in the kept
        tail, which must reach back ``carry`` positions or to position 0), per carried distance: max, sum.
        ``head``: the chunk's first ``min(carry, stop - start)`` signed rows."""
        if self._scratch.size < 2 * self.carry * head.shape[1]:
            self._scratch = np.empty(2 * self.carry * head.shape[1])
        return cross_pairs(start, stop, head, self.tail, [d for d in self.max if d <= self.carry], self._scratch)

    def keep(self, tail: F64) -> None:
        """Keep the last ``carry`` rows of the signed errors merged so far, ``tail`` the newest (a view, not a
        copy, when it holds them all: the chunk's buffer is its own)."""
        new = tail[max(0, tail.shape[0] - self.carry) :]
        drop = max(0, self.tail.shape[0] + new.shape[0] - self.carry)  # rows of the old tail that leave
        self.tail = new if drop >= self.tail.shape[0] else np.concatenate([self.tail[drop:], new])

    def resume(self, other: "PairAcc") -> None:
        """Take the kept tail of ``other``, an accumulator that saw the chunks merged here with ``cross``."""
        if other.position != self.position:
            raise ValueError(f"tail of position {other.position} resumed at position {self.position}")
        self.tail = other.tail

    def snapshot(self, distances: Iterable[int]) -> dict[int, tuple[F64, F64]]:
        """Copies of the max and sum of the given distances."""
        return {d: (self.max[d].copy(), self.sum[d].copy()) for d in distances}


class PairPass:
    """The pair errors of a chunked pass over positions that yields signed rotation errors chunk by chunk
    (a live module's cos/sin: :mod:`precision_audit.hf.modules`).

    ``lengths`` and ``distances`` as :func:`~precision_audit.rope.audit` takes them;
    ``chunk`` positions per chunk: distances up to it are paired across chunks
    (the last ones kept), longer ones from ``shifted(a, b)``, the signed errors
    of positions a..b-1 recomputed on demand.

    >>> pp = PairPass([8], [2], chunk=4, nf=1)
    >>> e = np.array([[0.0], [0.1], [0.0], [-0.1], [0.0], [0.1], [0.0], [-0.1]])
    >>> for a in (0, 4):
    ...     pp.add(e[a:a + 4], a, a + 4, shifted=lambda a, b: e[a:b])
    >>> [(p.distance, round(p.max_rotation_error, 12), round(p.mean_rotation_error, 12)) for p in pp.errors(8)]
    [(2, 0.2, 0.1)]
    """

    def __init__(self, lengths: Sequence[int], distances: Sequence[int] | None, chunk: int, nf: int) -> None:
        self.nf = nf
        self.rows = {L: row_distances(L, distances) for L in lengths}
        self.until, self.carry = pair_plan(self.rows, chunk)
        self.acc = PairAcc(nf, list(self.until), self.carry)

    def add(self, signed: F64, start: int, stop: int, shifted: Callable[[int, int], F64]) -> None:
        """Merge the signed errors of positions start..stop-1 (chunks in position order; the last rows are kept
        by reference: ``signed`` must not change afterwards)."""
        pairs: dict[int, tuple[F64, F64]] = {}
        for d, until in self.until.items():
            if start >= until:
                continue
            if d <= self.carry:
                if stop - start > d:
                    pairs[d] = pair_block(signed[d:], signed[: stop - start - d])
            elif max(start, d) < stop:
                a = max(start, d)
                pairs[d] = pair_block(signed[a - start :], shifted(a - d, stop - d))
        k = min(self.carry, stop - start)
        self.acc.add(start, stop, pairs, signed[:k], signed[stop - start - k :])

    def errors(self, length: int) -> tuple[PairError, ...]:
        """The pair errors of the row of this length (after its last chunk)."""
        snap = self.acc.snapshot(self.rows[length])
        return tuple(PairError(d, float(mx.max()), float(sm.sum() / ((length - d) * self.nf)))
                     for d, (mx, sm) in sorted(snap.items()))
