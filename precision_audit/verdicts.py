"""THE decision rule: safe / degraded / broken for every component, and the thresholds it rests on.

RoPE is judged on what attention sees: the rotation *between* two positions (the pairwise errors of
:mod:`precision_audit.rope.pairs`), not the absolute angle, which exact RoPE's shift invariance makes
irrelevant.  The words say what a model loses, and two witnesses calibrate them (docs/effect.md shows both
tables): the project's probe (:mod:`precision_audit.effect`, `precision-audit effect --calibration`), which reads
exact distances from every frequency pair by construction, and a real pretrained model (SmolLM2-135M,
`precision-audit effect --calibration --model smollm2`, :mod:`precision_audit.effect.model_calibration`), which
reads mostly by content:

* **broken**: a real model loses its predictions.  Neighbouring positions share a rotation (colliding cos/sin
  rows: local order is lost; bfloat16 position ids leave the probe 26-57 % of its local-order accuracy from 1K on
  and SmolLM2 a third or less of its next-token predictions and no pass key), or a frequency pair that *resolves*
  a distance (turns at most :data:`RESOLVING_TURNS` times across it) is a quarter turn (:data:`PHASE_LOST`) or
  more off there: an error as large as the rotation itself, as float16 angles or float32 angles beyond 2**24 give
  (SmolLM2 with float32 angles at offset 16M: 36 points of top-1 agreement lost);
* **degraded**: the cost is measurable above the noise floor and the predictions stay.  Some pairwise rotation
  error is :data:`NOTICED` (pi/8) or more in any pair: where the probe starts to lose exact distances (1.26 rad
  1K apart: 25 points; it lost nothing at 0.63 to 0.75 rad 512 apart nor at 0.25 rad of float32 rounding at 4M),
  and a real model's KL rises above the floor.  A downcast ``inv_freq`` scales each frequency by ``1 + r``,
  ``|r| <= 2**-8``: the same small relative error in every pair at every distance, so its errors of radians fall
  only on fast pairs, hundreds of turns across the distance, which the probe reads (it loses half its accuracy
  4K apart) and SmolLM2 does not (every pass key 4K back, its text within a point of the floor);
* **safe** otherwise, whatever the absolute angle error (a float32 model is not "degraded" because its angle at
  position 1M is 0.06 rad from the exact one: attention never sees it).

The calibration tables (:func:`precision_audit.effect.calibration.calibrate`,
:func:`precision_audit.effect.model_calibration.calibrate_model`) reproduce these figures; their tests check that
no distance is called broken where the witness loses nothing and none safe where it loses (nor, on the real
model, degraded where it loses its predictions).

Without pairwise errors (a caller that skipped them) the absolute error stands in, doubled: a pair's error is
at most the sum of its two positions' errors (the triangle inequality), so the verdict can only be stricter; a
pair error without its resolved part counts every pair as resolving (stricter too).

ALiBi, position ids, relative buckets and sinusoids keep their own rules here too.

>>> rope_verdict(0.06, 0, pair_errors=[(1, 0.07), (4096, 0.07)])  # float32 angles at 1M
'safe'
>>> rope_verdict(3.14, 0, pair_errors=[(1, 0.005, 0.005), (256, 0.32, 0.06), (4096, 2.62, 0.06)])  # a downcast inv_freq
'degraded'
>>> rope_verdict(3.14, 0, pair_errors=[(1, 2.0, 2.0)])  # float16 angles at 8K: 2 rad between neighbours
'broken'
>>> rope_why(3.14, 0, pair_errors=[(1, 0.005), (256, 0.5)])
'positions 256 apart off by up to 0.5 rad'
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .formats import spacing

__all__ = [
    "DEFAULT_TOLERANCE",
    "NOTICED",
    "PHASE_LOST",
    "RESOLVING_TURNS",
    "RULES",
    "SCAN_VERDICTS",
    "VERDICTS",
    "VERDICT_RULES",
    "alibi_verdict",
    "damage_limit",
    "human_length",
    "positions_verdict",
    "resolved_error",
    "resolving",
    "rope_verdict",
    "rope_why",
    "rules_markdown",
    "rules_text",
    "scan_verdict",
    "sinusoid_verdict",
    "worst",
]

VERDICTS: tuple[str, ...] = ("safe", "degraded", "broken")
PHASE_LOST = math.pi / 2
"""A relative rotation a quarter turn off: the two positions' order along that frequency is gone."""
NOTICED = math.pi / 8
"""The smallest pairwise rotation error the verdict calls degraded (calibrated on the probe, see above)."""
RESOLVING_TURNS = 4
"""A frequency pair resolves a distance D when it turns at most this many times across it (``D * theta <= 2 pi *
RESOLVING_TURNS``): its rotation still tells D from D +- 1 without counting hundreds of wraps.  An error of
:data:`PHASE_LOST` there is at least 1/16 of the rotation itself; a frequency scaled by ``1 + r`` (a bfloat16
``inv_freq``, ``|r| <= 2**-8``) is off by at most ``2**-8 * 8 pi = 0.098`` rad in those pairs at any distance."""
DEFAULT_TOLERANCE = 8.0
"""ALiBi: degraded when a head's bias error exceeds this many half-ulps of its largest bias."""

