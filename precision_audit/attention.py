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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._common import Row, check_length
from .rope import Recipe, RopeSchedule, check_rope_lengths, exact_angles, recipe_stages

__all__ = ["AttentionRow", "attention_errors", "default_distances"]

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


def attention_errors(
    schedule: RopeSchedule,
    recipes: Recipe | Iterable[Recipe],
    length: int,
    distances: Sequence[int] | None = None,
    *,
    pairs: int = 8,
    shifts: int = 1024,
    seed: int = 0,
) -> list[AttentionRow]:
    """Rotated-logit error vs offset for each recipe: one row per (recipe, distance).

    >>> from precision_audit.rope import preset
    >>> rows = attention_errors(RopeSchedule(head_dim=8), preset("fp64", "float64"), 100, [5], pairs=2)
    >>> rows[0].max_logit_error < 1e-12 and rows[0].score_spread < 1e-12
    True
    """
    recs = [recipes] if isinstance(recipes, Recipe) else list(recipes)
    if not recs:
        raise ValueError("no recipe given")
    (L,) = check_rope_lengths(length)
    dists = default_distances(L) if distances is None else sorted({int(d) for d in distances})
    for d in dists:
        if not 0 <= d < L:
            raise ValueError(f"distance {d} not in [0, length {L})")
    if pairs < 1 or shifts < 1:
        raise ValueError(f"pairs {pairs!r} and shifts {shifts!r} must be >= 1")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed {seed!r} must be a non-negative integer")
    theta = schedule.inv_freq(L)
    g = schedule.cos_sin_scale
    nf, r, d = schedule.n_freq, schedule.rotary, schedule.head_dim
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((pairs, d))
    k = rng.standard_normal((pairs, d))
    q1, q2, k1, k2 = q[:, :nf], q[:, nf:r], k[:, :nf], k[:, nf:r]
    passthrough = (q[:, r:] * k[:, r:]).sum(axis=1)  # (pairs,)
    rows: list[AttentionRow] = []
    for dist in dists:
        m = np.unique(np.linspace(dist, L - 1, num=min(shifts, L - dist)).round().astype(np.int64))
        n = m - dist
        phi = exact_angles([dist], theta)[0]  # (nf,)
        exact = (g * g) * ((q1 * k1 + q2 * k2) @ np.cos(phi) - (q2 * k1 - q1 * k2) @ np.sin(phi)) + passthrough
        for rec in recs:
            sm = recipe_stages(rec, theta, m, g)
            sn = recipe_stages(rec, theta, n, g)
            with np.errstate(invalid="ignore", over="ignore"):
                a1, a2 = _rotate(q1[:, None, :], q2[:, None, :], sm["cos"][None], sm["sin"][None])
                b1, b2 = _rotate(k1[:, None, :], k2[:, None, :], sn["cos"][None], sn["sin"][None])
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
                )
            )
    return rows
