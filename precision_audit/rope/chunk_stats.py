"""One chunk of positions for every recipe of an audit: each shared stage computed once.

Recipes that share stages share their values: the exact oracle is computed
once per block of positions; positions once per format; the angle (and its
errors) once per distinct (positions, inverse frequencies, angle and trig
formats); cos/sin once per angle; the stored cache (and its rotation errors
and collisions) once per cache format of an angle.  Two recipes that differ
only where the cache audit does not look (a name, the apply stage) cost
nothing extra; the fp32 path of several cache dtypes evaluates cos/sin once.

A chunk is processed in blocks of rows that fit the CPU caches.  Every
reduction gives the bits the whole chunk would: maxima and counts do not depend
on the blocking, and a column sum continues from the previous block's sum
(numpy sums a C-contiguous array over axis 0 row after row, for two columns or
more; a single column is summed in one block).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats import Format, get_format, round_to
from . import float32_cache, fused, narrow_cache
from .engine import _angle_into, _cache_into, _Rows, _trig_into, _Work
from .formulas import AngleMaker
from .oracle import _TWO_PI, _WRAP_T, F64, _oracle_into, _wrap_into
from .pairs import column_max, fold_pairs
from .recipes import Recipe
from . import lookup
from .lookup import _AngleTable, has_codes, _PairTable
from .torch_engine import torch_stages

BLOCK_ELEMS = 2**18  # angles per block of rows: 2 MiB float64 arrays, few calls per block (2**17: ~4 % slower here)


def _fast_atan2() -> bool:
    """numpy's float64 arctan2 is a SIMD kernel here (faster than the pair table's lookups)."""
    return bool(getattr(np._core._multiarray_umath, "__cpu_features__", {}).get("AVX512_SKX", False))


@dataclass
class _ChunkStats:
    """One recipe's reductions over one chunk of positions (merged in chunk order)."""

    ang_max: F64
    ang_sum: F64
    rot_max: F64
    rot_sum: F64
    collisions: int  # rows equal to the previous row, inside the chunk
    first: F64  # stored (cos, sin) of the chunk's first and last position
    last: F64
    pairs: dict[int, tuple[F64, F64]] = field(default_factory=dict)  # distance: per-frequency max, sum
    head: F64 | None = None  # signed rotation errors of the first and last ``carry`` rows (pairs only)
    tail: F64 | None = None
    cross: dict[int, tuple[F64, F64]] | None = None  # pairs reaching into the previous chunk, formed by a worker


@dataclass
class _Reduction:
    """Per-frequency max and sum over the blocks of one chunk so far."""

    max: F64 | None = None
    sum: F64 | None = None

    def add(self, bmax: F64, dz: F64) -> None:
        """Fold a block: its per-frequency max, its values in the rows of ``dz`` after the first (scratch)."""
        self.max = bmax if self.max is None else np.maximum(self.max, bmax)
        if self.sum is None:
            self.sum = dz[1:].sum(axis=0)
        else:  # continue the running sum row after row: the sum the whole chunk would give
            dz[0] = self.sum
            self.sum = dz.sum(axis=0)


@dataclass
class _Total:
    """Per frequency the max, and the sum over every (position, frequency), of one chunk's pairs at one distance,
    block after block (the sum an array of one value)."""

    max: F64 | None = None
    sum: F64 = field(default_factory=lambda: np.zeros(1))

    def add(self, mx: F64, sm: float) -> None:
        """Fold a block of pair errors: its per-frequency max and its sum."""
        self.max = mx if self.max is None else np.maximum(self.max, mx)
        self.sum[0] += sm


