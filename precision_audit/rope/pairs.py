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

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..rows import Row
from ..verdicts import resolved_error
from .oracle import _TWO_PI, F64

__all__ = ["DEFAULT_DISTANCES", "PairAcc", "PairError", "PairPass", "check_distances", "chunk_bounds", "cross_pairs",
           "fold_pairs", "pair_block", "pair_plan", "row_distances", "twin_order"]

DEFAULT_DISTANCES: tuple[int, ...] = (1, 16, 256, 4096)  # and L // 2; each capped at L - 1
_PI_ROUNDED = math.pi * (1 + 2.0**-40)  # pi, and the rounding of a mean of errors pi (or of a wrap near pi)


@dataclass(frozen=True)
class PairError(Row):
    """The pairwise rotation error at one distance over positions m in [D, L) of a row of length L (rad).

    ``max_rotation_error`` is the max over those positions and every frequency,
    ``mean_rotation_error`` the mean over all (m, i) pairs (``(L - D) * n_freq``
    of them; frequencies that do not rotate count with error 0, as in the
    absolute mean), ``resolved_max_rotation_error`` the max over the frequency
    pairs that resolve the distance (:func:`precision_audit.verdicts.resolving`:
    at most a few turns across it; None where not measured: the verdict then
    counts every pair as resolving).

    >>> PairError(16, 0.005, 0.001).to_dict()
    {'distance': 16, 'max_rotation_error': 0.005, 'mean_rotation_error': 0.001, 'resolved_max_rotation_error': None}
    >>> PairError(0, 0.0, 0.0)
    Traceback (most recent call last):
    ...
    ValueError: distance 0 must be a positive integer
    """

    distance: int
    max_rotation_error: float
    mean_rotation_error: float
    resolved_max_rotation_error: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.distance, bool) or not isinstance(self.distance, int) or self.distance < 1:
            raise ValueError(f"distance {self.distance!r} must be a positive integer")
        for name in ("max_rotation_error", "mean_rotation_error", "resolved_max_rotation_error"):
            v = getattr(self, name)
            if v is None and name.startswith("resolved"):
                continue
            if not (isinstance(v, float) and 0.0 <= v <= _PI_ROUNDED):
                raise ValueError(f"{name} {v!r} must be a float in [0, pi]")
        r = self.resolved_max_rotation_error
        if r is not None and r > self.max_rotation_error:
            raise ValueError(f"resolved_max_rotation_error {r!r} exceeds max_rotation_error {self.max_rotation_error!r}")

    @classmethod
    def of(cls, distance: int, column_max: F64, mean: float, rotation: F64 | None) -> "PairError":
        """The record of one distance from its per-frequency maxima (``column_max``) and mean; ``rotation``:
        each frequency pair's exact rotation across the distance (None: the resolved error is not measured).

        >>> PairError.of(4096, np.array([2.6, 0.02]), 0.5, 4096 * np.array([1.0, 0.001])).resolved_max_rotation_error
        0.02
        """
        top = float(np.max(column_max))
        return cls(distance, top, mean, None if rotation is None else min(resolved_error(column_max, rotation), top))


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


def column_max(d: F64) -> F64:
    """``d.max(axis=0)`` (nan if any nan), faster: the rows in groups of 32 side by side (one wide row each,
    maxima over groups of long rows), then over the 32 and the rest.

    >>> column_max(np.arange(200.0).reshape(100, 2)).tolist()
    [198.0, 199.0]
    """
    n, nf = d.shape
    g = n // 32
    if g < 2 or not d.flags.c_contiguous:
        return d.max(axis=0)
    wide = d[: 32 * g].reshape(g, 32 * nf).max(axis=0).reshape(32, nf).max(axis=0)
    return wide if n == 32 * g else np.maximum(wide, d[32 * g :].max(axis=0))


