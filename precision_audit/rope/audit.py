"""The RoPE audit: one chunked pass over positions per frequency group, reduced into rows.

:func:`audit` runs every recipe on positions ``0..max(lengths)-1`` in chunks
(on threads; the rows do not depend on how many), measures each chunk's angle
and rotation errors against the oracle (:mod:`.oracle`), merges them in
position order and snapshots the running reductions at every asked length:
one :class:`RopeRow` per (recipe, length).  The units of work and the ordered
merge live in :mod:`.units`.
"""

from __future__ import annotations

import math
import os
import queue
from collections.abc import Callable, Iterable, Sequence
import dataclasses
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..checks import check_callable, check_choice, check_flag, check_int, check_lengths
from ..rows import Row
from ..formats import Format, get_format, round_to, spacing
from .schedules import RopeSchedule, check_schedule
from ..verdicts import rope_verdict, rope_why
from .chunk_stats import _block_rows, _chunk_stats, _ChunkStats, _PairSpec, _Plan, _torch_chunk_stats
from .cuda import widen
from .engine import ENGINES, _Work
from .formulas import AngleMaker
from .oracle import F64, MAX_ROPE_LENGTH, _split
from .pairs import PairAcc, PairError, check_distances, pair_plan, row_distances
from .recipes import STAGES, Recipe, effective_recipe, preset, stored_inv_freq  # noqa: F401  (preset: doctests)
from .stacks import recipes_for
from .units import _Acc, _Chunk, _Links, _merge, _plan, _twin, _units

__all__ = ["RopeRow", "audit", "cache_rounding_bound", "check_rope_lengths", "default_chunk", "default_workers",
           "positions_to_scan", "recipe_frequencies", "stored_bound", "stored_format"]


def cache_rounding_bound(fmt: str | Format, scale: float = 1.0) -> float:
    """Worst rotation error (rad) from rounding an exact (s cos, s sin) pair to ``fmt``.

    ``scale`` s is the attention factor multiplied into cos/sin (YaRN,
    LongRoPE; 1 otherwise).  Each stored component lies below s in magnitude,
    so it moves by at most half the spacing ``h`` of the largest value below s
    (s = 1: half an ulp of [0.5, 1), ``2**-(p+1)``); the point moves by at most
    ``sqrt(2) h`` at radius s, its angle by at most ``asin(e / (1 - e))`` with
    ``e = sqrt(2) h / s``.  A factor just above a power of two coarsens the
    grid against the radius: bf16 with s = 1.35 allows about 2 / 1.35 times the s = 1 bound.

    >>> round(cache_rounding_bound("bfloat16"), 6)
    0.00277
    >>> round(cache_rounding_bound("bfloat16", 1.35) / cache_rounding_bound("bfloat16"), 3)  # 2/1.35 = 1.481, + O(e)
    1.483
    """
    f = get_format(fmt)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale {scale!r} must be a finite number > 0")
    h = float(spacing([math.nextafter(scale, 0.0)], f)[0]) / 2
    e = math.sqrt(2.0) * h / scale
    return math.asin(min(1.0, e / (1 - e)))