@dataclass
class _CacheJob:
    """One stored cache of an angle job: the recipes (indices) that end in it, and how it is computed."""

    cache: Format
    recipe: Recipe  # the first of them
    members: list[int]
    table: _AngleTable | None = None
    pairs: _PairTable | None = None
    fast: bool = False
    f32: bool = False  # a float32 cache of float32 cos/sin (:mod:`.float32_cache`)
    # running reductions of the chunk in progress
    rot: _Reduction = field(default_factory=_Reduction)
    collisions: int = 0
    first: F64 | None = None
    last: F64 | None = None
    wraps: bool = False  # the last block's rotation errors needed wrapping
    signed: F64 | None = None  # the chunk's signed rotation errors (pairs only: :attr:`_Plan.pairs`)
    twin: list[tuple[int, F64]] = field(default_factory=list)  # (first position, signed rows) kept from twin chunks
    pair_red: dict[int, _Total] = field(default_factory=dict)  # per distance, the chunk so far
    pair_wraps: dict[int, bool] = field(default_factory=dict)


@dataclass
class _AngleJob:
    """One angle (positions format, inverse frequencies, angle and trig formats) and its caches."""

    recipe: Recipe
    inv: Any  # F64 or AngleMaker
    trig: Format
    caches: list[_CacheJob]
    ang: _Reduction = field(default_factory=_Reduction)
    wraps: bool = False  # the last block's angle errors needed wrapping

    @property
    def angle_max(self) -> float:
        """The largest finite angle of the angle and trig formats."""
        return min(get_format(self.recipe.angle).max_finite, self.trig.max_finite)


def _inv_key(inv: Any) -> tuple[Any, ...]:
    if isinstance(inv, AngleMaker):
        return ("maker", *(v.tobytes() if isinstance(v, np.ndarray) else v for v in vars(inv).values()))
    return ("array", np.asarray(inv).tobytes())


@dataclass(frozen=True)
class _PairSpec:
    """The pair distances of a pass: each with the largest position + 1 that needs it (the largest length
    of a row carrying it); those up to ``carry`` are formed across chunks at the merge (:class:`.pairs.PairAcc`),
    the longer ones from a recomputed block of positions m - D.  ``recipes``: who needs them."""

    until: dict[int, int]
    carry: int
    rows: int  # positions per chunk (the signed-error buffer)
    recipes: frozenset[int]

    @property
    def carried(self) -> list[int]:
        return [d for d in self.until if d <= self.carry]

    @property
    def shifted(self) -> list[int]:
        return [d for d in self.until if d > self.carry]


@dataclass
class _Plan:
    """The jobs of a pass: each distinct angle once, each distinct cache of an angle once."""

    jobs: list[_AngleJob]
    n_recipes: int
    scale: float
    position_formats: list[str]
    atan2_fast: bool
    pairs: _PairSpec | None = None
    buffers: "_Buffers" = field(default_factory=lambda: _Buffers())  # signed-error buffers, shared by the workers
    fused: bool = False  # the stages run as fused kernels (:mod:`.fused`: a pass long enough, numba here)

    @staticmethod
    def build(recipes: Sequence[Recipe], invs: Sequence[Any], scale: float, angles: int,
              pairs: _PairSpec | None = None) -> "_Plan":
        """Group the recipes of a pass over ``angles`` angles (tables only for long passes)."""
        by_angle: dict[tuple[Any, ...], _AngleJob] = {}
        tables = angles >= lookup._TABLE_MIN_ELEMENTS
        atan2_fast = _fast_atan2()
        for i, (r, inv) in enumerate(zip(recipes, invs)):
            key = (r.positions, r.angle, r.trig, _inv_key(inv))
            job = by_angle.get(key)
            if job is None:
                job = by_angle[key] = _AngleJob(r, inv, get_format(r.trig), [])
            fc = get_format(r.cache)
            cj = next((c for c in job.caches if c.cache.name == fc.name), None)
            if cj is None:
                cj = _CacheJob(fc, r, [])
                if tables:
                    cj.table = _AngleTable.build(r, scale)
                    cj.pairs = None if atan2_fast else _PairTable.build(r.cache, scale)
                cj.fast = cj.table is None and narrow_cache.eligible(job.trig, fc, scale)
                cj.f32 = cj.table is None and not cj.fast and float32_cache.eligible(job.trig, fc, scale)
                job.caches.append(cj)
            cj.members.append(i)
        return _Plan(list(by_angle.values()), len(recipes), scale,
                     list(dict.fromkeys(r.positions for r in recipes)), atan2_fast, pairs,
                     fused=angles >= fused.MIN_ANGLES and fused.enabled())

    def fresh(self, nf: int) -> "_Plan":
        """A copy with empty running reductions (one per worker), and a signed-error buffer per cache
        that needs pairs (``nf`` frequencies; each chunk gets a new one: its first and last rows go to the
        merge as they are)."""
        jobs = [_AngleJob(j.recipe, j.inv, j.trig, [_CacheJob(c.cache, c.recipe, c.members, c.table, c.pairs, c.fast, c.f32)
                                                    for c in j.caches]) for j in self.jobs]
        if self.pairs is not None:
            for cj in (c for j in jobs for c in j.caches):
                if self.pairs.recipes.intersection(cj.members):
                    cj.signed = np.empty((self.pairs.rows, nf))
        return _Plan(jobs, self.n_recipes, self.scale, self.position_formats, self.atan2_fast, self.pairs, self.buffers,
                     self.fused)


