"""Downstream effect of a RoPE recipe on attention logits.

For seeded standard-normal query/key vectors q, k (head_dim d) the rotated
logit is ``q_m . k_n`` with q rotated by the stored cos/sin row of position m
and k by that of position n (transformers' half-split layout: pair i is dims
``i`` and ``i + rotary_dim/2``; dims past ``rotary_dim`` pass through).  The
exact logit depends on the offset ``m - n`` only::

    sum_i g**2 * ((q1 k1 + q2 k2) cos(dtheta_i) - (q2 k1 - q1 k2) sin(dtheta_i))

with ``dtheta_i`` the exact wrapped angle ``(m - n) * theta_i`` and ``g`` the
schedule's cos/sin scale.  Dot products are taken in float64, so the measured
error is the position encoding's alone (not the matmul's).

>>> from precision_audit.rope import RopeSchedule, preset
>>> rows = attention_errors(RopeSchedule(head_dim=64), [preset("lowp", "bf16"), preset("fp32", "bf16")], 4096, [1024])
>>> [(r.recipe, r.max_logit_error > 1.0) for r in rows]
[('lowp', True), ('fp32', False)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..checks import ArgumentTypeError, check_choice, check_int, check_length, check_recipes, describe
from ..rows import Row
from ..formats import get_format, round_to
from .audit import check_rope_lengths
from .engine import run_recipe
from .oracle import exact_angles
from .recipes import APPLY_MODES, Recipe
from .schedules import RopeSchedule
from .schedules import check_schedule

__all__ = [
    "APPLY_MODES",
    "ApplyRow",
    "AttentionRow",
    "apply_errors",
    "apply_rotation",
    "attention_errors",
    "default_distances",
]

PHASE_LOST_ERROR = 2.0  # |e^(i*pi) - 1|: relative error of a vector rotated by pi off (a non-finite rotation)

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class AttentionRow(Row):
    """Logit error of one recipe at one offset ``distance = m - n``.

    Query positions m are ``shifts`` evenly spaced integers in
    [distance, length - 1] (key n = m - distance).  ``max_logit_error`` /
    ``mean_logit_error``: |recipe logit - exact logit| over pairs and shifts;
    ``score_spread``: for each (q, k) pair the max - min of the recipe's logit
    over the shifts (exact RoPE gives 0: the relative-position invariance
    check), max over pairs; ``logit_rms``: RMS of the exact logits, for scale.
    ``apply`` / ``mode``: the format and mode q and k were stored and rotated
    in (see :func:`apply_rotation`); ``float64`` leaves the cache's error alone.
    ``stack``: the stack whose code path the recipe is (None for a preset or
    a custom recipe).
    """

    recipe: str
    dtype: str
    length: int
    head_dim: int
    distance: int
    shifts: int
    pairs: int
    max_logit_error: float
    mean_logit_error: float
    score_spread: float
    logit_rms: float
    apply: str | None = None
    mode: str | None = None
    stack: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.distance < self.length:
            raise ValueError(f"distance {self.distance!r} not in [0, length {self.length})")
        if self.shifts < 1 or self.pairs < 1:
            raise ValueError(f"shifts {self.shifts!r} and pairs {self.pairs!r} must be >= 1")


def default_distances(length: int) -> list[int]:
    """0, 1, 2, 4, ... powers of two below ``length``, and ``length - 1``.

    >>> default_distances(10)
    [0, 1, 2, 4, 8, 9]
    """
    n = check_length(length)
    out = [0] + [2**k for k in range(n.bit_length()) if 2**k < n]
    return sorted(set(out + [n - 1]))


def _rotate(x1: F64, x2: F64, c: F64, s: F64) -> tuple[F64, F64]:
    return x1 * c - x2 * s, x2 * c + x1 * s


def _check_mode(mode: str) -> str:
    return check_choice(mode, "apply mode", APPLY_MODES)


def _check_distances(distances: Iterable[int] | None, length: int) -> list[int]:
    """The distinct distances, sorted: integers in [0, length - 1] (default :func:`default_distances`)."""
    if distances is None:
        return default_distances(length)
    if isinstance(distances, (str, bytes, dict)) or not isinstance(distances, Iterable):
        raise ArgumentTypeError(f"distances {describe(distances)} must be an iterable of integers")
    dists = sorted({check_int(d, "distance") for d in distances})
    for d in dists:
        if not 0 <= d < length:
            raise ValueError(f"distance {d} not in [0, length {length})")
    return dists


def apply_rotation(
    x1: npt.ArrayLike, x2: npt.ArrayLike, cos: npt.ArrayLike, sin: npt.ArrayLike,
    apply_format: str, mode: str = "elementwise",
) -> tuple[F64, F64]:
    """Rotate stored pairs ``(x1, x2)`` by stored ``(cos, sin)`` as model code runs it.

    ``q * cos + rotate_half(q) * sin`` on the half-split layout is
    ``(x1 cos - x2 sin, x2 cos + x1 sin)``.  ``x1, x2`` are first rounded to
    ``apply_format`` (q/k are stored in it).  ``mode``:

    * ``"elementwise"``: cos/sin are cast to ``apply_format`` (``cos.to(q.dtype)``)
      and each product and the sum are rounded to it, as a bf16/fp16 model runs
      the formula in eager mode (no fused multiply-add);
    * ``"fp32-then-cast"``: cos/sin in float32, each operation rounded to
      float32, the result cast to ``apply_format`` once (``q.float()`` ...
      ``.to(q.dtype)``; MLX's ``fast.rope`` kernel, flash-attn's fp32 rotary);
    * ``"fused"``: as ``"elementwise"``, but the product with ``x1`` is fused
      into the sum, rounded once: ``(x1 cos - r(x2 sin), r(x2 cos) + x1 sin)``.
      This is what triton compiles ``x1*cos - x2*sin`` and
      ``x2*cos + x1*sin`` on bf16/fp16 tiles into (LLVM's multiply-add
      contraction): liger's and unsloth's rotary kernels, recorded bit for
      bit on an H200 (``tests/data/cuda_kernels.npz``).

    Products of two float32 values are exact in float64, so every rounding
    here is the correctly rounded one; a fused sum is rounded to odd in
    float64 first, which makes its one rounding exact too.

    >>> x1 = c = 1 + 2 ** -7  # x1 * c = 1 + 2**-6 + 2**-14, which bfloat16 rounds to 1 + 2**-6
    >>> [apply_rotation([x1], [1.0], [c], [3 * 2 ** -8], "bfloat16", mode=m)[0].tolist() for m in ("elementwise", "fused")]
    [[1.0], [1.0078125]]

    >>> y1, y2 = apply_rotation([1.0], [0.0], [0.5], [0.75], "float16")
    >>> y1.tolist(), y2.tolist()
    ([0.5], [0.75])
    >>> apply_rotation([1.0], [0.0], [0.5], [0.75], "float16", mode="fp64")
    Traceback (most recent call last):
    ...
    ValueError: unknown apply mode 'fp64'; valid: elementwise, fp32-then-cast, fused
    """
    _check_mode(mode)
    fmt = get_format(apply_format).name
    work = "float32" if mode == "fp32-then-cast" else fmt

    def r(v: npt.ArrayLike, f: str = work) -> F64:
        return round_to(np.asarray(v, dtype=np.float64), f)

    with np.errstate(invalid="ignore", over="ignore"):
        a1, a2 = r(r(x1, fmt)), r(r(x2, fmt))
        c, s = r(cos), r(sin)
        if mode == "fused":
            return r(_odd_sum(a1 * c, -r(a2 * s))), r(_odd_sum(r(a2 * c), a1 * s))
        y1 = r(r(a1 * c) - r(a2 * s))
        y2 = r(r(a2 * c) + r(a1 * s))
        return r(y1, fmt), r(y2, fmt)


def _odd_sum(a: F64, b: F64) -> F64:
    """``a + b`` rounded to odd in float64 (Knuth's TwoSum gives the error):
    rounding that to nearest in a format of at most 51 significant bits
    (float32 and narrower) gives the correctly rounded sum (Boldo and
    Melquiond, "When double rounding is odd", 2005)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    even = (s.view(np.int64) & 1) == 0
    nudge = np.isfinite(s) & (err != 0) & even
    return np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)