@dataclass(frozen=True)
class RopeRow(Row):
    """RoPE precision of one recipe at one context length (positions 0..length-1).

    Errors in radians, wrapped to [-pi, pi], against the exact ``m * theta_i``.
    Angle errors are of the cos/sin argument; rotation errors of
    ``atan2(stored sin, stored cos)``.  A non-finite value counts as error pi.
    ``*_profile`` lists one value per frequency index i (max over positions,
    or mean).  ``error_budget`` maps each stage to the max rotation error with
    that stage alone made exact (float64), or is None if not computed.
    ``cache_bound`` is :func:`cache_rounding_bound` of the cache format (of the
    rotation's when that is coarser: :func:`stored_format`, also ``dtype``);
    ``how`` says how each stage's value is made (:attr:`Recipe.how`) and
    ``engine`` who rounded (numpy: correctly rounded; torch: this machine).
    ``pair_errors``: the pairwise rotation errors at each audited distance D
    below ``length`` (:class:`~precision_audit.rope.PairError`, increasing D:
    the error of the rotation from position m - D to m, m in [D, length);
    see :mod:`.pairs`).  ``bound``: None for a row computed exactly; for a
    path that runs CUDA fast-math intrinsics, a label saying the errors are
    bounds from their documented accuracy (:mod:`.cuda`), not bit-exact.
    """

    recipe: str
    dtype: str
    length: int
    head_dim: int
    base: float
    rotary_dim: int
    scaling: str
    stages: dict[str, str]
    how: dict[str, str]
    engine: str
    max_angle_error: float
    mean_angle_error: float
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int
    cache_bound: float
    angle_error_profile: tuple[float, ...] = field(repr=False)
    mean_angle_error_profile: tuple[float, ...] = field(repr=False)
    rotation_error_profile: tuple[float, ...] = field(repr=False)
    mean_rotation_error_profile: tuple[float, ...] = field(repr=False)
    error_budget: dict[str, float] | None = None
    stack: str | None = None
    pair_errors: tuple[PairError, ...] = ()
    bound: str | None = None

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length {self.length!r} must be at least 1")
        if not 0 <= self.colliding_positions < self.length:
            raise ValueError(f"colliding_positions {self.colliding_positions!r} not in [0, {self.length})")
        ds = [p.distance for p in self.pair_errors if isinstance(p, PairError)]
        if len(ds) != len(self.pair_errors) or ds != sorted(set(ds)) or any(d >= self.length for d in ds):
            raise ValueError(f"pair_errors {self.pair_errors!r} must be PairError records of increasing distances "
                             f"below the length {self.length}")

    @property
    def verdict(self) -> str:
        """safe / degraded / broken by the rule of :mod:`precision_audit.verdicts` (pairwise errors, collisions)."""
        return rope_verdict(self.max_rotation_error, self.colliding_positions, pair_errors=self.pair_errors)

    @property
    def lost(self) -> str | None:
        """What the row loses, in words (:func:`precision_audit.verdicts.rope_why`), None when safe."""
        return rope_why(self.max_rotation_error, self.colliding_positions, self.pair_errors)


def _nf(inv: F64 | AngleMaker) -> int | None:
    """How many frequencies an inverse-frequency array (1-D) or an angle maker gives."""
    if isinstance(inv, AngleMaker):
        return inv.width
    return int(np.shape(inv)[0]) if np.ndim(inv) == 1 else None