class _Buffers:
    """Signed-error buffers of one pass, handed out again once nothing refers to them any more (a chunk's rows
    live on in its stats, a twin list, a link and the merge's kept rows until merged): no fresh pages for every
    chunk.  At most 64 are kept per shape; they go with the pass."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: dict[tuple[int, ...], list[F64]] = {}

    def get(self, shape: tuple[int, ...]) -> F64:
        with self.lock:
            pool = self.free.setdefault(shape, [])
            for b in pool:
                if sys.getrefcount(b) <= 3:  # the list, the loop variable and the call's argument: free
                    return b
            b = np.empty(shape)
            if len(pool) < 64:
                pool.append(b)
            return b



def _block_rows(nf: int, chunk: int, engine: str) -> int:
    """Rows per block: whole chunks for one frequency (numpy sums one column pairwise) and for torch."""
    if nf <= 1 or engine != "numpy":
        return chunk
    return max(1, min(chunk, BLOCK_ELEMS // nf))


def _chunk_stats(plan: _Plan, hi: F64, lo: F64, start: int, stop: int, work: _Work,
                 block: int, keep_at: int | None = None, twin: int | None = None) -> list[_ChunkStats]:
    """Every recipe's reductions on positions start..stop-1, block by block (one oracle per block).

    Twin chunks (:func:`_chunk_pairs`): ``keep_at``, the chunk's row in its segment, keeps the chunk's signed
    errors (a reference; 0 starts a new segment) in each cache's ``twin`` list; ``twin = D`` pairs the chunk at
    distance D with the rows kept there instead of recomputing positions m - D."""
    for job in plan.jobs:
        job.ang = _Reduction()
        for cj in job.caches:
            cj.rot, cj.collisions, cj.first, cj.last, cj.wraps = _Reduction(), 0, None, None, False
            cj.pair_red, cj.pair_wraps = {}, {}
    live = [] if plan.pairs is None else [d for d in plan.pairs.carried if start < plan.pairs.until[d]]
    for cj in (c for job in plan.jobs for c in job.caches if c.signed is not None):
        cj.signed = plan.buffers.get(cj.signed.shape)  # the last chunk's rows stay with its stats (and twin)
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(start, stop, block):
            b = min(stop, a + block)
            w = work.rows(b - a)
            m = np.arange(a, b, dtype=np.float64)
            _oracle(m, hi, lo, w)
            pos = {f: round_to(m, f) for f in plan.position_formats}
            for job in plan.jobs:
                _angle_block(job, pos[job.recipe.positions], plan, w, a - start, live)
            if twin is not None:  # the block's rows still in the caches
                _twin_pairs(plan, a - twin, b - twin, a - start, w, twin)
        if plan.pairs is not None:
            _chunk_pairs(plan, hi, lo, start, stop, work, block, twin)
    if keep_at is not None:
        for cj in (c for job in plan.jobs for c in job.caches if c.signed is not None):
            if keep_at == 0:
                cj.twin = []
            cj.twin.append((start, cj.signed[: stop - start]))
    out: list[_ChunkStats | None] = [None] * plan.n_recipes
    for job in plan.jobs:
        for cj in job.caches:
            assert job.ang.max is not None and job.ang.sum is not None and cj.rot.max is not None
            assert cj.rot.sum is not None and cj.first is not None and cj.last is not None
            st = _ChunkStats(job.ang.max, job.ang.sum, cj.rot.max, cj.rot.sum, cj.collisions, cj.first, cj.last)
            if cj.signed is not None and plan.pairs is not None:
                _pair_stats(st, cj, cj.signed[: stop - start], plan.pairs.carry)
            for i in cj.members:
                out[i] = st
    return out  # type: ignore[return-value]


def _pair_stats(st: _ChunkStats, cj: _CacheJob, signed: F64, carry: int) -> None:
    """Put a cache job's pair reductions of the chunk, and its first and last ``carry`` signed rows, in ``st``."""
    st.pairs = {d: (r.max, r.sum) for d, r in cj.pair_red.items()}
    n = signed.shape[0]
    k = min(carry, n)
    st.head, st.tail = signed[:k], signed[n - k :]  # views: each chunk writes a buffer of its own


