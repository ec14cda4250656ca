"""Angles that overflow their format: an fp16 angle stage becomes inf at 65520 (cos/sin of inf is nan, the phase
is lost; :mod:`precision_audit.rope` counts it as error pi); where each frequency's first non-finite angle lies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_length
from ..rows import Row
from .engine import run_recipe
from .recipes import Recipe
from .schedules import RopeSchedule

__all__ = ["AngleOverflow", "angle_overflow"]



@dataclass(frozen=True)
class AngleOverflow(Row):
    """Non-finite angles of a recipe over positions 0..length-1.

    ``non_finite``: (position, frequency) angles that are inf/NaN (an fp16
    angle stage overflows at 65520; cos/sin of inf is NaN: the phase is lost,
    and :mod:`precision_audit.rope` counts it as error pi).
    ``first_overflow``: per frequency index, the first position whose angle
    is not finite, or None.
    """

    recipe: str
    length: int
    non_finite: int
    first_overflow: tuple[int | None, ...]


def angle_overflow(schedule: RopeSchedule, recipe: Recipe, length: int, *, chunk: int = 2**16) -> AngleOverflow:
    """Count the non-finite angles (cos/sin argument) a recipe makes over 0..length-1.

    >>> from precision_audit.rope import preset
    >>> o = angle_overflow(RopeSchedule(head_dim=4), preset("lowp", "fp16"), 70000)
    >>> o.first_overflow, o.non_finite
    ((65520, 65520), 8960)
    """
    L = check_length(length)
    theta = schedule.inv_freq(L)
    first: list[int | None] = [None] * theta.size
    count = 0
    for start in range(0, L, chunk):
        m = np.arange(start, min(L, start + chunk), dtype=np.float64)
        bad = ~np.isfinite(run_recipe(recipe, schedule, m, L)["angle"])
        count += int(np.count_nonzero(bad))
        for i in np.flatnonzero(bad.any(axis=0)):
            if first[i] is None:
                first[i] = int(m[np.argmax(bad[:, i])])
    return AngleOverflow(recipe=recipe.name, length=L, non_finite=count, first_overflow=tuple(first))
