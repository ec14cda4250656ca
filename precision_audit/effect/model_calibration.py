"""The verdict's calibration on a real model: per path, length and distance, the pairwise error next to what the
model loses there.

As :mod:`.calibration` does for the probe: for each path and length L the RoPE audit of the model's own schedule
gives the pairwise rotation error at each distance D (max over positions m < L), and the verdict is
:func:`precision_audit.verdicts.rope_verdict` on that distance alone.  The model is run with the path's cos/sin
where it reads that distance, its input ending at L:

* D = 1 (local order): a window of text; the measure is top-1 agreement with the exact-RoPE run, and the loss is
  how far it falls below the cache format's floor (exact cos/sin stored in the format);
* D > 1: the pass key D tokens of text back; the measure is the fraction of keys retrieved, and the loss is the
  exact run's fraction minus the path's.

A model with several schedules (layer types: Gemma 3's sliding and full layers) has each judged on the distances
its layers attend (a sliding layer: up to its window - 1, :meth:`~precision_audit.effect.real.RealModel.sees`);
a distance's row carries the worst of their verdicts.

The verdict judges the pair errors at that distance as :func:`~precision_audit.verdicts.rope_verdict` does: the
largest over every frequency pair and the largest over the pairs that resolve the distance (``resolved``).  A row
is inconsistent when the verdict says broken while the model loses at most :data:`NO_LOSS`, or safe or degraded
while it loses :data:`LOSS` or more (the probe's thresholds, :mod:`.calibration`): the words say that a degraded
path costs something measurable (the text rows' KL beside its floor) and leaves the predictions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..checks import check_int, check_lengths
from ..formats import get_format
from ..rope import PRESETS, audit, preset, stack
from ..rows import Row
from ..verdicts import rope_verdict, worst
from .calibration import LOSS, NO_LOSS
from .measures import measure_model, passkey_span
from .real import RealModel

__all__ = ["MODEL_CALIBRATION_DISTANCES", "MODEL_CALIBRATION_LENGTHS", "ModelCalibrationRow", "calibrate_model",
           "model_inconsistent"]

MODEL_CALIBRATION_LENGTHS: tuple[int, ...] = (8192, 2**20)
MODEL_CALIBRATION_DISTANCES: tuple[int, ...] = (1, 256, 2048)


@dataclass(frozen=True)
class ModelCalibrationRow(Row):
    """One (path, dtype, length, distance) on a real model: the pairwise error, what the model does, the verdict.

    ``measure``: ``top-1`` (D = 1: agreement with the exact run) or ``passkey`` (fraction of keys retrieved);
    ``value`` with the path, ``exact`` with exact RoPE (1 for top-1), ``floor`` with exact cos/sin stored in the
    cache format; ``loss``: ``floor - value`` for top-1, ``exact - value`` for pass keys.  ``pair_resolved_error``:
    the pair error in the frequency pairs that resolve the distance; ``kl`` / ``floor_kl`` (text rows, else
    None): the mean KL per token over the window's second half with the path and at the floor.
    """

    model: str
    path: str
    dtype: str
    length: int
    distance: int
    pair_max_error: float
    pair_resolved_error: float
    colliding: int
    measure: str
    value: float
    exact: float
    floor: float
    loss: float
    verdict: str
    kl: float | None = None
    floor_kl: float | None = None


def calibrate_model(rm: RealModel, paths: Sequence[str] = ("lowp", "lowp-inv-freq", "fp32"),
                    lengths: Sequence[int] = MODEL_CALIBRATION_LENGTHS,
                    distances: Sequence[int] = MODEL_CALIBRATION_DISTANCES, dtype: str = "bfloat16", *,
                    tokens: int = 512, keys: int = 2,
                    progress: Callable[[int], None] | None = None) -> list[ModelCalibrationRow]:
    """The real model's calibration table (see the module docstring).  ``tokens``: the text window for D = 1;
    ``keys``: pass keys per distance.  Distances at or beyond a length are left out there."""
    lens = check_lengths(lengths)
    dists = sorted({check_int(d, "distance", minimum=1) for d in distances})
    if not dists:
        raise ValueError("distances: none given")
    fmt = get_format(dtype).name
    names = list(dict.fromkeys(paths))
    rows = []  # each schedule's rows, on the distances its layers attend (a sliding layer: its window)
    for schedule in rm.schedules:
        seen = [d for d in dists if d < lens[-1] and rm.sees(schedule, d)]
        recipes = [preset(n, fmt) if n in PRESETS else stack(n, fmt, schedule) for n in names]
        rows += audit(schedule, recipes, lens, distances=seen) if seen else []
    span = {d: tokens if d == 1 else passkey_span(rm.tokenizer, d) for d in dists}
    measured: dict[tuple[int, int], dict[str, tuple[float, float, float, float | None, float | None]]] = {}
    for length in lens:
        for d in dists:
            if d >= length or span[d] > length:
                continue
            off = length - span[d]
            if d == 1:
                text, _ = measure_model(rm, names, [fmt], [off], tokens=tokens, gaps=[], progress=progress)
                measured[length, d] = {r.path: (r.top1, 1.0, r.floor_top1, r.kl_late, r.floor_kl_late) for r in text}
            else:
                _, pk = measure_model(rm, names, [fmt], [off], tokens=0, gaps=[d], keys=keys, progress=progress)
                measured[length, d] = {r.path: (r.correct / keys, r.exact / keys, r.floor / keys, None, None)
                                       for r in pk}
    out = []
    for r in rows:
        pairs = {p.distance: p for p in r.pair_errors}
        for d in dists:
            if d not in pairs or (r.length, d) not in measured:
                continue
            value, exact, floor, kl, floor_kl = measured[r.length, d][r.recipe]
            loss = (floor if d == 1 else exact) - value
            p = pairs[d]
            verdict = rope_verdict(r.max_rotation_error, r.colliding_positions, pair_errors=[p])
            resolved = p.max_rotation_error if p.resolved_max_rotation_error is None else p.resolved_max_rotation_error
            out.append(ModelCalibrationRow(rm.name, r.recipe, r.dtype, r.length, d, p.max_rotation_error, resolved,
                                           r.colliding_positions, "top-1" if d == 1 else "passkey", value, exact,
                                           floor, loss, verdict, kl, floor_kl))
    return _worst_per_distance(out)


def _worst_per_distance(rows: Sequence[ModelCalibrationRow]) -> list[ModelCalibrationRow]:
    """One row per (path, length, distance): with several schedules (a model's layer types), the one whose verdict
    is the worst (then the larger pairwise error), in the order the rows first name them."""
    best: dict[tuple[str, int, int], ModelCalibrationRow] = {}
    for r in rows:
        key = (r.path, r.length, r.distance)
        if key not in best or (worst([r.verdict, best[key].verdict]) != best[key].verdict
                               or (r.verdict == best[key].verdict and r.pair_max_error > best[key].pair_max_error)):
            best[key] = r
    return list(best.values())


def model_inconsistent(rows: Sequence[ModelCalibrationRow]) -> list[ModelCalibrationRow]:
    """Rows where the verdict and the real model disagree (broken, loses <= NO_LOSS; safe or degraded, loses >= LOSS).

    >>> r = ModelCalibrationRow("m", "p", "bfloat16", 8192, 1, 0.0, 0.0, 0, "top-1", 0.5, 1.0, 0.99, 0.49, "safe")
    >>> [x.loss for x in model_inconsistent([r])]
    [0.49]
    """
    return [r for r in rows if (r.verdict == "broken" and r.loss <= NO_LOSS) or (r.verdict != "broken" and r.loss >= LOSS)]