def _block_pairs(cj: _CacheJob, off: int, n: int, w: _Rows, live: Sequence[int]) -> None:
    """The pairs of a block's rows ``off..off+n-1`` of the chunk at the distances ``live`` whose earlier row is
    in the chunk too, right after the block's signed errors were written (still in the caches)."""
    assert cj.signed is not None
    for d in live:
        a = max(off, d)
        if a < off + n:
            r = off + n - a
            _pair_rows(cj.signed[a : off + n], cj.signed[a - d : off + n - d], w.k[:r], w.t[:r], cj, d, w.fused)


def _pair_rows(cur: F64, prev: F64, x: F64, t: F64, cj: _CacheJob, d: int, fuse: bool = False) -> None:
    """Fold ``|wrap(cur - prev)|`` (wrapped signed errors of positions m and m - d) into the cache job's reduction
    for distance ``d`` (:func:`.pairs.fold_pairs`; the wrap done at once for a job's blocks after one that
    needed it); in ``x`` and ``t``, scratch buffers of ``cur``'s shape.  ``fuse``: in one fused kernel
    (:func:`.fused.pair_fold`, the same bits) where the layout allows."""
    if fuse and cur.size and cur.shape[1] >= 2 and cur.flags.c_contiguous and x.flags.c_contiguous:
        mx, sm, wrapped = fused.pair_fold(cur, prev, x)
        cj.pair_wraps[d] = cj.pair_wraps.get(d, False) or wrapped
    else:
        np.subtract(cur, prev, out=x)
        mx, sm, cj.pair_wraps[d] = fold_pairs(x, t, cj.pair_wraps.get(d, False))
    cj.pair_red.setdefault(d, _Total()).add(mx, sm)