def attention_errors(
    schedule: RopeSchedule,
    recipes: Recipe | Iterable[Recipe],
    length: int,
    distances: Sequence[int] | None = None,
    *,
    pairs: int = 8,
    shifts: int = 1024,
    seed: int = 0,
    apply: str | None = None,
    mode: str | None = None,
) -> list[AttentionRow]:
    """Rotated-logit error vs offset for each recipe: one row per (recipe, distance).

    q and k are stored in each recipe's ``apply`` format (default: its cache
    format) and rotated by :func:`apply_rotation` in its ``apply_mode``, as a
    model in that dtype runs it; the exact logit uses the same stored q and
    k, so the error is the position encoding's and the rotation's.  ``apply``
    / ``mode`` override every recipe's; ``apply="float64"`` leaves the cache's
    own effect alone.  Each recipe's cos/sin come from :func:`~precision_audit.rope.run_recipe`, so a stack's
    recipe (:func:`~precision_audit.rope.stack`) rotates by that stack's own angles (ggml's repeated products,
    MLX's frequencies, ...) in its own apply mode.

    >>> from precision_audit.rope import preset
    >>> rows = attention_errors(RopeSchedule(head_dim=8), preset("fp64", "float64"), 100, [5], pairs=2)
    >>> rows[0].max_logit_error < 1e-12 and rows[0].score_spread < 1e-12
    True
    """
    check_schedule(schedule)
    recs = check_recipes(recipes, Recipe, hint="build one with preset(name, dtype) or parse_stages(text, dtype)")
    (L,) = check_rope_lengths(check_length(length))
    dists = _check_distances(distances, L)
    pairs = check_int(pairs, "pairs", minimum=1, maximum=2**16)
    shifts = check_int(shifts, "shifts", minimum=1, maximum=2**16)
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed {seed!r} must be a non-negative integer")
    if mode is not None:
        _check_mode(mode)
    apply = None if apply is None else get_format(apply).name
    theta = schedule.inv_freq(L)
    g = schedule.cos_sin_scale
    nf, d = schedule.n_freq, schedule.head_dim
    r = 2 * nf  # rotated dims in the half-split layout (proportional: the whole head, tail frequencies 0)
    rng = np.random.default_rng(seed)
    q0 = rng.standard_normal((pairs, d))
    k0 = rng.standard_normal((pairs, d))
    stored: dict[str, tuple[F64, ...]] = {}  # q/k as stored in each apply format, split for the rotation

    def split(fmt: str) -> tuple[F64, ...]:
        if fmt not in stored:
            q, k = round_to(q0, fmt), round_to(k0, fmt)
            stored[fmt] = (q[:, :nf], q[:, nf:r], k[:, :nf], k[:, nf:r], (q[:, r:] * k[:, r:]).sum(axis=1))
        return stored[fmt]

    rows: list[AttentionRow] = []
    for dist in dists:
        m = np.unique(np.linspace(dist, L - 1, num=min(shifts, L - dist)).round().astype(np.int64))
        n = m - dist
        phi = exact_angles([dist], theta)[0]  # (nf,)
        for rec in recs:
            fmt, md = apply or rec.apply, mode or rec.apply_mode
            q1, q2, k1, k2, passthrough = split(fmt)  # type: ignore[arg-type]
            exact = (g * g) * ((q1 * k1 + q2 * k2) @ np.cos(phi) - (q2 * k1 - q1 * k2) @ np.sin(phi)) + passthrough
            sm = run_recipe(rec, schedule, m, L)
            sn = run_recipe(rec, schedule, n, L)
            with np.errstate(invalid="ignore", over="ignore"):
                a1, a2 = apply_rotation(q1[:, None, :], q2[:, None, :], sm["cos"][None], sm["sin"][None], fmt, md)
                b1, b2 = apply_rotation(k1[:, None, :], k2[:, None, :], sn["cos"][None], sn["sin"][None], fmt, md)
                score = (a1 * b1 + a2 * b2).sum(axis=2) + passthrough[:, None]  # (pairs, shifts)
                err = np.abs(score - exact[:, None])
                spread = score.max(axis=1) - score.min(axis=1)
            err[~np.isfinite(err)] = np.inf
            spread[~np.isfinite(spread)] = np.inf
            rows.append(
                AttentionRow(
                    recipe=rec.name,
                    dtype=rec.cache,
                    length=L,
                    head_dim=d,
                    distance=dist,
                    shifts=int(m.size),
                    pairs=pairs,
                    max_logit_error=float(err.max()),
                    mean_logit_error=float(err.mean()),
                    score_spread=float(spread.max()),
                    logit_rms=float(np.sqrt(np.mean(exact**2))),
                    apply=fmt,
                    mode=md,
                    stack=rec.stack,
                )
            )
    return rows


