"""The verdict's calibration: per code path, length and distance, the pairwise error next to what the probe loses.

For each path (a preset in a dtype) and length L, the RoPE audit of the probe's own schedule gives the pairwise
rotation error at each distance D (max over positions m < L); the probe is run with that path's cos/sin with its
sequences ending at L, on the task that reads that distance (local order for D = 1, the gap task at G = D
otherwise), next to exact RoPE at the same positions.  The verdict is the one
:func:`precision_audit.verdicts.rope_verdict` gives that distance alone.  Consistency means: no distance called
broken where the probe loses nothing, none called safe where it loses measurably (:func:`inconsistent`).  The
probe reads exact distances from every frequency pair by construction, so it also loses where only fast pairs
(many turns across the distance) are off: those distances are degraded (a real model keeps its predictions
there: :mod:`.model_calibration`).

>>> rows = calibrate(["lowp-inv-freq"], [8192], [256, 4096], sequences=32)
>>> [(r.distance, r.verdict, r.drop > 0.2) for r in rows]
[(256, 'safe', False), (4096, 'degraded', True)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..checks import check_lengths
from ..rows import Row
from ..rope import audit
from ..verdicts import rope_verdict
from .evaluate import SCHEDULE, evaluate, path_recipe
from .tasks import GAPS

__all__ = ["CALIBRATION_DISTANCES", "CALIBRATION_LENGTHS", "CALIBRATION_PATHS", "LOSS", "NO_LOSS",
           "CalibrationRow", "calibrate", "inconsistent"]

CALIBRATION_PATHS: tuple[str, ...] = ("lowp", "lowp-inv-freq", "fp32", "fp64")
CALIBRATION_LENGTHS: tuple[int, ...] = (1024, 8192, 65536, 2**20, 2**22)
CALIBRATION_DISTANCES: tuple[int, ...] = (1, 16, 256, 512, 1024, 2048, 4096)
NO_LOSS = 0.02
"""A drop (exact minus path accuracy) at most this large is 'loses nothing': the scatter of a few sequences."""
LOSS = 0.05
"""A drop at least this large is 'loses measurably'."""


@dataclass(frozen=True)
class CalibrationRow(Row):
    """One (path, dtype, length, distance): the pairwise error, the probe's accuracy there, the verdict."""

    path: str
    dtype: str
    length: int
    distance: int
    pair_max_error: float
    pair_resolved_error: float
    colliding: int
    task: str
    accuracy: float
    exact_accuracy: float
    verdict: str

    @property
    def drop(self) -> float:
        """What the probe loses against exact RoPE at the same positions."""
        return self.exact_accuracy - self.accuracy


def calibrate(paths: Iterable[str] = CALIBRATION_PATHS, lengths: Iterable[int] = CALIBRATION_LENGTHS,
              distances: Iterable[int] = CALIBRATION_DISTANCES, dtype: str = "bfloat16", *, sequences: int = 128,
              progress: Callable[[int], None] | None = None) -> list[CalibrationRow]:
    """The calibration table (see the module docstring); distances at or beyond a length are left out there, and
    every distance must be one the probe reads (1 or a trained gap).  ValueError on bad input."""
    names = list(paths)
    lens = check_lengths(lengths)
    dists = sorted(set(int(d) for d in distances))
    bad = [d for d in dists if d != 1 and d not in GAPS]
    if bad or not dists:
        raise ValueError(f"distance {bad[0] if bad else None!r} is not one the probe reads; valid: 1, "
                         f"{', '.join(map(str, GAPS))}")
    recipes = [path_recipe(n, dtype) for n in names]
    rows = audit(SCHEDULE, recipes, lens, distances=[d for d in dists if d < lens[-1]])
    out = []
    for r in rows:
        pairs = {p.distance: p for p in r.pair_errors}
        for d in dists:
            if d not in pairs:
                continue
            task, gap = ("local", None) if d == 1 else ("gap", d)
            span = 64 if d == 1 else int(1.6 * d) + 64  # the gap task's sequences span about 1.5 G
            e = evaluate(r.recipe, dtype, offset=max(0, r.length - span), gap=gap, task=task, sequences=sequences)
            p = pairs[d]
            out.append(CalibrationRow(r.recipe, r.dtype, r.length, d, p.max_rotation_error,
                                      p.max_rotation_error if p.resolved_max_rotation_error is None
                                      else p.resolved_max_rotation_error, r.colliding_positions, task, e.accuracy, e.exact_accuracy,
                                      rope_verdict(r.max_rotation_error, r.colliding_positions,
                                                   pair_errors=[pairs[d]])))
            if progress is not None:
                progress(1)
    return out


def inconsistent(rows: Sequence[CalibrationRow]) -> list[CalibrationRow]:
    """Rows where the verdict and the probe disagree: broken while the probe loses at most :data:`NO_LOSS`, or
    safe while it loses :data:`LOSS` or more.

    >>> inconsistent([CalibrationRow("p", "bfloat16", 8192, 16, 0.01, 0.01, 0, "gap", 0.5, 1.0, "safe")])[0].drop
    0.5
    """
    return [r for r in rows if (r.verdict == "broken" and r.drop <= NO_LOSS) or (r.verdict == "safe" and r.drop >= LOSS)]