def default_chunk(width: int) -> int:
    """Positions per chunk when a chunked audit is given none: about 2**19 values of ``width`` each (angles,
    table columns), at least 256 positions.

    >>> default_chunk(64), default_chunk(4096)
    (8192, 256)
    """
    return max(256, 2**19 // max(width, 1))


def default_workers() -> int:
    """Threads an audit uses by default: the CPU count, at most 4 (memory ~50 MB each).

    >>> 1 <= default_workers() <= 4
    True
    """
    return max(1, min(4, os.cpu_count() or 1))


def _pass(
    recipes: Sequence[Recipe], theta: F64, inv_freqs: Sequence[F64 | AngleMaker], lengths: Sequence[int],
    scale: float, chunk: int | None, progress: Callable[[int], None] | None = None, workers: int = 1,
    engine: str = "numpy", pairs: dict[int, Sequence[int]] | None = None, pair_recipes: Iterable[int] = (),
) -> list[list[tuple[_Acc, int]]]:
    """One pass over positions 0..max(lengths)-1; snapshots of every accumulator at each length.

    ``theta`` is the schedule's exact float64 frequencies (the oracle);
    ``inv_freqs[i]`` the inverse frequencies recipe ``i`` starts from (rounded
    to its ``inv_freq`` format here; rounding is idempotent).  Chunks run on
    ``workers`` threads (numpy releases the GIL) and are merged in position
    order, so the result does not depend on ``workers``.  Stages that recipes
    share are computed once per chunk (:mod:`.chunk`).  ``engine``: who computes the
    recipe's stages (numpy: correctly rounded; torch: this machine's kernels).  ``pairs`` maps each length
    to the pair distances its snapshot carries, for the recipes (indices) ``pair_recipes``.
    """
    nf = theta.size
    if len(inv_freqs) != len(recipes) or any(_nf(v) != nf for v in inv_freqs):
        raise ValueError(f"need one inverse-frequency array of {nf} values per recipe")
    invs = [v if isinstance(v, AngleMaker) else round_to(np.asarray(v, dtype=np.float64), r.inv_freq)
            for r, v in zip(recipes, inv_freqs)]
    hi, lo = _split(theta)
    chunk = default_chunk(nf) if chunk is None else chunk
    block = _block_rows(nf, chunk, engine)
    spec = _pair_spec(pairs, pair_recipes, chunk)
    plan = _Plan.build(recipes, invs, scale, max(lengths, default=0) * nf, spec) if engine == "numpy" else None
    steps = _plan(lengths, chunk)
    twin = _twin(steps, spec, chunk, nf, len(recipes)) if plan is not None else None
    units = _units(steps, twin)
    workers = max(1, min(int(workers), len(units)))
    spare: queue.SimpleQueue[tuple[_Work, _Plan | None]] = queue.SimpleQueue()
    for _ in range(workers):
        spare.put((_Work(block, nf, plan is not None and plan.fused), plan.fresh(nf) if plan is not None else None))

    links = _Links(spec.carried, spec.carry) if spec is not None else None

    def run(unit: Sequence[_Chunk]) -> list[list[_ChunkStats]]:
        if all(a == b for a, b, _ in unit):
            return [[] for _ in unit]
        w, p = spare.get()
        try:
            out = []
            for a, b, _ in unit:
                if a == b:
                    out.append([])
                    continue
                if p is None:
                    stats = _torch_chunk_stats(recipes, hi, lo, invs, scale, a, b, w, spec)
                elif twin is None:
                    stats = _chunk_stats(p, hi, lo, a, b, w, block)
                elif a < twin.stop:  # kept for the chunks D later
                    stats = _chunk_stats(p, hi, lo, a, b, w, block, keep_at=a - twin.first(a))
                elif twin.d <= a < twin.d + twin.stop:  # paired with the rows kept D earlier
                    stats = _chunk_stats(p, hi, lo, a, b, w, block, twin=twin.d)
                else:
                    stats = _chunk_stats(p, hi, lo, a, b, w, block)
                if links is not None:
                    links.done(a, b, stats, w.scratch())
                out.append(stats)
            return out
        finally:
            spare.put((w, p))

    accs = [_Acc(nf) for _ in recipes]
    if spec is not None:
        for i in spec.recipes:
            accs[i].pairs = PairAcc(nf, list(spec.until), spec.carry)
    return _merge(units, run, workers, accs, progress, pairs or {}, twin)


def _pair_spec(pairs: dict[int, Sequence[int]] | None, pair_recipes: Iterable[int], chunk: int) -> _PairSpec | None:
    """The distances of a pass, each up to the largest length that carries it; carried across chunks up to
    a chunk's positions, recomputed above."""
    until, carry = pair_plan(pairs or {}, chunk)
    who = frozenset(pair_recipes)
    if not until or not who:
        return None
    return _PairSpec(until, carry, chunk, who)


def check_rope_lengths(lengths: int | Iterable[int]) -> tuple[int, ...]:
    """Validated lengths the exact reference angle can serve (at most 2**26).

    >>> check_rope_lengths(2**27)
    Traceback (most recent call last):
    ...
    ValueError: length 134217728 exceeds the RoPE oracle's limit 2**26 = 67108864
    """
    lens = check_lengths(lengths)
    if lens[-1] > MAX_ROPE_LENGTH:
        raise ValueError(f"length {lens[-1]} exceeds the RoPE oracle's limit 2**26 = {MAX_ROPE_LENGTH}")
    return lens


def _frequency_groups(schedule: RopeSchedule, lens: Sequence[int]) -> list[tuple[int | None, list[int]]]:
    """Lengths grouped by the ``seq_len`` their frequencies depend on (dynamic NTK and LongRoPE
    above the pretraining context); one pass each."""
    groups: dict[int | None, list[int]] = {}
    for L in lens:
        groups.setdefault(schedule.frequency_key(L), []).append(L)
    return list(groups.items())


def positions_to_scan(schedule: RopeSchedule, lengths: int | Iterable[int]) -> int:
    """How many positions :func:`audit` scans for these lengths (one pass per frequency group).

    >>> positions_to_scan(RopeSchedule(head_dim=64), [1024, 4096])
    4096
    """
    return sum(max(ls) for _, ls in _frequency_groups(schedule, check_rope_lengths(lengths)))


def audit(
    schedule: RopeSchedule,
    recipes: str | Recipe | Iterable[str | Recipe],
    lengths: int | Iterable[int],
    dtypes: str | Format | Iterable[str | Format] | None = None,
    *,
    engine: str = "numpy",
    chunk: int | None = None,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    budget: bool = False,
    distances: int | Iterable[int] | None = None,
    frequencies: Iterable[int] | None = None,
) -> list[RopeRow]:
    """Audit recipes at context lengths: one row per (recipe, length), recipe-major.

    ``recipes``: names of presets or stacks (:func:`~.stacks.recipe`), each audited with its cache in every
    dtype of ``dtypes`` (default bfloat16; dtype-major), or :class:`Recipe` objects (they carry their dtype).

    One chunked pass over positions up to the largest length serves every
    shorter length (prefix reductions) and every recipe: the exact oracle is
    computed once per block of positions, and so is every stage value that
    recipes share (positions, angles and their errors, cos/sin, a stored
    cache and its errors), so stacks that differ from a preset only in the
    apply stage cost nothing extra.  Recipes may end in different cache
    dtypes: cos/sin are
    evaluated once for all of them, and the rows are those of one call per
    dtype, to the bit.  ``chunk``: positions per chunk (default: about 2**19
    angles, at least 256 positions); memory stays near ``chunk`` x frequencies
    float64 per array.  ``dynamic`` scaling changes the frequencies with the length,
    so lengths above ``original_max_position_embeddings`` get a pass each.
    ``budget=True`` adds the error budget (five more recipe runs per recipe).
    ``progress`` is called after each chunk with the number of positions it
    held (:func:`positions_to_scan` gives the total).  Chunks of positions run
    on ``workers`` threads (default :func:`default_workers`); the rows are the
    same to the bit for any number of workers.  ``engine="torch"``
    runs every stage (inv_freq formula included) with this machine's torch
    kernels instead of correctly rounded operations.

    Each row carries ``pair_errors`` (:mod:`.pairs`): the rotation error between
    positions D apart, at each distance D of ``distances`` below its length;
    by default 1, 16, 256, 4096 and L/2, each capped at L - 1 (an empty tuple:
    none, and no cost).  Distances up to a chunk's positions are paired across
    chunks at the merge; a longer one recomputes the block of positions
    ``m - D`` (about one more pass over the positions in [D, L)).  A distance at or
    above every length raises ValueError.

    ``frequencies``: audit only these frequency indices (an M-RoPE section, :mod:`.axes`): every figure,
    collisions and pair errors included, is over them alone (each frequency's values are computed on their
    own, so a subset's are those of the full audit); the profiles keep one entry per frequency, 0 outside.

    >>> row = audit(RopeSchedule(head_dim=64), preset("fp32", "bf16"), 2048)[0]
    >>> fp32_angle = 2047 * 2.0**-23 * (1 + 2.0**-24)  # theta rounding + product half-ulp, theta <= 1
    >>> row.max_rotation_error <= fp32_angle + row.cache_bound + cache_rounding_bound("fp32")
    True
    >>> [(p.distance, p.max_rotation_error <= 2 * row.max_rotation_error) for p in row.pair_errors]
    [(1, True), (16, True), (256, True), (1024, True), (2047, True)]
    """
    check_schedule(schedule)
    recs = recipes_for(recipes, dtypes, schedule)
    budget = check_flag(budget, "budget")
    chunk = None if chunk is None else check_int(chunk, "chunk", minimum=1, maximum=MAX_ROPE_LENGTH)
    check_callable(progress, "progress")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers {workers!r} must be a positive integer")
    lens = check_rope_lengths(lengths)
    subset = _check_frequencies(frequencies, schedule.n_freq)
    asked = check_distances(distances, lens)
    pairs = {L: row_distances(L, asked) for L in lens}
    check_choice(engine, "engine", ENGINES)
    variants: list[Recipe] = []
    caches: list[str] = []  # the cache dtype of the recipe each variant belongs to
    for r in recs:
        variants.append(r)
        if budget:
            variants.extend(r.with_exact(s) for s in STAGES)
        caches += [r.cache] * (len(variants) - len(caches))
    n_workers = default_workers() if workers is None else workers
    stride = 1 + (len(STAGES) if budget else 0)
    results = _scan(schedule, variants, caches, lens, chunk, progress, engine, n_workers, pairs,
                    {i * stride for i in range(len(recs))}, subset)
    rows: list[RopeRow] = []
    for i, r in enumerate(recs):
        for L in lens:
            bud = None
            if budget:
                bud = {s: float(results[(i * stride + 1 + j, L)].rot_max.max()) for j, s in enumerate(STAGES)}
            rows.append(_row(r, schedule, L, results[(i * stride, L)], engine, bud,
                             None if subset is None else int(subset.sum())))
    return rows


def _check_frequencies(frequencies: Iterable[int] | None, nf: int) -> npt.NDArray[np.bool_] | None:
    """A mask of the asked frequency indices (None: all); ValueError for an index outside 0..nf-1 or none."""
    if frequencies is None:
        return None
    items = list(frequencies) if isinstance(frequencies, Iterable) else [frequencies]
    mask = np.zeros(nf, dtype=bool)
    for i in items:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < nf:
            raise ValueError(f"frequency index {i!r} must be an integer in [0, {nf})")
        mask[int(i)] = True
    if not mask.any():
        raise ValueError("frequencies is empty: give at least one frequency index")
    return mask


def _scan(schedule: RopeSchedule, variants: Sequence[Recipe], dtypes: Sequence[str], lens: Sequence[int],
          chunk: int | None, progress: Callable[[int], None] | None, engine: str, workers: int,
          pairs: dict[int, Sequence[int]] | None = None, pair_variants: Iterable[int] = (),
          subset: npt.NDArray[np.bool_] | None = None) -> dict[tuple[int, int], _Acc]:
    """Each variant's accumulator at each length, keyed (variant index, length): a pass per frequency group
    (and per set of computed frequencies, chosen per cache dtype ``dtypes[i]`` of the variant's recipe:
    see :func:`_active`); the variants ``pair_variants`` with the pair distances ``pairs[L]``."""
    want = set(pair_variants)
    scale = schedule.cos_sin_scale
    results: dict[tuple[int, int], _Acc] = {}
    for key, ls in _frequency_groups(schedule, lens):
        runs = [effective_recipe(v, schedule, key) for v in variants]
        invs = [stored_inv_freq(v, schedule, key, engine) for v in variants]
        theta = schedule.inv_freq(key)
        passes: dict[bytes, list[int]] = {}
        for dtype in dict.fromkeys(dtypes):
            members = [i for i, d in enumerate(dtypes) if d == dtype]
            active = _active(theta, [invs[i] for i in members])
            if subset is not None:
                active = active & subset
            passes.setdefault(active.tobytes(), []).extend(members)
        for n, (mask, members) in enumerate(passes.items()):
            active = np.frombuffer(mask, dtype=bool)
            parts = [invs[i] if active.all() else _subset(invs[i], active) for i in members]
            # progress counts the positions of the first pass only (positions_to_scan: one per group)
            snaps = _pass([runs[i] for i in members], theta[active], parts, ls, scale, chunk,
                          progress if n == 0 else None, workers, engine, {L: (pairs or {}).get(L, ()) for L in ls},
                          [j for j, i in enumerate(members) if i in want])
            for i, per_len in zip(members, snaps):
                for acc, L in per_len:
                    results[(i, L)] = acc if active.all() else acc.padded(active)
    return results


def _subset(inv: F64 | AngleMaker, active: npt.NDArray[np.bool_]) -> F64 | AngleMaker:
    """The frequencies ``active`` of an inverse-frequency array, or an angle maker writing those pairs only."""
    if isinstance(inv, AngleMaker):
        return dataclasses.replace(inv, columns=tuple(int(i) for i in np.flatnonzero(active)))
    return inv[active]


def _active(theta: F64, invs: Sequence[F64 | AngleMaker]) -> npt.NDArray[np.bool_]:
    """The frequencies a pass computes for the recipes of one cache dtype: all but those with theta = 0
    (proportional RoPE's non-rotating tail) when every recipe's inverse frequencies are 0 exactly there.

    Such a pair has angle 0 and cos/sin (1, 0) in every format and recipe: error 0, and it never tells
    two rows apart.  (The choice is made per cache dtype, so that a call with several dtypes gives the
    rows of one call per dtype.)
    """
    active = theta != 0
    if not active.any() or not all(not isinstance(inv, AngleMaker) and np.array_equal(inv != 0, active)
                                   for inv in invs):
        return np.ones_like(active)
    return active


def stored_format(r: Recipe) -> str:
    """The format a recipe's rotated q/k end in: the coarser of the cache and the rotation (``apply``) formats.

    A float32 cache (SGLang, TensorRT-LLM) rotating bfloat16 q/k still ends in bfloat16: its row is a
    bfloat16 row, and bfloat16's rounding is the floor of its error.

    >>> from precision_audit.rope import stack
    >>> stored_format(stack("sglang", "bf16")), stored_format(stack("vllm", "fp16"))
    ('bfloat16', 'float16')
    """
    return max((r.cache, r.apply), key=lambda f: cache_rounding_bound(f))


def stored_bound(r: Recipe, scale: float = 1.0) -> float:
    """:func:`cache_rounding_bound` of :func:`stored_format`: the rounding every row of the recipe carries.

    >>> from precision_audit.rope import stack
    >>> stored_bound(stack("sglang", "bf16")) == cache_rounding_bound("bfloat16")
    True
    """
    return cache_rounding_bound(stored_format(r), scale)


def _row(r: Recipe, schedule: RopeSchedule, L: int, acc: _Acc, engine: str,
         budget: dict[str, float] | None, n_subset: int | None = None) -> RopeRow:
    """The row of recipe ``r`` at length ``L`` from its accumulator over positions 0..L-1 (means over the
    ``n_subset`` frequencies audited, when a subset was)."""
    nf = schedule.n_freq if n_subset is None else n_subset
    theta = np.abs(schedule.inv_freq(schedule.frequency_key(L)))  # the reference: what the model was trained with
    row = RopeRow(
        recipe=r.name,
        dtype=stored_format(r),
        length=L,
        head_dim=schedule.head_dim,
        base=schedule.base,
        rotary_dim=schedule.rotary,
        scaling=schedule.scaling,
        stages=r.stages,
        how=r.how,
        engine=engine,
        max_angle_error=float(acc.ang_max.max()),
        mean_angle_error=float(acc.ang_sum.sum() / (L * nf)),
        max_rotation_error=float(acc.rot_max.max()),
        mean_rotation_error=float(acc.rot_sum.sum() / (L * nf)),
        colliding_positions=acc.collisions,
        cache_bound=stored_bound(r, schedule.cos_sin_scale),
        angle_error_profile=tuple(acc.ang_max.tolist()),
        mean_angle_error_profile=tuple((acc.ang_sum / L).tolist()),
        rotation_error_profile=tuple(acc.rot_max.tolist()),
        mean_rotation_error_profile=tuple((acc.rot_sum / L).tolist()),
        error_budget=budget,
        stack=r.stack,
        pair_errors=tuple(PairError.of(d, mx, float(sm.sum() / ((L - d) * nf)), d * theta)
                          for d, (mx, sm) in sorted(acc.pair_snap.items())),
    )
    return widen(row, r, schedule, recipe_frequencies(r, schedule, L)) if r.fast_math else row


def recipe_frequencies(r: Recipe, schedule: RopeSchedule, length: int) -> F64:
    """The frequencies (rad per position) recipe ``r`` rotates pair i by in a pass of ``length`` positions: its
    inverse frequencies, or for a recipe that makes its angles otherwise (:class:`AngleMaker`) its float32
    angles at position 1.

    >>> from precision_audit.rope import stack
    >>> recipe_frequencies(stack("llama.cpp-cuda", "bf16"), RopeSchedule(head_dim=4), 8).tolist()
    [1.0, 0.009999999776482582]
    """
    inv = stored_inv_freq(r, schedule, length)
    if isinstance(inv, AngleMaker):
        out = np.empty((1, schedule.n_freq))
        inv.angles_into(np.ones(1), out)
        return out[0]
    return np.asarray(inv, dtype=np.float64)