def _chunk_pairs(plan: _Plan, hi: F64, lo: F64, start: int, stop: int, work: _Work, block: int,
                 twin: int | None = None) -> None:
    """The pairs of chunk start..stop-1 at the distances above the carry: position m - D in a block recomputed
    here, only up to each distance's largest length (a chunk never straddles a length).  (Shorter distances:
    both positions in the chunk, :func:`_block_pairs`; the earlier one in another chunk, at the merge.)

    ``twin = D``: the signed errors of positions m - D are in each cache's ``twin`` list, kept from the twin
    chunks the same worker computed just before: the same values the recomputation gives, paired in the
    same blocks."""
    spec = plan.pairs
    assert spec is not None
    for d in spec.shifted:
        if start >= spec.until[d]:
            continue
        if d == twin:  # paired block by block, as each was computed (:func:`_twin_pairs`)
            continue
        for a in range(max(start, d), stop, block):
            b = min(stop, a + block)
            w = work.rows(b - a)
            m = np.arange(a - d, b - d, dtype=np.float64)
            _oracle(m, hi, lo, w)
            pos = {f: round_to(m, f) for f in plan.position_formats}
            for job in plan.jobs:
                if not any(cj.signed is not None for cj in job.caches):
                    continue
                angle = _angle_into(job.recipe, pos[job.recipe.positions], job.inv, w)
                stored = _Stored(job, angle, plan, w, pos[job.recipe.positions])
                for cj in job.caches:
                    if cj.signed is None:
                        continue
                    _, _, rot = stored.of(cj)
                    _signed_into(rot, w)  # position m - d's signed error, in w.p1 (free here)
                    _pair_rows(cj.signed[a - start : b - start], w.p1, w.k, w.t, cj, d, w.fused)


def _twin_pairs(plan: _Plan, a: int, b: int, off: int, w: _Rows, d: int) -> None:
    """Pair the block of the chunk's rows ``off..`` (positions ``a + d..b + d - 1``) at distance ``d`` with the
    signed rows of positions a..b-1 kept from its twin chunk, right after the block's signed errors were written."""
    for cj in (c for job in plan.jobs for c in job.caches if c.signed is not None):
        _pair_rows(cj.signed[off : off + b - a], _kept(cj.twin, a, b), w.k, w.t, cj, d, w.fused)


def _kept(parts: Sequence[tuple[int, F64]], a: int, b: int) -> F64:
    """The kept signed rows of positions a..b-1 (a view when one twin chunk holds them all)."""
    pieces = [rows[max(a, p) - p : min(b, p + rows.shape[0]) - p] for p, rows in parts
              if p < b and a < p + rows.shape[0]]
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _signed_into(rot: F64, w: _Rows) -> None:
    """``wrap(rot - exact)`` into ``w.p1`` (scratch ``w.p2``): no wrap needed while every value is within T."""
    np.subtract(rot, w.ex, out=w.p1)
    if not (np.max(w.p1) <= _WRAP_T and np.min(w.p1) >= -_WRAP_T):  # nan stays nan either way
        _wrap_into(w.p1, w.p2)


class _Stored:
    """The stored cos/sin of an angle job's caches on one block, and their atan2, each computed as the
    audit computes it (table, fast path, or cos/sin then the cache rounding); the trig values once."""

    def __init__(self, job: _AngleJob, angle: F64, plan: _Plan, w: _Rows, pos: F64) -> None:
        self.job, self.angle, self.plan, self.w = job, angle, plan, w
        self.trig: tuple[F64, F64] | None = None
        self.est: narrow_cache._Estimate | None = None
        self.bounded = _bounded(pos, job)
        self.small: bool | None = None
        if any(c.fast for c in job.caches):
            self.est = narrow_cache.estimate(angle, w.est, (w.s1, w.s2, w.t), self.bounded, w.fused)

    def _small(self) -> bool:
        """Every angle of the block is finite and below :data:`float32_cache.MAX_ANGLE` (checked once)."""
        if self.small is None:
            a = self.angle
            self.small = bool(a.size) and (self.bounded or (abs(float(np.max(a))) < float32_cache.MAX_ANGLE
                                                           and abs(float(np.min(a))) < float32_cache.MAX_ANGLE))
        return self.small

    def of(self, cj: _CacheJob) -> tuple[F64, F64, F64]:
        """Stored cos, sin and atan2 (in ``w.cc``, ``w.ss``, ``w.rot`` or the trig buffers)."""
        w, job = self.w, self.job
        if cj.table is not None and has_codes(cj.table.fmt, self.angle):
            return cj.table.lookup(self.angle, w)
        if cj.fast and self.est is not None:
            cc, ss = w.cc, w.ss
            narrow_cache.stored_into(self.est, job.trig, cj.cache, self.plan.scale, w.ccss, (w.s1, w.s2, w.t, w.rot),
                                     w.fused)
        elif cj.f32 and self._small():
            cc, ss = w.cc, w.ss
            float32_cache.stored_into(self.angle, job.trig, cj.cache, self.plan.scale, w.ccss, (w.s1, w.s2, w.t),
                                      w.fused)
        else:
            if self.trig is None:
                self.trig = _trig_into(self.angle, job.trig, w)
            cc = _cache_into(self.trig[0], job.trig, cj.cache, self.plan.scale, w.cc, (w.s1, w.s2))
            ss = _cache_into(self.trig[1], job.trig, cj.cache, self.plan.scale, w.ss, (w.s1, w.s2))
        rot = np.arctan2(ss, cc, out=w.rot) if cj.pairs is None else cj.pairs.lookup(cc, ss, w.rot, w)
        return cc, ss, rot


