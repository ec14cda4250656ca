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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats import Format, get_format, round_to
from . import fastcache
from .engine import _angle_into, _cache_into, _Rows, _trig_into, _Work
from .hows import AngleMaker
from .oracle import _TWO_PI, F64, _oracle_into, _wrap_into
from .recipes import Recipe
from . import tables as _tables
from .tables import _AngleTable, _has_codes, _PairTable
from .torch_engine import torch_stages

BLOCK_ELEMS = 2**17  # angles per block of rows: its float64 arrays stay in the CPU caches, its calls few


def _wrap_threshold() -> float:
    """The largest float64 x with ``x / 2pi <= 0.5`` after rounding: ``rint(x / 2pi)`` is 0 exactly for
    ``|x| <= T`` (so :func:`wrap` leaves x unchanged), and not 0 above."""
    x = math.pi
    while x / _TWO_PI > 0.5:
        x = math.nextafter(x, 0.0)
    while math.nextafter(x, math.inf) / _TWO_PI <= 0.5:
        x = math.nextafter(x, math.inf)
    return x


_WRAP_T = _wrap_threshold()


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
class _CacheJob:
    """One stored cache of an angle job: the recipes (indices) that end in it, and how it is computed."""

    cache: Format
    recipe: Recipe  # the first of them
    members: list[int]
    table: _AngleTable | None = None
    pairs: _PairTable | None = None
    fast: bool = False
    # running reductions of the chunk in progress
    rot: _Reduction = field(default_factory=_Reduction)
    collisions: int = 0
    first: F64 | None = None
    last: F64 | None = None
    wraps: bool = False  # the last block's rotation errors needed wrapping


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


@dataclass
class _Plan:
    """The jobs of a pass: each distinct angle once, each distinct cache of an angle once."""

    jobs: list[_AngleJob]
    n_recipes: int
    scale: float
    position_formats: list[str]
    atan2_fast: bool

    @staticmethod
    def build(recipes: Sequence[Recipe], invs: Sequence[Any], scale: float, angles: int) -> "_Plan":
        """Group the recipes of a pass over ``angles`` angles (tables only for long passes)."""
        by_angle: dict[tuple[Any, ...], _AngleJob] = {}
        tables = angles >= _tables._TABLE_MIN_ELEMENTS
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
                cj.fast = cj.table is None and fastcache.eligible(job.trig, fc, scale)
                job.caches.append(cj)
            cj.members.append(i)
        return _Plan(list(by_angle.values()), len(recipes), scale,
                     list(dict.fromkeys(r.positions for r in recipes)), atan2_fast)

    def fresh(self) -> "_Plan":
        """A copy with empty running reductions (one per worker)."""
        jobs = [_AngleJob(j.recipe, j.inv, j.trig, [_CacheJob(c.cache, c.recipe, c.members, c.table, c.pairs, c.fast)
                                                    for c in j.caches]) for j in self.jobs]
        return _Plan(jobs, self.n_recipes, self.scale, self.position_formats, self.atan2_fast)