def fold_pairs(x: F64, t: F64, wrap: bool = False) -> tuple[F64, float, bool]:
    """Per frequency (column) the max, and the sum, of ``|wrap(x)|`` for ``x = cur - prev`` (positions x
    frequencies), the differences of wrapped signed errors (in [-pi, pi] as :func:`~precision_audit.rope.wrap`
    gives them; nan: pi), and whether the wrap was needed.  ``x`` is overwritten with ``|wrap(x)|``, ``t`` (its
    shape) is scratch.  ``|x|`` is at most float64 2 pi, where ``|wrap(x)| = min(|x|, 2 pi - |x|)``; that step
    is skipped while no ``|x|`` exceeds pi, and done at once when ``wrap`` says an earlier block needed it (it
    changes no value up to pi).

    >>> x = np.array([[6.0], [0.25]]); mx, sm, wrapped = fold_pairs(x, np.empty_like(x))
    >>> mx.round(6).tolist(), round(sm, 6), wrapped  # 6 - 2 pi = -0.283185
    ([0.283185], 0.533185, True)
    """
    np.abs(x, out=x)
    if not x.size:
        return np.zeros(x.shape[-1]), 0.0, wrap
    if not wrap:
        col = column_max(x)
        wrap = not float(col.max()) <= math.pi  # some pair needs the wrap, or is nan
    if wrap:
        np.subtract(_TWO_PI, x, out=t)  # >= 0: both errors in [-pi, pi] give |x| <= 2 pi
        np.minimum(x, t, out=x)  # nan stays nan
        col = column_max(x)
        if not math.isfinite(float(col.max())):
            x[~np.isfinite(x)] = math.pi
            col = column_max(x)
    return col, float(np.add.reduce(x, axis=None)), wrap


def pair_block(cur: F64, prev: F64, scratch: F64 | None = None) -> tuple[F64, F64]:
    """Per frequency the max, and the sum, of ``|wrap(cur - prev)|`` (:func:`fold_pairs`; the sum an array of
    one value).  ``scratch``: a float64 buffer of twice ``cur``'s size to work in (or None: a new one).

    >>> mx, sm = pair_block(np.array([[3.0], [0.5]]), np.array([[-3.0], [0.25]]))
    >>> round(float(mx[0]), 6), round(float(sm[0]), 6)  # 6 - 2 pi = -0.283185
    (0.283185, 0.533185)
    """
    n = cur.size
    buf = scratch.reshape(-1) if scratch is not None and scratch.size >= 2 * n else np.empty(2 * n)
    d, t = buf[:n].reshape(cur.shape), buf[n : 2 * n].reshape(cur.shape)
    np.subtract(cur, prev, out=d)
    mx, sm, _ = fold_pairs(d, t)
    return mx, np.array([sm], dtype=np.float64)


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
        self.max = {d: np.zeros(nf) for d in distances}  # per frequency (the resolved error needs them)
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


_HELD_BYTES = 64 * 2**20
"""The most signed rows (bytes) a :class:`PairPass` holds for the pairs it forms out of position order; a plan
that would hold more re-runs the earlier positions of its long distances other than the twin (``shifted``)."""


def chunk_bounds(lengths: Iterable[int], chunk: int) -> list[tuple[int, int]]:
    """The chunks of a pass over positions 0..max(lengths)-1: at most ``chunk`` positions each, cut at every
    length, so that a length always ends a chunk.

    >>> chunk_bounds([5, 3], 2)
    [(0, 2), (2, 3), (3, 5)]
    """
    out: list[tuple[int, int]] = []
    start = 0
    for L in sorted(lengths):
        while start < L:
            out.append((start, min(L, start + chunk)))
            start = out[-1][1]
    return out


def _at(starts: Sequence[int], position: int) -> int:
    """The index of the chunk holding ``position`` (``starts``: the chunks' first positions, increasing)."""
    return bisect.bisect_right(starts, position) - 1


