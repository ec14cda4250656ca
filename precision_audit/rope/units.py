"""The units of work of a RoPE pass and their merge in position order.

:func:`_plan` cuts positions into chunks (at every audited length); :func:`_units` groups them into the units a
worker computes (a twin unit: the chunks of a segment, then those D later, paired with them: :class:`_Twin`);
:class:`_Links` forms the pairs that reach into the previous chunk in whichever worker finishes second; and
:func:`_merge` folds each chunk's stats into the running :class:`_Acc` of every recipe in position order,
snapshotting them at every length, so that rows do not depend on how many workers ran.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .chunk_stats import _ChunkStats, _PairSpec
from .oracle import F64
from .pairs import PairAcc, cross_pairs


class _Acc:
    """Running per-frequency reductions for one recipe over a prefix of positions."""

    def __init__(self, nf: int) -> None:
        self.ang_max = np.zeros(nf)
        self.ang_sum = np.zeros(nf)
        self.rot_max = np.zeros(nf)
        self.rot_sum = np.zeros(nf)
        self.collisions = 0
        self.last: F64 | None = None
        self.pairs: PairAcc | None = None  # pair errors, when asked
        self.pair_snap: dict[int, tuple[F64, F64]] = {}  # a snapshot's pair max and sum per distance

    def add(self, c: _ChunkStats, start: int = 0, stop: int = 0, cross: dict[int, tuple[F64, F64]] | None = None
            ) -> None:
        """Merge the next chunk, positions ``start..stop-1`` (chunks must come in position order: sums are
        order-sensitive); ``cross``: its pairs across chunks, formed already (:meth:`.PairAcc.add`)."""
        if self.pairs is not None:
            self.pairs.add(start, stop, c.pairs, c.head, c.tail, cross if cross is not None else c.cross)
        np.maximum(self.ang_max, c.ang_max, out=self.ang_max)
        self.ang_sum += c.ang_sum
        np.maximum(self.rot_max, c.rot_max, out=self.rot_max)
        self.rot_sum += c.rot_sum
        self.collisions += c.collisions + (self.last is not None and _same_row(self.last, c.first))
        self.last = c.last

    def padded(self, active: npt.NDArray[np.bool_]) -> "_Acc":
        """The accumulator over all frequencies, where the inactive ones (theta = 0) had error 0."""
        out = _Acc(active.size)
        for name in ("ang_max", "ang_sum", "rot_max", "rot_sum"):
            getattr(out, name)[active] = getattr(self, name)
        out.collisions = self.collisions
        for d, (mx, sm) in self.pair_snap.items():  # the sum is over every frequency already (the inactive add 0)
            full = np.zeros(active.size)
            full[active] = mx
            out.pair_snap[d] = (full, sm)
        return out

    def snapshot(self, distances: Sequence[int] = ()) -> "_Acc":
        snap = _Acc(0)
        snap.ang_max, snap.ang_sum = self.ang_max.copy(), self.ang_sum.copy()
        snap.rot_max, snap.rot_sum = self.rot_max.copy(), self.rot_sum.copy()
        snap.collisions = self.collisions
        if self.pairs is not None:
            snap.pair_snap = self.pairs.snapshot(distances)
        return snap


def _same_row(a: F64, b: F64) -> bool:
    """Rows equal element by element, nan equal to nan."""
    return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


_Chunk = tuple[int, int, "int | None"]  # positions start..stop-1, and the length that ends there (or None)


def _plan(lengths: Sequence[int], chunk: int) -> list[_Chunk]:
    """Chunks of at most ``chunk`` positions up to each length in turn (``lengths`` sorted, as
    :func:`.audit.check_rope_lengths` gives them).

    >>> _plan([3, 5], 2)
    [(0, 2, None), (2, 3, 3), (3, 5, 5)]
    """
    plan: list[_Chunk] = []
    start = 0
    for L in lengths:
        while start < L:
            stop = min(L, start + chunk)
            plan.append((start, stop, None))
            start = stop
        if plan and plan[-1][1] == L:
            plan[-1] = (plan[-1][0], L, L)
        else:  # L repeats the previous length: snapshot without new positions
            plan.append((L, L, L))
    return plan


class _Links:
    """The pairs of a chunk that reach into the chunk before it, formed by the worker that finishes second of the
    two (the same :func:`.cross_pairs` the merge would call, on the same rows: the same bits), so that the merge
    thread only adds them.  Needs the previous chunk's last ``carry`` rows (or all rows from position 0)."""

    def __init__(self, distances: Sequence[int], carry: int) -> None:
        self.distances, self.carry = list(distances), carry
        self.lock = threading.Lock()
        self.ends: dict[int, tuple[int, list[F64 | None]]] = {}  # stop -> (start, tails) of finished chunks
        self.starts: dict[int, tuple[int, list[_ChunkStats]]] = {}  # start -> (stop, stats) waiting for the one before

    def done(self, a: int, b: int, stats: list[_ChunkStats], scratch: F64 | None = None) -> None:
        """Chunk a..b-1 is computed: link it with the chunks before and after it that are done (``scratch``: a
        float64 buffer of the calling worker's to fold the pairs in, or None)."""
        tails = [st.tail for st in stats]
        with self.lock:
            before = self.ends.pop(a, None)
            if before is None:
                self.starts[a] = (b, stats)
            after = self.starts.pop(b, None)
            if after is None:
                self.ends[b] = (a, tails)
        if before is not None:
            self._form(before[0], before[1], a, b, stats, scratch)
        if after is not None:
            self._form(a, tails, b, after[0], after[1], scratch)

    def _form(self, start: int, tails: list[F64 | None], a: int, b: int, stats: list[_ChunkStats],
              scratch: F64 | None = None) -> None:
        """The cross pairs of chunk a..b-1 from the tails of the chunk that starts at ``start`` and ends at a."""
        formed: dict[int, dict[int, tuple[F64, F64]]] = {}
        for tail, st in zip(tails, stats):
            if tail is None or st.head is None or not (tail.shape[0] >= self.carry or start == 0):
                continue
            if id(st) not in formed:  # recipes that share a cache share its stats
                formed[id(st)] = cross_pairs(a, b, st.head, tail, self.distances, scratch)
            st.cross = formed[id(st)]