def _block_rows(nf: int, chunk: int, engine: str) -> int:
    """Rows per block: whole chunks for one frequency (numpy sums one column pairwise) and for torch."""
    if nf <= 1 or engine != "numpy":
        return chunk
    return max(1, min(chunk, BLOCK_ELEMS // nf))


def _chunk_stats(plan: _Plan, hi: F64, lo: F64, start: int, stop: int, work: _Work,
                 block: int) -> list[_ChunkStats]:
    """Every recipe's reductions on positions start..stop-1, block by block (one oracle per block)."""
    for job in plan.jobs:
        job.ang = _Reduction()
        for cj in job.caches:
            cj.rot, cj.collisions, cj.first, cj.last, cj.wraps = _Reduction(), 0, None, None, False
    with np.errstate(invalid="ignore", over="ignore"):
        for a in range(start, stop, block):
            b = min(stop, a + block)
            w = work.rows(b - a)
            m = np.arange(a, b, dtype=np.float64)
            _oracle_into(m, hi, lo, w)
            pos = {f: round_to(m, f) for f in plan.position_formats}
            for job in plan.jobs:
                _angle_block(job, pos[job.recipe.positions], plan, w)
    out: list[_ChunkStats | None] = [None] * plan.n_recipes
    for job in plan.jobs:
        for cj in job.caches:
            assert job.ang.max is not None and job.ang.sum is not None and cj.rot.max is not None
            assert cj.rot.sum is not None and cj.first is not None and cj.last is not None
            st = _ChunkStats(job.ang.max, job.ang.sum, cj.rot.max, cj.rot.sum, cj.collisions, cj.first, cj.last)
            for i in cj.members:
                out[i] = st
    return out  # type: ignore[return-value]


def _angle_block(job: _AngleJob, pos: F64, plan: _Plan, w: _Rows) -> None:
    """One angle job on one block: the angle and its errors, then each cache and its errors."""
    angle = _angle_into(job.recipe, pos, job.inv, w)
    _angle_errors(angle, w, job)
    est: fastcache._Estimate | None = None
    trig: tuple[F64, F64] | None = None
    fast = [c for c in job.caches if c.fast]
    if fast:
        est = fastcache.estimate(angle, w.est, (w.s1, w.s2, w.t), _bounded(pos, job))
    for cj in job.caches:
        rot = None
        if cj.table is not None and _has_codes(cj.table.fmt, angle):
            cc, ss, rot = cj.table.lookup(angle, w)
        elif cj.fast and est is not None:
            cc, ss = w.cc, w.ss
            fastcache.stored_into(est, job.trig, cj.cache, plan.scale, w.ccss, (w.s1, w.s2, w.t, w.rot))
        else:
            if trig is None:
                trig = _trig_into(angle, job.trig, w)
            cc = _cache_into(trig[0], job.trig, cj.cache, plan.scale, w.cc, (w.s1, w.s2))
            ss = _cache_into(trig[1], job.trig, cj.cache, plan.scale, w.ss, (w.s1, w.s2))
        if rot is None:
            rot = np.arctan2(ss, cc, out=w.rot) if cj.pairs is None else cj.pairs.lookup(cc, ss, w.rot, w)
        has_nan = _rotation_errors(rot, w, cj.rot, cj)
        _collisions(cj, cc, ss, has_nan)


def _bounded(pos: F64, job: _AngleJob) -> bool:
    """The block's angles, ``pos * inv`` rounded to the angle and trig formats, are finite and below
    :data:`fastcache._MAX_ANGLE` (half of it and of the formats' largest numbers before rounding)."""
    if isinstance(job.inv, AngleMaker) or not pos.size:
        return False
    top = float(np.max(np.abs(pos))) * float(np.max(np.abs(job.inv)))
    return top < min(fastcache._MAX_ANGLE, job.angle_max) / 2  # nan fails


def _colmax(d: F64, scratch: F64) -> F64:
    """``d.max(axis=0)`` (nan if any nan), faster: pairwise maxima of halves down to a few rows.
    ``scratch``: at least half of ``d``'s rows."""
    n = d.shape[0]
    src = d
    while n > 16:
        h = n // 2
        dst = scratch[:h]
        np.maximum(src[:h], src[h : 2 * h], out=dst)
        if n % 2:
            np.maximum(dst[0], src[n - 1], out=dst[0])
        src, n = dst, h
    return src[:n].max(axis=0)


def _angle_errors(angle: F64, w: _Rows, job: _AngleJob) -> None:
    """Per frequency: max and sum of ``|wrap(angle - p1 - p2)|`` (non-finite: pi); in ``w.k``, scratch ``w.t``.

    Wrapping changes no error below pi, so it is skipped when no error needs it (and done at once for
    the blocks after one that needed it: large errors stay large)."""
    d = w.k
    np.subtract(angle, w.p1, out=d)
    np.subtract(d, w.p2, out=d)
    if not job.wraps:
        np.abs(d, out=d)
        dmax = _colmax(d, w.t)
        job.wraps = not dmax.max() <= _WRAP_T  # some error needs wrapping, or is not finite
        if job.wraps:
            np.subtract(angle, w.p1, out=d)
            np.subtract(d, w.p2, out=d)
    if job.wraps:
        _wrap_into(d, w.t)
        np.abs(d, out=d)
        dmax = _colmax(d, w.t)
        if not np.isfinite(dmax).all():
            d[~np.isfinite(d)] = math.pi
            dmax = _colmax(d, w.t)
    job.ang.add(dmax, w.kz)


def _rotation_errors(rot: F64, w: _Rows, acc: _Reduction, job: _CacheJob | None = None) -> bool:
    """Per frequency: max and sum of ``|wrap(rot - exact)|`` (nan: pi); whether a nan occurred.
    In ``w.k``, scratch ``w.t``.

    ``rot`` and the exact angle lie in [-T, T] (:data:`_WRAP_T`, pi and an ulp), so ``x = rot - exact``
    lies within [-2T, 2T] and ``wrap(x) = x - 2pi * rint(x / 2pi)`` is x itself for ``|x| <= T`` and
    ``x -+ 2pi`` (exact) above: ``|wrap(x)| = |2pi - |x||``, the same bits (T is pi).  As for the angle errors, the
    wrap is skipped while no error exceeds T (and done at once for a cache job's blocks after one that
    needed it)."""
    r, t = w.k, w.t
    np.subtract(rot, w.ex, out=r)
    np.abs(r, out=r)
    wraps = job is None or job.wraps
    if not wraps:
        rmax = _colmax(r, t)
        wraps = job.wraps = not rmax.max() <= _WRAP_T  # some error needs wrapping, or is nan
    if wraps:  # |2pi - |x|| is above pi (so above |x|) for |x| <= pi = T, below |x| above: the smaller one
        np.subtract(_TWO_PI, r, out=t)
        np.abs(t, out=t)
        np.minimum(r, t, out=r)  # nan stays nan
        rmax = _colmax(r, t)
    has_nan = not np.isfinite(rmax).all()  # a nan in cos/sin makes atan2 nan
    if has_nan:
        r[~np.isfinite(r)] = math.pi
        rmax = _colmax(r, t)
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
                       start: int, stop: int, w: _Rows) -> list[_ChunkStats]:
    """The torch engine: each recipe's stages with torch's kernels on the whole chunk (one oracle)."""
    m = np.arange(start, stop, dtype=np.float64)
    out = []
    with np.errstate(invalid="ignore", over="ignore"):
        _oracle_into(m, hi, lo, w)
        for r, inv in zip(recipes, invs):
            st = torch_stages(r, inv, m, scale)
            job = _CacheJob(get_format(r.cache), r, [])
            aj = _AngleJob(r, inv, get_format(r.trig), [])
            _angle_errors(st["angle"], w, aj)
            ang = aj.ang
            has_nan = _rotation_errors(np.arctan2(st["sin"], st["cos"], out=w.rot), w, job.rot)
            _collisions(job, st["cos"], st["sin"], has_nan)
            out.append(_ChunkStats(ang.max, ang.sum, job.rot.max, job.rot.sum, job.collisions,  # type: ignore[arg-type]
                                   job.first, job.last))  # type: ignore[arg-type]
    return out
