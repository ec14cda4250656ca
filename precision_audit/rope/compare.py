"""How far apart two code paths rotate: a serving stack against the stack a model was trained with.

The audit measures every path against the exact angles of the declared schedule.  A model was trained on one
stack's angles, rounding included; :func:`stack_difference` measures other paths against those: the rotation
the serving path's stored cos/sin apply at position m against the training path's, ``|wrap(phi_a(m) - phi_b(m))|``
with ``phi = atan2(sin, cos)`` of each stored pair, max and mean over positions 0..L-1 and frequencies.

>>> from precision_audit.rope import RopeSchedule, stack
>>> s = RopeSchedule(head_dim=64, base=10000.0)
>>> rows = stack_difference(s, stack("vllm", "bf16", s), stack("transformers", "bf16", s), [4096])
>>> rows[0].max_rotation_difference  # vLLM stores what transformers stores: the same cos/sin
0.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from ..checks import check_lengths, check_recipes
from ..rows import Row
from .schedules import RopeSchedule
from .audit import _frequency_groups, recipe_frequencies, stored_format
from .cuda import bound_label, rotation_addition
from .engine import run_recipe
from .oracle import wrap
from .recipes import Recipe

__all__ = ["StackDifference", "stack_difference"]

_CHUNK = 1 << 15


@dataclass(frozen=True)
class StackDifference(Row):
    """Recipe ``path`` against recipe ``reference`` at one length: rotation differences in rad (wrapped);
    ``bound``: set when a side runs CUDA fast-math intrinsics and the figures are upper bounds (:mod:`.cuda`)."""

    path: str
    reference: str
    dtype: str
    length: int
    max_rotation_difference: float
    mean_rotation_difference: float
    bound: str | None = None


def stack_difference(schedule: RopeSchedule, paths: Recipe | Iterable[Recipe], reference: Recipe,
                     lengths: int | Iterable[int], chunk: int = _CHUNK) -> list[StackDifference]:
    """Per path (one recipe or several) and length L: max and mean over positions 0..L-1 and frequencies of the
    rotation difference between the stored cos/sin of the path and of ``reference`` (each computed for a pass
    of L positions, as their code would: dynamic / longrope frequencies follow L); rows path-major, lengths
    increasing.  The reference is computed once for all paths.  ValueError on a bad length or chunk."""
    recs = check_recipes(paths, Recipe, name="paths", hint="build one with stack(name, dtype, schedule)")
    lens = check_lengths(lengths)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk {chunk!r} must be an integer >= 1")
    found: dict[tuple[int, int], tuple[float, float]] = {}
    for _, group in _frequency_groups(schedule, lens):  # lengths sharing frequencies share one pass
        worst, total, start = np.zeros(len(recs)), np.zeros(len(recs)), 0
        for L in group:
            for lo in range(start, L, chunk):
                pos = np.arange(lo, min(L, lo + chunk), dtype=np.float64)
                ref = run_recipe(reference, schedule, pos, seq_len=group[-1])
                with np.errstate(invalid="ignore"):
                    phi = np.arctan2(ref["sin"], ref["cos"])
                    for i, r in enumerate(recs):
                        a = run_recipe(r, schedule, pos, seq_len=group[-1])
                        d = np.abs(wrap(np.arctan2(a["sin"], a["cos"]) - phi))
                        d = np.where(np.isfinite(d), d, np.pi)  # a non-finite rotation: the phase is lost
                        worst[i], total[i] = max(worst[i], float(d.max())), total[i] + float(d.sum())
            start = L
            for i in range(len(recs)):
                found[i, L] = float(worst[i]), float(total[i]) / (L * schedule.n_freq)
    return [_widened(StackDifference(r.name, reference.name, stored_format(r), L, *found[i, L]), r, reference,
                     schedule) for i, r in enumerate(recs) for L in lens]


def _widened(row: StackDifference, path: Recipe, reference: Recipe, schedule: RopeSchedule) -> StackDifference:
    """A difference computed with correctly rounded stand-ins for fast-math intrinsics, widened into a bound by
    what they may add per frequency on either side (:mod:`.cuda`); other rows unchanged."""
    labels = [lb for lb in (bound_label(path), bound_label(reference)) if lb]
    if not labels:
        return row
    add = sum(rotation_addition(r, schedule, row.length, recipe_frequencies(r, schedule, row.length))
              for r in (path, reference) if r.fast_math)
    return replace(row, max_rotation_difference=min(row.max_rotation_difference + float(np.max(add)), np.pi),
                   mean_rotation_difference=min(row.mean_rotation_difference + float(np.mean(add)), np.pi),
                   bound=labels[0])