@dataclass(frozen=True)
class _Outer:
    """The pairs of chunk ``j``'s positions lo..hi-1 with those D earlier, which lie in earlier chunks: a
    carried distance's across the chunk's start (``cross``: merged after the chunk's own pairs, as
    :meth:`PairAcc.add` merges them) or a long distance's; ``needs``: the chunks of positions lo-D..hi-D-1 in
    position order, then ``j`` (``rerun``: just ``j``, the earlier positions re-run by ``shifted``)."""

    j: int
    d: int
    lo: int
    hi: int
    cross: bool
    rerun: bool
    needs: tuple[int, ...]


def _outer_pairs(chunks: Sequence[tuple[int, int]], until: Mapping[int, int], carry: int,
                 rerun: frozenset[int]) -> list[_Outer]:
    """Every chunk's pairs that reach into earlier chunks, per distance up to the largest length carrying it."""
    starts = [a for a, _ in chunks]
    out = []
    for j, (a, b) in enumerate(chunks):
        for d, u in until.items():
            lo, hi = max(a, d), (min(b, a + d) if d <= carry else b)
            if a >= u or lo >= hi:
                continue
            before = () if d in rerun else tuple(range(_at(starts, lo - d), _at(starts, hi - d - 1) + 1))
            out.append(_Outer(j, d, lo, hi, d <= carry, d in rerun, (*before, j)))
    return out


def twin_order(chunks: Sequence[tuple[int, int]], d: int | None, until: int = 0) -> list[int]:
    """The order a pass computes its chunks in for a twin distance ``d`` (None: position order): each chunk
    whose first position ``a`` lies in ``[d, until)`` right after its twin, the chunk holding ``b - 1 - d`` (the
    last position its pairs at ``d`` need), depth first, so that rows wait for their pairs at ``d`` for about
    one chunk; the other chunks in position order.

    >>> twin_order(chunk_bounds([8], 2), 4, 8)
    [0, 2, 1, 3]
    >>> twin_order(chunk_bounds([12], 2), 5, 12)  # 6..7 after 2..3 (1..2 at 5), 10..11 after 6..7 (5..6)
    [0, 1, 3, 5, 2, 4]
    """
    if d is None:
        return list(range(len(chunks)))
    starts = [a for a, _ in chunks]
    children: dict[int, list[int]] = {}
    roots = []
    for j, (a, b) in enumerate(chunks):
        if d <= a < until:
            children.setdefault(_at(starts, b - 1 - d), []).append(j)
        else:
            roots.append(j)
    order, stack = [], roots[::-1]
    while stack:
        j = stack.pop()
        order.append(j)
        stack.extend(reversed(children.get(j, ())))
    return order


def _held_rows(chunks: Sequence[tuple[int, int]], order: Sequence[int], outer: Sequence[_Outer]
               ) -> tuple[dict[int, tuple[int, int]], int]:
    """The positions of each chunk that outer pairs need (the hull: from the first to the last), and the most
    rows held at once when chunks come in ``order`` and each pair is formed as soon as its chunks are in."""
    when = {j: i for i, j in enumerate(order)}
    hull: dict[int, tuple[int, int]] = {}
    release: dict[int, int] = {}
    for p in outer:
        done = max(when[c] for c in p.needs)
        for c in p.needs:
            a, b = chunks[c]
            for x, y in ((max(a, p.lo), min(b, p.hi)), (max(a, p.lo - p.d), min(b, p.hi - p.d))):
                if x < y:
                    lo, hi = hull.get(c, (x, y))
                    hull[c] = (min(lo, x), max(hi, y))
            release[c] = max(release.get(c, done), done)
    delta = [0] * (len(order) + 1)
    for c, (x, y) in hull.items():
        delta[when[c]] += y - x
        delta[release[c] + 1] -= y - x
    return hull, max(itertools.accumulate(delta), default=0)