_TWIN_BYTES = 64 * 2**20  # the largest total of chunk reductions held back for twin chunks


@dataclass(frozen=True)
class _Twin:
    """The distance D of a pass paired from kept rows instead of recomputed: a unit of work computes the
    chunks of positions [p, q) (their signed errors stay in the worker) and then those of [p + D, q + D)
    (paired with them at distance D); ``segments`` lists the [p, q), which tile [0, ``stop``), each ending
    at a chunk boundary that is one at + D too.  The chunks from D on merge only after every earlier one:
    their reductions wait (``_TWIN_BYTES`` at most)."""

    d: int
    segments: tuple[tuple[int, int], ...]

    @property
    def stop(self) -> int:
        return self.segments[-1][1]

    def first(self, position: int) -> int:
        """The first position of the segment holding ``position`` (or ``position - D``)."""
        x = position if position < self.stop else position - self.d
        return next(p for p, q in self.segments if p <= x < q)


def _twin(steps: Sequence[_Chunk], spec: _PairSpec | None, chunk: int, nf: int, n_recipes: int) -> _Twin | None:
    """The twin distance of a pass, or None: the recomputed distance with the most positions in [D, 2D) below its
    largest length (the default L/2 of the longest row), paired there when the chunk boundaries below D, moved by D, are chunk boundaries
    often enough (segments of at most two chunks) and the waiting reductions stay small.

    >>> spec = _PairSpec({1: 8, 4: 8}, 1, 2, frozenset({0}))
    >>> _twin(_plan([8], 2), spec, 2, 1, 1)
    _Twin(d=4, segments=((0, 2), (2, 4)))
    """
    if spec is None or not spec.shifted:
        return None
    d = max(spec.shifted, key=lambda x: (min(spec.until[x], 2 * x) - x, x))  # the most positions paired
    stop = min(spec.until[d], 2 * d) - d  # pairs (m, m - D) for m in [D, D + stop)
    cuts = {a for a, _, _ in steps} | {b for _, b, _ in steps}
    aligned = [x for x in sorted(cuts) if x <= stop and x + d in cuts]
    if not aligned or aligned[0] != 0 or aligned[-1] < chunk:
        return None
    segments = tuple((p, q) for p, q in zip(aligned, aligned[1:]) if q > p)
    waiting = sum(1 for a, b, _ in steps if d <= a < d + aligned[-1])
    per_chunk = 8 * nf * (8 + 2 * len(spec.until))  # a chunk's reductions, end rows and pair sums, per recipe
    if max(q - p for p, q in segments) > 2 * chunk or waiting * n_recipes * per_chunk > _TWIN_BYTES:
        return None  # a segment's kept rows, or the waiting reductions, would take too much memory
    return _Twin(d, segments)


def _units(steps: Sequence[_Chunk], twin: _Twin | None) -> list[list[_Chunk]]:
    """The chunks grouped into units of work, in the order they are computed: one chunk each, or (twin
    chunks) the chunks of a segment [p, q) then those of [p + D, q + D); the units start in position order.

    >>> _units(_plan([8], 2), _Twin(4, ((0, 2), (2, 4))))
    [[(0, 2, None), (4, 6, None)], [(2, 4, None), (6, 8, 8)]]
    """
    if twin is None:
        return [[c] for c in steps]
    units: dict[int, list[_Chunk]] = {}
    for c in steps:
        a = c[0]
        key = twin.first(a) if a < twin.stop or twin.d <= a < twin.d + twin.stop else a + 0.5
        units.setdefault(key, []).append(c)
    return [units[k] for k in sorted(units)]