def _angle_block(job: _AngleJob, pos: F64, plan: _Plan, w: _Rows, off: int = 0, live: Sequence[int] = ()) -> None:
    """One angle job on one block (rows ``off..`` of the chunk): the angle and its errors, then each cache
    and its errors (and its pairs at the distances ``live`` within the chunk)."""
    angle = _angle_into(job.recipe, pos, job.inv, w)
    _angle_errors(angle, w, job)
    stored = _Stored(job, angle, plan, w, pos)
    for cj in job.caches:
        cc, ss, rot = stored.of(cj)
        signed = None if cj.signed is None else cj.signed[off : off + rot.shape[0]]
        has_nan = _rotation_errors(rot, w, cj.rot, cj, signed)
        _collisions(cj, cc, ss, has_nan)
        if signed is not None and live:
            _block_pairs(cj, off, rot.shape[0], w, live)


def _bounded(pos: F64, job: _AngleJob) -> bool:
    """The block's angles, ``pos * inv`` rounded to the angle and trig formats, are finite and below
    :data:`narrow_cache._MAX_ANGLE` (half of it and of the formats' largest numbers before rounding)."""
    if isinstance(job.inv, AngleMaker) or not pos.size:
        return False
    top = float(np.max(np.abs(pos))) * float(np.max(np.abs(job.inv)))
    return top < min(narrow_cache._MAX_ANGLE, job.angle_max) / 2  # nan fails


def _use_fused(w: _Rows, a: F64) -> bool:
    """Whether a block goes to the fused kernels (:mod:`.fused`): a pass that uses them (``w.fused``), two columns
    or more (one column is summed pairwise by numpy), C-contiguous."""
    return w.fused and a.ndim == 2 and a.shape[1] >= 2 and a.flags.c_contiguous


def _oracle(m: F64, hi: F64, lo: F64, w: _Rows) -> None:
    """:func:`._oracle_into`, fused where :func:`_use_fused` (the same bits)."""
    if _use_fused(w, w.p1):
        fused.oracle_into(m, hi, lo, w.p1, w.p2, w.ex)
    else:
        _oracle_into(m, hi, lo, w)


def _angle_errors(angle: F64, w: _Rows, job: _AngleJob) -> None:
    """Per frequency: max and sum of ``|wrap(angle - p1 - p2)|`` (non-finite: pi); in ``w.k``, scratch ``w.t``.

    Wrapping changes no error below pi, so it is skipped when no error needs it (and done at once for
    the blocks after one that needed it: large errors stay large)."""
    if _use_fused(w, angle) and w.p1.flags.c_contiguous:
        bmax, job.ang.sum, job.wraps = fused.angle_errors(angle, w.p1, w.p2, job.wraps, _WRAP_T, job.ang.sum)
        job.ang.max = bmax if job.ang.max is None else np.maximum(job.ang.max, bmax)
        return
    d = w.k
    np.subtract(angle, w.p1, out=d)
    np.subtract(d, w.p2, out=d)
    if not job.wraps:
        np.abs(d, out=d)
        dmax = column_max(d)
        job.wraps = not dmax.max() <= _WRAP_T  # some error needs wrapping, or is not finite
        if job.wraps:
            np.subtract(angle, w.p1, out=d)
            np.subtract(d, w.p2, out=d)
    if job.wraps:
        _wrap_into(d, w.t)
        np.abs(d, out=d)
        dmax = column_max(d)
        if not np.isfinite(dmax).all():
            d[~np.isfinite(d)] = math.pi
            dmax = column_max(d)
    job.ang.add(dmax, w.kz)


