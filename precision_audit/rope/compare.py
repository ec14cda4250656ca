"""How far apart two code paths rotate: a serving stack against the stack a model was trained with.

The audit measures every path against the exact angles of the declared schedule.  A model was trained on one
stack's angles, rounding included; :func:`stack_difference` measures another path against those: the rotation
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
from dataclasses import dataclass

import numpy as np

from .._common import Row, check_lengths
from ..schedules import RopeSchedule
from .audit import stored_format
from .engine import run_recipe
from .oracle import wrap
from .recipes import Recipe

__all__ = ["StackDifference", "stack_difference"]

_CHUNK = 1 << 15


@dataclass(frozen=True)
class StackDifference(Row):
    """Recipe ``path`` against recipe ``reference`` at one length: rotation differences in rad (wrapped)."""

    path: str
    reference: str
    dtype: str
    length: int
    max_rotation_difference: float
    mean_rotation_difference: float


def stack_difference(schedule: RopeSchedule, path: Recipe, reference: Recipe, lengths: int | Iterable[int],
                     chunk: int = _CHUNK) -> list[StackDifference]:
    """Per length L: max and mean over positions 0..L-1 and frequencies of the rotation difference between the
    stored cos/sin of ``path`` and of ``reference`` (each computed for a pass of L positions, as their code
    would: dynamic / longrope frequencies follow L).  ValueError on a bad length or chunk."""
    lens = check_lengths(lengths)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk {chunk!r} must be an integer >= 1")
    out: list[StackDifference] = []
    groups: dict[int | None, list[int]] = {}
    for L in lens:  # lengths whose passes share frequencies share one pass (prefix reductions)
        groups.setdefault(schedule.frequency_key(L), []).append(L)
    for group in groups.values():
        worst, total, start = 0.0, 0.0, 0
        for L in group:
            for lo in range(start, L, chunk):
                pos = np.arange(lo, min(L, lo + chunk), dtype=np.float64)
                a, b = (run_recipe(r, schedule, pos, seq_len=group[-1]) for r in (path, reference))
                with np.errstate(invalid="ignore"):
                    d = np.abs(wrap(np.arctan2(a["sin"], a["cos"]) - np.arctan2(b["sin"], b["cos"])))
                d = np.where(np.isfinite(d), d, np.pi)  # a non-finite rotation: the phase is lost
                worst, total = max(worst, float(d.max())), total + float(d.sum())
            start = L
            out.append(StackDifference(path.name, reference.name, stored_format(path), L, worst,
                                       total / (L * schedule.n_freq)))
    return sorted(out, key=lambda r: r.length)