def _pi(x: float) -> str:
    """A threshold that is pi over a whole number, written as such: pi/8."""
    return f"pi/{round(math.pi / x)}"


RULES: dict[str, str] = {
    "broken": ("neighbouring positions share a rotation (colliding cos/sin rows or position ids), or a frequency pair "
               f"that resolves a distance (turns at most {RESOLVING_TURNS} times across it) is {_pi(PHASE_LOST)} or "
               "more off there: an error as large as the rotation itself, where the probe and SmolLM2 both lose "
               "their predictions; ALiBi: neighbouring keys share a bias, a bias overflowed or two swapped order"),
    "degraded": (f"a pairwise rotation error >= {_pi(NOTICED)} in any pair: the probe starts to lose exact distances "
                 "and a real model's KL rises above the floor, its predictions kept (a downcast inv_freq: fast pairs, "
                 "hundreds of turns across the distance, off by radians); ALiBi: a head's bias error above TOLERANCE "
                 "half-ulps of its largest bias"),
    "safe": "otherwise, whatever the absolute angle error: it is shown, never judged (attention sees only differences)",
}
"""THE statement of each verdict's rule: every page, ``--help`` and footer that states a rule prints this text
(:func:`rules_text`, :func:`rules_markdown`); ``TOLERANCE`` stands for the ALiBi tolerance in use."""

RULES_SOURCE = "precision_audit.verdicts; calibrated on the probe model and SmolLM2-135M, docs/effect.md"


def rules_text(tolerance: float = DEFAULT_TOLERANCE) -> str:
    """The verdict rules in one paragraph, as the CLI's footers and ``--help`` print them.

    >>> print(rules_text())  # doctest: +ELLIPSIS
    Verdict per row (precision_audit.verdicts; ...): broken = ...; degraded = a pairwise rotation error >= pi/8 in any pair: ...
    """
    t = f"{tolerance:g}"
    return (f"Verdict per row ({RULES_SOURCE}): "
            + "; ".join(f"{v} = {RULES[v].replace('TOLERANCE', t)}" for v in reversed(VERDICTS)) + ".")


def rules_markdown(tolerance: float = DEFAULT_TOLERANCE) -> str:
    """The verdict rules as a markdown table (README, docs/), one row per verdict, worst first.

    >>> print(rules_markdown().splitlines()[3])  # doctest: +ELLIPSIS
    | `degraded` | a pairwise rotation error >= pi/8 in any pair: the probe starts to lose exact distances ... ALiBi: ...
    """
    t = f"{tolerance:g}"
    return "| verdict | rule |\n| --- | --- |\n" + "".join(
        f"| `{v}` | {RULES[v].replace('TOLERANCE', t)} |\n" for v in reversed(VERDICTS))


VERDICT_RULES = "; ".join(f"**{v}**: {RULES[v].replace('TOLERANCE', f'{DEFAULT_TOLERANCE:g}')}"
                          for v in reversed(VERDICTS)) + "."
"""The rules as one markdown paragraph (the report's Verdict section)."""