def _rotation_errors(rot: F64, w: _Rows, acc: _Reduction, job: _CacheJob | None = None,
                     signed: F64 | None = None) -> bool:
    """Per frequency: max and sum of ``|wrap(rot - exact)|`` (nan: pi); whether a nan occurred.
    In ``w.k``, scratch ``w.t``.

    ``rot`` and the exact angle lie in [-T, T] (:data:`_WRAP_T`, pi and an ulp), so ``x = rot - exact``
    lies within [-2T, 2T] and ``wrap(x) = x - 2pi * rint(x / 2pi)`` is x itself for ``|x| <= T`` and
    ``x -+ 2pi`` (exact) above: ``|wrap(x)| = |2pi - |x||``, the same bits (T is pi).  As for the angle errors, the
    wrap is skipped while no error exceeds T (and done at once for a cache job's blocks after one that
    needed it).  ``signed``: where to keep ``wrap(rot - exact)`` (within [-T, T]), or None."""
    if (_use_fused(w, rot) and w.ex.flags.c_contiguous and (signed is None or signed.flags.c_contiguous)
            and rot.shape == w.ex.shape):
        bmax, acc.sum, wrapped, has_nan = fused.rotation_errors(rot, w.ex, signed, job is None or job.wraps,
                                                                 _WRAP_T, acc.sum)
        if job is not None:
            job.wraps = wrapped
        acc.max = bmax if acc.max is None else np.maximum(acc.max, bmax)
        return has_nan
    r, t = w.k, w.t
    if signed is None:
        np.subtract(rot, w.ex, out=r)
        np.abs(r, out=r)
    else:
        np.subtract(rot, w.ex, out=signed)
        np.abs(signed, out=r)
    wraps = job is None or job.wraps
    if not wraps:
        rmax = column_max(r)
        wraps = job.wraps = not rmax.max() <= _WRAP_T  # some error needs wrapping, or is nan
    if wraps and signed is not None:  # the signed error wrapped (x -+ 2pi, exact), and its magnitude: the same bits
        _wrap_into(signed, t)
        np.abs(signed, out=r)
        rmax = column_max(r)
    elif wraps:  # 2pi - |x| is above pi (so above |x|) for |x| <= pi = T, below |x| above: the smaller one
        np.subtract(_TWO_PI, r, out=t)  # >= 0: rot and the exact angle lie in [-pi, pi], |x| <= 2 pi
        np.minimum(r, t, out=r)  # nan stays nan
        rmax = column_max(r)
    has_nan = not np.isfinite(rmax).all()  # a nan in cos/sin makes atan2 nan
    if has_nan:
        r[~np.isfinite(r)] = math.pi
        rmax = column_max(r)
    acc.add(rmax, w.kz)
    return has_nan


def _equal_rows(a: F64, b: F64, nan_equal: bool) -> Any:
    eq = a == b
    if nan_equal:
        eq |= np.isnan(a) & np.isnan(b)
    return eq