@dataclass(frozen=True)
class ApplyRow(Row):
    """Error of the rotation applied to q in a format, for one band of positions.

    Positions m are ``samples`` evenly spaced integers in [band_start,
    band_stop - 1) and each one's successor m + 1.  ``max_rel_error`` /
    ``mean_rel_error``: ``|rotated q - exact rotation of the same stored q| /
    |stored q|`` (rotated dims, 2-norm) over vectors and positions; a
    non-finite rotation counts as phase lost, error 2 (``|e^(i pi) - 1|``).
    ``non_finite``: rotated vectors with a non-finite component.
    ``identical_neighbours``: (vector, m) whose rotated vector equals the one
    at m + 1 in every component; ``identical_components``: share of rotated
    components equal at m and m + 1 (a component changes by about
    ``|pair| * theta_i`` per token, so slow frequencies repeat at any m).
    ``unit_roundoff`` is the apply format's ``2**-p`` for scale.
    """

    recipe: str
    cache: str
    apply: str
    mode: str
    head_dim: int
    rotary_dim: int
    band_start: int
    band_stop: int
    samples: int
    vectors: int
    max_rel_error: float
    mean_rel_error: float
    non_finite: int
    identical_neighbours: int
    identical_components: float
    unit_roundoff: float

    def __post_init__(self) -> None:
        if not 0 <= self.band_start < self.band_stop:
            raise ValueError(f"band [{self.band_start}, {self.band_stop}) is empty")