class PairPass:
    """The pair errors of a chunked pass over positions that yields signed rotation errors chunk by chunk
    (a live module's cos/sin, an apply kernel's rotations: :func:`precision_audit.hf.rotation_pass`).

    ``lengths`` and ``distances`` as :func:`~precision_audit.rope.audit` takes them; the pass computes the
    chunks :attr:`chunks` (``chunk`` positions at most, :func:`chunk_bounds`) once each, in the order
    :attr:`order`, and :meth:`add` s each.  A pair of positions in two chunks is formed as soon as both are in,
    from the rows held until then: a distance up to ``chunk`` across the later chunk's start, a longer one
    (the default L/2) with the chunk's twin D earlier, which :attr:`order` computes just before it
    (:func:`twin_order`, for the long distance with the most pairs).  Other long distances hold their earlier
    rows until paired, unless the plan would hold more than 64 MiB: then they take them from ``shifted(a, b)``
    (positions a..b-1 computed again; all long distances if the twin alone would).  The figures are merged
    in position order when a row is asked for (:meth:`errors`), so they do not depend on the order: the
    same bits as one pass in position order.  ``frequencies``: the exact rad per position of each column, for
    the error in the pairs that resolve each distance (None: not measured).

    >>> pp = PairPass([8], [2], chunk=2, nf=1)
    >>> e = np.array([[0.0], [0.1], [0.0], [-0.1], [0.0], [0.1], [0.0], [-0.1]])
    >>> pp.order
    [0, 1, 2, 3]
    >>> for j in pp.order:
    ...     a, b = pp.chunks[j]
    ...     pp.add(e[a:b], a, b)
    >>> [(p.distance, round(p.max_rotation_error, 12), round(p.mean_rotation_error, 12)) for p in pp.errors(8)]
    [(2, 0.2, 0.1)]
    >>> PairPass([8], [4], chunk=2, nf=1).order  # 4 > chunk: each chunk from 4 on right after its twin
    [0, 2, 1, 3]
    """

    def __init__(self, lengths: Sequence[int], distances: Sequence[int] | None, chunk: int, nf: int,
                 held_bytes: int = _HELD_BYTES, frequencies: F64 | None = None) -> None:
        self.nf = nf
        self.frequencies = None if frequencies is None else np.abs(np.asarray(frequencies, dtype=np.float64))
        self.rows = {L: row_distances(L, distances) for L in lengths}
        self.until, self.carry = pair_plan(self.rows, chunk)
        self.chunks = chunk_bounds(lengths, chunk)
        long = [d for d in self.until if d > self.carry]
        twin = max(long, key=lambda d: (min(self.until[d], 2 * d) - d, d), default=None)
        for rerun in (frozenset(), frozenset(long) - {twin}, frozenset(long)):
            self.twin = None if twin in rerun else twin
            self.order = twin_order(self.chunks, self.twin, self.until.get(twin or 0, 0))
            self.outer = _outer_pairs(self.chunks, self.until, self.carry, rerun)
            self._hull, most = _held_rows(self.chunks, self.order, self.outer)
            if most * nf * 8 <= held_bytes:
                break
        self.rerun = rerun
        self._index = {a: j for j, (a, _) in enumerate(self.chunks)}
        self._missing = [len(p.needs) for p in self.outer]  # chunks a pair waits for
        self._users: dict[int, list[int]] = {}  # chunk -> the outer pairs that need it
        self._refs = [0] * len(self.chunks)  # outer pairs not formed yet that need the chunk's rows
        self._pending = [0] * len(self.chunks)  # outer pairs of the chunk not formed yet
        for i, p in enumerate(self.outer):
            self._pending[p.j] += 1
            for c in p.needs:
                self._users.setdefault(c, []).append(i)
                self._refs[c] += 1
        self._held: dict[int, tuple[int, F64]] = {}  # chunk -> (first position, its rows that pairs still need)
        self._added = [False] * len(self.chunks)
        self._found: list[tuple[dict[int, tuple[F64, F64]], dict[int, tuple[F64, F64]]]] = \
            [({}, {}) for _ in self.chunks]  # per chunk: its own (and long) pairs, its cross pairs
        self._scratch: F64 = np.empty(0)
        self.acc = PairAcc(nf, list(self.until), self.carry)  # the merge, in position order
        self._merged = 0  # chunks merged into acc

    @property
    def held(self) -> int:
        """Signed rows held now for pairs not formed yet."""
        return sum(rows.shape[0] for _, rows in self._held.values())

    def add(self, signed: F64, start: int, stop: int, shifted: Callable[[int, int], F64] | None = None) -> None:
        """Add the signed errors of the chunk of positions start..stop-1 (any chunk not added yet, best in
        :attr:`order`; rows still needed are held by reference: ``signed`` must not change afterwards).
        ``shifted(a, b)``: the signed errors of positions a..b-1 computed again, for the distances in
        :attr:`rerun`."""
        j = self._index.get(start, -1)
        if j < 0 or self.chunks[j][1] != stop or self._added[j]:
            raise ValueError(f"positions {start}..{stop - 1} are not a chunk of the pass still to add")
        self._added[j] = True
        own = self._found[j][0]
        for d, until in self.until.items():
            if d <= self.carry and start < until and stop - start > d:
                own[d] = pair_block(signed[d:], signed[: stop - start - d])
        if j in self._hull:
            x, y = self._hull[j]
            rows = signed[x - start : y - start]
            self._held[j] = (x, rows if y - x == stop - start else rows.copy())
        for i in self._users.get(j, ()):
            self._missing[i] -= 1
            if not self._missing[i]:
                self._form(self.outer[i], shifted)

    def _form(self, p: _Outer, shifted: Callable[[int, int], F64] | None) -> None:
        """Form the outer pair ``p`` (its chunks are in) and let go of rows no other pair needs."""
        if p.rerun and shifted is None:
            raise ValueError(f"distance {p.d} re-runs positions {p.lo - p.d}..{p.hi - p.d - 1}: give shifted")
        prev = shifted(p.lo - p.d, p.hi - p.d) if shifted is not None and p.rerun else \
            self._gather(p.lo - p.d, p.hi - p.d, p.needs[:-1])
        cur = self._gather(p.lo, p.hi, (p.j,))
        if self._scratch.size < 2 * cur.size:
            self._scratch = np.empty(2 * cur.size)
        self._found[p.j][1 if p.cross else 0][p.d] = pair_block(cur, prev, self._scratch)
        self._pending[p.j] -= 1
        for c in p.needs:
            self._refs[c] -= 1
            if not self._refs[c]:
                self._held.pop(c, None)

    def _gather(self, a: int, b: int, chunks: Iterable[int]) -> F64:
        """The held signed rows of positions a..b-1, which lie in ``chunks`` (in position order)."""
        parts = []
        for c in chunks:
            x, rows = self._held[c]
            lo, hi = max(a, x), min(b, x + rows.shape[0])
            if lo < hi:
                parts.append(rows[lo - x : hi - x])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def errors(self, length: int) -> tuple[PairError, ...]:
        """The pair errors of the row of this length (once its chunks and those before are added and paired):
        the chunks' figures merged in position order, as one pass in position order merges them."""
        while self._merged < len(self.chunks) and self.chunks[self._merged][1] <= length:
            a, b = self.chunks[self._merged]
            if not self._added[self._merged] or self._pending[self._merged]:
                raise ValueError(f"row of length {length} asked before positions {a}..{b - 1} were paired")
            own, cross = self._found[self._merged]
            self.acc.add(a, b, own, None, None, cross)
            self._merged += 1
        snap = self.acc.snapshot(self.rows[length])
        f = self.frequencies
        return tuple(PairError.of(d, mx, float(sm.sum() / ((length - d) * self.nf)), None if f is None else d * f)
                     for d, (mx, sm) in sorted(snap.items()))