def _collisions(cj: _CacheJob, cc: F64, ss: F64, has_nan: bool) -> None:
    """Count rows of stored (cos, sin) equal to the previous row (nan equal to nan), the block's first row
    against the previous block's last; keep the chunk's first and last rows."""
    first, last = np.concatenate([cc[0], ss[0]]), np.concatenate([cc[-1], ss[-1]])
    if cj.last is not None and bool(np.all(_equal_rows(cj.last, first, True))):
        cj.collisions += 1
    if cj.first is None:
        cj.first = first
    cj.last = last
    if cc.shape[0] <= 1:
        return
    # candidates: rows whose first column equals the previous row's; then the whole rows
    cand = _equal_rows(cc[1:, 0], cc[:-1, 0], has_nan) & _equal_rows(ss[1:, 0], ss[:-1, 0], has_nan)
    idx = np.flatnonzero(cand)
    if idx.size == 0:
        return
    if 4 * idx.size > cc.shape[0]:  # many: compare every row (no gathering)
        same = _equal_rows(cc[1:], cc[:-1], has_nan)
        same &= _equal_rows(ss[1:], ss[:-1], has_nan)
    else:
        same = _equal_rows(cc[idx + 1], cc[idx], has_nan) & _equal_rows(ss[idx + 1], ss[idx], has_nan)
    cj.collisions += int(np.count_nonzero(same.all(axis=1)))


def _torch_chunk_stats(recipes: Sequence[Recipe], hi: F64, lo: F64, invs: Sequence[Any], scale: float,
                       start: int, stop: int, work: _Work, pairs: _PairSpec | None = None) -> list[_ChunkStats]:
    """The torch engine: each recipe's stages with torch's kernels on the whole chunk (one oracle)."""
    m = np.arange(start, stop, dtype=np.float64)
    w = work.rows(stop - start)
    out = []
    jobs: list[tuple[int, _CacheJob]] = []
    with np.errstate(invalid="ignore", over="ignore"):
        _oracle_into(m, hi, lo, w)
        for i, (r, inv) in enumerate(zip(recipes, invs)):
            st = torch_stages(r, inv, m, scale)
            job = _CacheJob(get_format(r.cache), r, [])
            aj = _AngleJob(r, inv, get_format(r.trig), [])
            _angle_errors(st["angle"], w, aj)
            ang = aj.ang
            if pairs is not None and i in pairs.recipes:
                job.signed = np.empty_like(w.rot)
                jobs.append((i, job))
            has_nan = _rotation_errors(np.arctan2(st["sin"], st["cos"], out=w.rot), w, job.rot, None, job.signed)
            _collisions(job, st["cos"], st["sin"], has_nan)
            out.append(_ChunkStats(ang.max, ang.sum, job.rot.max, job.rot.sum, job.collisions,  # type: ignore[arg-type]
                                   job.first, job.last))  # type: ignore[arg-type]
        if pairs is not None:
            _torch_pairs(recipes, hi, lo, invs, scale, start, stop, work, pairs, jobs)
            for i, job in jobs:
                assert job.signed is not None
                _pair_stats(out[i], job, job.signed, pairs.carry)
    return out


def _torch_pairs(recipes: Sequence[Recipe], hi: F64, lo: F64, invs: Sequence[Any], scale: float, start: int,
                 stop: int, work: _Work, spec: _PairSpec, jobs: Sequence[tuple[int, _CacheJob]]) -> None:
    """:func:`_chunk_pairs` for the torch engine (the shifted block by torch's kernels, a recipe at a time)."""
    for d in spec.carried:
        if start < spec.until[d] and stop - start > d:
            w = work.rows(stop - start - d)
            for _, job in jobs:
                assert job.signed is not None
                _pair_rows(job.signed[d:], job.signed[: stop - start - d], w.k, w.t, job, d)
    for d in spec.shifted:
        a = max(start, d)
        if start >= spec.until[d] or a >= stop:
            continue
        w = work.rows(stop - a)
        m = np.arange(a - d, stop - d, dtype=np.float64)
        _oracle_into(m, hi, lo, w)
        for i, job in jobs:
            st = torch_stages(recipes[i], invs[i], m, scale)
            _signed_into(np.arctan2(st["sin"], st["cos"], out=w.rot), w)
            assert job.signed is not None
            _pair_rows(job.signed[a - start :], w.p1, w.k, w.t, job, d)