def _bands(lens: Sequence[int]) -> list[tuple[int, int]]:
    out, lo = [], 0
    for L in lens:
        out.append((lo, L))
        lo = L
    return out


def apply_errors(
    schedule: RopeSchedule,
    recipe: Recipe,
    lengths: int | Iterable[int],
    apply_format: str,
    mode: str = "elementwise",
    *,
    vectors: int = 8,
    samples: int = 512,
    seed: int = 0,
) -> list[ApplyRow]:
    """Relative error of ``q * cos + rotate_half(q) * sin`` run in a format, per position band.

    Bands are [0, L1), [L1, L2), ... for the sorted ``lengths``.  ``vectors``
    seeded standard-normal q (rounded to ``apply_format``: the stored q) are
    rotated by the recipe's stored cos/sin with :func:`apply_rotation` and
    compared with their exact rotation (float64 cos/sin of the exact angle,
    times the schedule's cos/sin scale).

    >>> from precision_audit.rope import preset
    >>> rows = apply_errors(RopeSchedule(head_dim=64), preset("fp32", "fp32"), [1024], "bf16")
    >>> rows[0].max_rel_error < 8 * rows[0].unit_roundoff
    True
    """
    _check_mode(mode)
    fmt = get_format(apply_format)
    lens = check_rope_lengths(lengths)
    if vectors < 1 or samples < 1:
        raise ValueError(f"vectors {vectors!r} and samples {samples!r} must be >= 1")
    g = schedule.cos_sin_scale
    nf = schedule.n_freq
    r = 2 * nf
    q = round_to(np.random.default_rng(seed).standard_normal((vectors, r)), fmt.name)
    q1, q2 = q[:, None, :nf], q[:, None, nf:]
    norm = np.sqrt((q * q).sum(axis=1))[:, None]  # (vectors, 1)
    rows: list[ApplyRow] = []
    for lo, hi in _bands(lens):
        m = np.unique(np.linspace(lo, max(lo, hi - 2), num=min(samples, max(1, hi - 1 - lo))).round().astype(np.int64))
        pos = np.concatenate([m, m + 1])
        theta = schedule.inv_freq(hi)
        st = run_recipe(recipe, schedule, pos, hi)
        y1, y2 = apply_rotation(q1, q2, st["cos"][None], st["sin"][None], fmt.name, mode)
        phi = exact_angles(pos, theta)
        e1, e2 = _rotate(q1, q2, g * np.cos(phi)[None], g * np.sin(phi)[None])
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.sqrt(((y1 - e1) ** 2 + (y2 - e2) ** 2).sum(axis=2)) / norm  # (vectors, 2n)
        bad = ~np.isfinite(err)
        err[bad] = PHASE_LOST_ERROR
        n = m.size
        y = np.concatenate([y1, y2], axis=2)  # (vectors, 2n, r)
        same = y[:, :n] == y[:, n:]
        rows.append(
            ApplyRow(
                recipe=recipe.name,
                cache=recipe.cache,
                apply=fmt.name,
                mode=mode,
                head_dim=schedule.head_dim,
                rotary_dim=r,
                band_start=lo,
                band_stop=hi,
                samples=int(n),
                vectors=vectors,
                max_rel_error=float(err.max()),
                mean_rel_error=float(err.mean()),
                non_finite=int(np.count_nonzero(bad)),
                identical_neighbours=int(np.count_nonzero(same.all(axis=2))),
                identical_components=float(same.mean()),
                unit_roundoff=math.ldexp(1.0, -fmt.significand_bits),
            )
        )
    return rows