def human_length(n: int) -> str:
    """Tokens as the CLI writes them: 512K, 1M, 8192 -> 8K; other values as they are.

    >>> [human_length(n) for n in (4096, 131072, 2**20, 3 * 2**20, 1000)]
    ['4K', '128K', '1M', '3M', '1000']
    """
    for unit, size in (("M", 2**20), ("K", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def resolving(rotation: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Which frequency pairs resolve a distance, from each pair's exact rotation across it (rad, ``D * theta_i``
    for 1-D RoPE): those that turn at most :data:`RESOLVING_TURNS` times.

    >>> resolving([1.0, 4096 * 0.1, 4096 * 0.001]).tolist()  # 1 rad; 65 turns; 0.65 turns
    [True, False, True]
    """
    return np.abs(np.asarray(rotation, dtype=np.float64)) <= 2 * math.pi * RESOLVING_TURNS


def resolved_error(column_max: npt.ArrayLike, rotation: npt.ArrayLike) -> float:
    """The largest pair error at one distance among the frequency pairs that resolve it (:func:`resolving`);
    ``column_max``: per frequency pair, the max error over positions; ``rotation``: each pair's exact rotation
    across the distance.  0.0 where no pair resolves it.

    >>> resolved_error([0.001, 3.0, 0.01], [1.0, 409.6, 4.096])  # the fast pair turns 65 times: not judged
    0.01
    """
    col = np.asarray(column_max, dtype=np.float64)
    mask = resolving(rotation)
    if col.shape != mask.shape:
        raise ValueError(f"column_max has {col.size} pairs, rotation {mask.size}")
    return float(col[mask].max()) if mask.any() else 0.0


def _pairs(pair_errors: Iterable[Any]) -> list[tuple[int, float, float]]:
    """(distance, max rotation error, max over the pairs that resolve it) from PairError records, mappings or
    (distance, error[, resolved]) tuples; the resolved error is the max where it was not measured."""
    out = []
    for p in pair_errors:
        if isinstance(p, tuple):
            d, e = int(p[0]), float(p[1])
            r = p[2] if len(p) > 2 else None
        elif isinstance(p, dict):
            d, e, r = int(p["distance"]), float(p["max_rotation_error"]), p.get("resolved_max_rotation_error")
        else:
            d, e = int(p.distance), float(p.max_rotation_error)
            r = getattr(p, "resolved_max_rotation_error", None)
        out.append((d, e, e if r is None else float(r)))
    return out


def _finite(e: float) -> float:
    return e if math.isfinite(e) else math.pi


def _judged(max_rotation_error: float, pair_errors: Iterable[Any]) -> list[tuple[int | None, float, float]]:
    pairs = _pairs(pair_errors)
    if pairs:
        return [(d, _finite(e), _finite(r)) for d, e, r in pairs]
    e = min(math.pi, 2 * _finite(max_rotation_error))  # no pairs measured: the triangle bound, in every pair
    return [(None, e, e)]


def rope_verdict(max_rotation_error: float, colliding: int, *, pair_errors: Iterable[Any] = ()) -> str:
    """safe / degraded / broken of a RoPE row (see the module docstring).

    The absolute error against the cache format's rounding is shown, not judged: it takes no cache bound.
    A pair error is ``(distance, max error, max error over the pairs that resolve the distance)`` (or a
    :class:`~precision_audit.rope.pairs.PairError`); without the third, every pair counts as resolving.

    >>> rope_verdict(0.002, 0), rope_verdict(0.3, 0), rope_verdict(0.003, 5)  # no pairs: 2 x absolute
    ('safe', 'degraded', 'broken')
    >>> rope_verdict(3.1, 0, pair_errors=[(4096, 2.6, 0.02)])  # a downcast inv_freq: only fast pairs lose phase
    'degraded'
    """
    if colliding > 0:
        return "broken"
    judged = _judged(max_rotation_error, pair_errors)
    if max(r for _, _, r in judged) >= PHASE_LOST:
        return "broken"
    return "degraded" if max(e for _, e, _ in judged) >= NOTICED else "safe"


def rope_why(max_rotation_error: float, colliding: int, pair_errors: Iterable[Any] = ()) -> str | None:
    """What a RoPE row loses, in words (None when it is safe).

    >>> print(rope_why(0.01, 1023))
    local order lost: 1023 positions share the previous one's rotation
    >>> rope_why(3.1, 0, [(1, 0.005), (4096, 2.6)])
    'positions 4K apart: phase lost (2.6 rad)'
    >>> rope_why(3.1, 0, [(1, 0.005, 0.005), (4096, 2.6, 0.021)])
    'positions 4K apart off by up to 2.6 rad, 0.021 rad in the pairs that resolve them'
    """
    if colliding > 0:
        return f"local order lost: {colliding} positions share the previous one's rotation"
    judged = _judged(max_rotation_error, pair_errors)

    def where(d: int | None) -> str:
        return "positions" if d is None else "neighbouring positions" if d == 1 else f"positions {human_length(d)} apart"

    # the shortest distance where it happens, its largest error there (without pairs the one entry has distance
    # None and nothing to compare)
    lost = [(d, r) for d, _, r in judged if r >= PHASE_LOST]
    if lost:
        d, r = min(lost, key=lambda t: (t[0] or 0, -t[1]))
        return f"{where(d)}: phase lost ({r:.3g} rad)"
    bad = [(d, e, r) for d, e, r in judged if e >= NOTICED]
    if not bad:
        return None
    d, e, r = min(bad, key=lambda t: (t[0] or 0, -t[1]))
    text = f"{where(d)} off by up to {e:.3g} rad"
    return text + (f", {r:.2g} rad in the pairs that resolve them" if r < NOTICED else "")


def positions_verdict(colliding: int, non_finite: int) -> str:
    """Position ids are exact (``safe``) or collide/overflow (``broken``); nothing in between.

    >>> positions_verdict(0, 0), positions_verdict(7296, 0)
    ('safe', 'broken')
    """
    return "broken" if colliding or non_finite else "safe"


def alibi_verdict(row: Any, tolerance: float = DEFAULT_TOLERANCE) -> str:
    """Verdict of an :class:`~precision_audit.alibi.AlibiRow` row.

    ``broken``: neighbouring keys share a bias in some head, a bias overflowed
    or two swapped order; ``degraded``: some head's largest bias error exceeds
    ``tolerance`` half-ulps of the bias format at that head's largest exact
    bias ``slope * (length - 1)``; ``safe`` otherwise.

    >>> from precision_audit.alibi import audit_alibi
    >>> [alibi_verdict(audit_alibi(8, r, 4096, "bf16")[0]) for r in ("cast-output", "fp32")]
    ['broken', 'safe']
    """
    if row.min_distinct_biases < row.length or row.nonfinite_biases or row.order_inversions:
        return "broken"
    top = np.array([h.slope * (row.length - 1) for h in row.heads])
    half_ulp = spacing(top, row.bias_dtype) / 2
    errs = np.array([h.max_abs_error for h in row.heads])
    return "degraded" if bool((errs > tolerance * half_ulp).any()) else "safe"


def sinusoid_verdict(duplicate_rows: int, nn_shrink: float) -> str:
    """A relative sinusoid table's verdict: ``broken`` when distances share a stored row, ``degraded`` when the
    nearest neighbour of some row moved more than half-way towards it, ``safe`` otherwise.

    >>> sinusoid_verdict(0, 0.0007), sinusoid_verdict(0, 0.6), sinusoid_verdict(384, 1.0)
    ('safe', 'degraded', 'broken')
    """
    return "broken" if duplicate_rows else "degraded" if nn_shrink > 0.5 else "safe"


SCAN_VERDICTS: tuple[str, ...] = ("safe", "damaged by the cast", "damaged as built")
"""The scan's question (``hf-scan``): does a transformers rotary class compute what the float32 fix computes?"""


def damage_limit(fp32_error: float, length: int, frequency_ulp: float) -> float:
    """The largest max rotation error of correct rotary code: ``2 R + (L - 1) u``.

    ``R`` is the fp32 preset's max rotation error at length L (float32 until cos/sin, then the cache format:
    the fix), ``u`` the largest float32 ulp of the frequencies.  Real code differs from that correctly rounded
    model only by faithful kernels: a float32 ``pow`` an ulp off moves an angle by at most ``(L - 1) u``, a
    faithful cos/sin by an ulp of the cache format, well inside ``R``; every damaged code path measured lies
    far above (a bfloat16 ``inv_freq`` moves the angles of 8K positions by radians).

    >>> damage_limit(0.003, 8192, 2.0**-24)  # 2 * 0.003 + 8191 * 2**-24
    0.006488221645355225
    """
    return 2 * fp32_error + (length - 1) * frequency_ulp


def scan_verdict(built_error: float, cast_error: float, limit: float) -> str:
    """A scanned class's verdict from the max rotation errors as built and after ``.to(dtype)`` against
    :func:`damage_limit` (a nan error counts as damage).

    >>> scan_verdict(0.003, 0.004, 0.0065), scan_verdict(0.003, 2.6, 0.0065), scan_verdict(0.01, 0.01, 0.0065)
    ('safe', 'damaged by the cast', 'damaged as built')
    """
    if not built_error <= limit:
        return "damaged as built"
    return "damaged by the cast" if not cast_error <= limit else "safe"


def worst(verdicts: Sequence[str]) -> str:
    """The worst of some verdicts.

    >>> worst(["safe", "broken", "degraded"])
    'broken'
    """
    for v in verdicts:
        if v not in VERDICTS:
            raise ValueError(f"verdict {v!r} must be one of {', '.join(VERDICTS)}")
    return max(verdicts, key=VERDICTS.index, default="safe")