def _merge(units: Sequence[Sequence[_Chunk]], run: Callable[[Sequence[_Chunk]], list[list[_ChunkStats]]],
           workers: int, accs: list[_Acc], progress: Callable[[int], None] | None,
           pairs: dict[int, Sequence[int]] | None = None, twin: _Twin | None = None) -> list[list[tuple[_Acc, int]]]:
    """``run`` every unit of chunks (on ``workers`` threads), merge the stats into ``accs`` in position order;
    a snapshot of every accumulator at each length that ends a chunk (with the pair distances ``pairs[L]``).

    The chunks of a twin's [D, D + stop) come before some earlier ones: their reductions wait, and their
    pairs across chunks are formed on arrival (``ahead``: an accumulator that keeps their rows from D on)
    unless they reach back below D (then they wait whole)."""
    snaps: list[list[tuple[_Acc, int]]] = [[] for _ in accs]
    waiting: list[tuple[_Chunk, list[_ChunkStats], list[dict[int, tuple[F64, F64]] | None]]] = []
    ahead = [None if acc.pairs is None or twin is None else PairAcc(acc.ang_max.size, list(acc.pairs.max),
                                                                     acc.pairs.carry) for acc in accs]
    pre_start = twin.d if twin is not None else 0
    for acc in ahead:
        if acc is not None:
            acc.position = pre_start

    def merge(item: _Chunk, stats: list[_ChunkStats], cross: Sequence[dict[int, tuple[F64, F64]] | None] = ()
              ) -> None:
        a, b, L = item
        for i, (acc, st) in enumerate(zip(accs, stats)):
            acc.add(st, a, b, cross[i] if cross else None)
        if L is not None:
            for i, acc in enumerate(accs):
                snaps[i].append((acc.snapshot((pairs or {}).get(L, ())), L))

    def wait(item: _Chunk, stats: list[_ChunkStats]) -> None:
        a, b, _ = item
        cross: list[dict[int, tuple[F64, F64]] | None] = []
        formed: dict[int, dict[int, tuple[F64, F64]]] = {}  # by stats object: recipes that share a cache share it
        for pre, st in zip(ahead, stats):
            if pre is None or st.head is None or st.tail is None or b == a:
                cross.append(None)
                continue
            # a chunk whose pairs reach back below D waits whole (the merge forms them from the rows before D,
            # unless a worker did: st.cross)
            if st.cross is not None:
                formed[id(st)] = st.cross
                cross.append(st.cross)
            elif a - pre.carry >= pre_start:
                if id(st) not in formed:
                    formed[id(st)] = pre.cross(a, b, st.head)
                cross.append(formed[id(st)])
            else:
                cross.append(None)
            pre.keep(st.tail)
            pre.position = b
        for st in stats:
            if id(st) in formed:
                st.head = st.tail = None  # formed: the rows can go
        waiting.append((item, stats, cross))

    def release() -> None:
        for item, stats, cross in waiting:
            merge(item, stats, cross)
        if any(c is not None for _, _, cross in waiting for c in cross):  # the merge's kept rows are stale
            for acc, pre in zip(accs, ahead):
                if acc.pairs is not None and pre is not None:
                    acc.pairs.resume(pre)
        waiting.clear()

    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        results = _windowed(pool, run, units, workers) if pool is not None else map(run, units)
        for unit, unit_stats in zip(units, results):
            for item, stats in zip(unit, unit_stats):
                a, b, _ = item
                if twin is not None and twin.d <= a < twin.d + twin.stop:
                    wait(item, stats)
                else:
                    if twin is not None and a >= twin.d:
                        release()
                    merge(item, stats)
                if progress is not None and b > a:
                    progress(b - a)
            unit_stats = []  # let the chunks' rows go while the next unit is computed
        release()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return snaps


def _windowed(pool: ThreadPoolExecutor, run: Callable[[Sequence[_Chunk]], list[list[_ChunkStats]]],
              plan: Sequence[Sequence[_Chunk]], ahead: int) -> Iterator[list[list[_ChunkStats]]]:
    """``pool.map(run, plan)`` with at most ``ahead`` units submitted and not yet taken: finished units wait
    for the merge in order, and their stats (pair rows) stay bounded however long the pass."""
    todo = iter(plan)
    pending = collections.deque(pool.submit(run, item) for item in itertools.islice(todo, ahead))
    while pending:
        done = pending.popleft().result()
        nxt = next(todo, None)
        if nxt is not None:
            pending.append(pool.submit(run, nxt))
        yield done
