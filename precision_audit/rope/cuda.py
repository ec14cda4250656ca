"""CUDA fast-math intrinsics as documented error bounds: rows labelled "bound, not bit-exact".

Code built with ``-use_fast_math`` (FlashInfer's JIT, ``flashinfer/jit/core.py``; ggml's CUDA backend,
``src/ggml-cuda/CMakeLists.txt``) runs ``powf`` as ``__powf`` and ``sinf`` / ``cosf`` / ``sincosf`` as
``__sinf`` / ``__cosf`` / ``__sincosf``: hardware approximations whose bits NVIDIA does not publish.  What is
published, in the CUDA Math API's single precision intrinsics (``group__CUDA__MATH__INTRINSIC__SINGLE``):

* ``__sinf(x)``: maximum absolute error 2^-21.41 for x in [-pi, pi], "larger otherwise";
  ``__cosf(x)``: 2^-21.19 there; ``__sincosf`` as the two;
* ``__log2f(x)``: maximum absolute error 2^-22 for x in [0.5, 2], otherwise 2 ulp;
* ``__powf(x, y)``: computed as ``exp2f(y * __log2f(x))``, its error derived from the two (``exp2f``, the
  ``ex2.approx`` instruction: 2 ulp).

The audit models these paths with correctly rounded float32 functions standing in (the rows it computes exactly)
and widens each row by what the intrinsics may add (:func:`widen`), from these bounds:

* the sine / cosine: outside [-pi, pi] the argument is first reduced by a float32 product with fl32(1/(2 pi))
  (the SASS of ``__sinf`` is an FMUL by that constant feeding MUFU.SIN; rounded to nearest or toward zero, so
  one ulp of the product bounds it), which costs ``2 pi * ulp(x / (2 pi)) + |x| * 2 pi * |fl32(1/(2 pi)) -
  1/(2 pi)|`` rad; the rest is within the documented in-range figures (:func:`sincos_bound`);
* the power: a relative error of the frequency (:func:`powf_relative_bound`), which an angle at position m
  carries m times: coherent, so a pair D apart differs by D times it.

``scripts/capture_cuda.py`` records the real intrinsics on a CUDA machine into ``tests/data/cuda_intrinsics.npz``;
the tests check these bounds against it when the file is there.

>>> bool(sincos_bound(np.array([1.0]))[0] < 1e-6), bool(sincos_bound(np.array([1e6]))[0] > 0.03)
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ..formats import spacing
from ..verdicts import resolved_error
from .schedules import RopeSchedule
from .formulas import angle_maker, llama31_smooth, rcp_pow_inputs, theta_scale
from .oracle import F64
from .pairs import PairError
from .recipes import FAST_MATH, Recipe

__all__ = ["FAST_MATH", "INV_2PI_F32", "bound_label", "frequency_bound", "powf_relative_bound", "rotation_addition",
           "sincos_bound", "widen"]

_Row = TypeVar("_Row", bound="_ErrorRow")


class _ErrorRow(Protocol):
    """The fields of a row :func:`widen` reads (a :class:`~.audit.RopeRow`)."""

    length: int
    pair_errors: tuple[PairError, ...]
    angle_error_profile: tuple[float, ...]
    rotation_error_profile: tuple[float, ...]


"""The float32 math functions ``-use_fast_math`` replaces by intrinsics that a recipe may name."""

SIN_ERROR = 2.0 ** -21.41
"""``__sinf``'s documented maximum absolute error for x in [-pi, pi] (CUDA Math API)."""
COS_ERROR = 2.0 ** -21.19
"""``__cosf``'s documented maximum absolute error for x in [-pi, pi] (CUDA Math API)."""
LOG2_NEAR_ONE = 2.0 ** -22
"""``__log2f``'s documented maximum absolute error for x in [0.5, 2]; 2 ulp elsewhere (CUDA Math API)."""
LOG2_ULPS, EXP2_ULPS = 2, 2
INV_2PI_F32 = np.float32(1 / (2 * math.pi))
"""fl32(1/(2 pi)): the constant the hardware sine's argument reduction multiplies by."""

_F32_ULP = 2.0 ** -23  # relative spacing of float32 at its coarsest (an ulp is at most this times |x|)


def sincos_bound(angles: npt.ArrayLike) -> F64:
    """Bound on the rotation error of ``(__cosf(x), __sinf(x))`` against the exact angle x, per float32 x, rad.

    In [-pi, pi]: the documented errors of the two, as an angle (``asin`` of their norm); outside, plus the
    argument reduction's error (see the module docstring).  Non-decreasing in ``|x|``.

    >>> b = sincos_bound(np.array([3.0, 4096.0, 2.0**20]))
    >>> [f"{v:.3g}" for v in b]  # in range; 2 pi 2^-14 + 4096 * 2 pi * 6.4e-9; 2 pi 2^-6 + 2^20 * 2 pi * 6.4e-9
    ['5.51e-07', '0.000549', '0.14']
    """
    x = np.abs(np.asarray(angles, dtype=np.float64))
    core = math.asin(math.hypot(SIN_ERROR, COS_ERROR))
    turns = x * float(INV_2PI_F32)
    reduction = 2 * math.pi * spacing(turns, "float32") + x * 2 * math.pi * abs(float(INV_2PI_F32) - 1 / (2 * math.pi))
    return np.where(x <= math.pi, core, core + reduction)


def powf_relative_bound(x: float, y: npt.ArrayLike) -> F64:
    """Bound on ``|__powf(x, y) / x**y - 1|`` for a float32 base ``x > 0`` and float32 exponents ``y``.

    ``__log2f(x)`` within its documented error ``e``, the float32 product ``y * log2`` within ``|y| e`` plus half
    an ulp, then ``exp2f`` within 2 ulp: ``expm1(ln 2 * (|y| e + ulp(y log2 x) / 2)) + 2 * 2^-23``.
    ``y = 0`` gives 1 exactly (``exp2(0)``).

    >>> [f"{v:.2e}" for v in powf_relative_bound(1e-4, np.array([0.0, 0.5, 63 / 64]))]  # log2: 2 ulp = 2^-19
    ['0.00e+00', '1.06e-06', '1.87e-06']
    """
    if not x > 0:
        raise ValueError(f"__powf's bound is modelled for a positive base, not {x!r}")
    yy = np.abs(np.asarray(y, dtype=np.float64))
    lg = math.log2(x)
    e = LOG2_NEAR_ONE if 0.5 <= x <= 2 else LOG2_ULPS * float(spacing(lg, "float32"))
    exponent = yy * e + spacing(yy * lg, "float32") / 2
    out = np.expm1(math.log(2) * exponent) + EXP2_ULPS * _F32_ULP
    return np.where(yy == 0, 0.0, out)


def frequency_bound(recipe: Recipe, schedule: RopeSchedule) -> F64:
    """Per frequency pair, the bound on the relative error ``__powf`` adds to the recipe's frequencies
    (zeros when the recipe does not name ``powf``)."""
    n = schedule.n_freq
    if "powf" not in recipe.fast_math:
        return np.zeros(n)
    s = recipe.runs_on(schedule)
    if recipe.angle_from == "power-product":  # ggml CUDA: powf(theta_scale, i)
        return np.asarray(powf_relative_bound(float(theta_scale(s)), np.arange(n, dtype=np.float64)))
    base, exps = rcp_pow_inputs(s)  # FlashInfer: __powf(fl32(1/base), fl32(2j/d))
    delta = np.asarray(powf_relative_bound(base, exps.astype(np.float64)))
    if s.scaling != "llama3" or s.equal_band_factors:  # equal factors: the smooth is 1 (NaN clamped), a product
        return delta
    # the llama 3.1 blend out = f ((1 - sm) / k + sm), sm = clamp(f a + b): a relative change of f moves out by
    # up to 1 + f a (1 - 1/k) / ((1 - sm) / k + sm) times it; the blend's own roundings (and the contraction
    # nvcc picks) add a few ulps, and the smooth's fma-or-not choice up to 8 ulps relative (2^-20 covers both)
    # (only inside the band: where the clamp holds the smooth at 0 or 1 the blend is a plain product)
    a, b = llama31_smooth(s)
    f = base ** exps.astype(np.float64)
    raw = f * float(a) + float(b)
    reach = 2 * f * float(a) * delta + 2.0 ** -20  # how far a perturbed smooth may move
    band = (raw > -reach) & (raw < 1 + reach)
    sm = np.clip(raw, 0.0, 1.0)
    k = s.factor
    gain = np.where(band, 1 + f * float(a) * (1 - 1 / k) / ((1 - sm) / k + sm), 1.0)
    return delta * gain * (1 + delta) + 2.0 ** -20


def _roundings(recipe: Recipe, schedule: RopeSchedule) -> int:
    """How many float32 roundings follow the power in the recipe's angle: ggml's product, ``/ freq_factor``,
    ``* freq_scale`` and YaRN's two-op mix (:class:`.formulas.AngleMaker`); FlashInfer's ``* rope_rcp_scale`` and
    product."""
    s = recipe.runs_on(schedule)
    if recipe.angle_from != "power-product":
        return 1 + (s.scaling != "default")
    m = angle_maker("power-product", s)
    return 1 + (m.freq_factors is not None) + (m.freq_scale != 1) + 2 * (m.mix is not None)


def bound_label(recipe: Recipe) -> str | None:
    """The label of a recipe's rows when fast-math intrinsics make them bounds, else None.

    >>> from precision_audit.rope import stack
    >>> bound_label(stack("flashinfer", "bf16"))
    'bound, not bit-exact: CUDA fast-math __powf, __sincosf within their documented errors'
    """
    if not recipe.fast_math:
        return None
    names = ", ".join(f"__{f}" for f in recipe.fast_math)
    return f"bound, not bit-exact: CUDA fast-math {names} within their documented errors"


def _additions(recipe: Recipe, schedule: RopeSchedule, length: int, inv: F64,
               distances: Sequence[int]) -> tuple[F64, F64, dict[int, F64]]:
    """Per frequency: what the intrinsics may add to the angle error, to the rotation error, and per distance to
    the pairwise error, over positions 0..length-1 (``inv``: the recipe's inverse frequencies, float64)."""
    delta = frequency_bound(recipe, schedule)
    top = (length - 1) * np.abs(inv)  # the largest angle of each pair
    reach = top * (1 + delta)
    # a perturbed frequency moves each float32 rounding after it (the product, then the ops on the angle) by up
    # to an ulp
    steps = _roundings(recipe, schedule) * spacing(reach, "float32") * (delta > 0)
    angle = top * delta + steps
    trig = sincos_bound(reach) if "sincosf" in recipe.fast_math else np.zeros_like(top)
    rotation = angle + trig + _F32_ULP  # the stand-in's own correct rounding of cos/sin, at most half an ulp each
    pairs = {d: d * np.abs(inv) * delta + 2 * (steps + trig + _F32_ULP) for d in distances}
    return angle, rotation, pairs


def rotation_addition(recipe: Recipe, schedule: RopeSchedule, length: int, inv: F64) -> F64:
    """Per frequency, the most the recipe's fast-math intrinsics may add to its rotation error at any position
    below ``length`` (zeros for a recipe without them); ``inv``: its frequencies."""
    if not recipe.fast_math:
        return np.zeros(np.shape(inv))
    return _additions(recipe, schedule, length, inv, ())[1]


def widen(row: _Row, recipe: Recipe, schedule: RopeSchedule, inv: F64) -> _Row:
    """A row computed with correctly rounded stand-ins, widened into a bound for a recipe that names fast-math
    intrinsics (``recipe.fast_math``); other rows unchanged.

    Each frequency's maximum errors grow by what the intrinsics may add at that frequency, each mean by the
    mean of those additions (a bound on the mean), each pairwise error by the largest addition at its
    distance; ``bound`` says so.
    """
    label = bound_label(recipe)
    if label is None:
        return row
    add_angle, add_rot, add_pairs = _additions(recipe, schedule, row.length, inv,
                                               [p.distance for p in row.pair_errors])
    ang = np.asarray(row.angle_error_profile) + add_angle
    rot = np.minimum(np.asarray(row.rotation_error_profile) + add_rot, math.pi)
    theta = np.abs(schedule.inv_freq(schedule.frequency_key(row.length)))

    def resolved(p: PairError) -> float | None:  # the resolved error grows by the most added in those pairs
        if p.resolved_max_rotation_error is None:
            return None
        add = resolved_error(add_pairs[p.distance], p.distance * theta)
        return min(p.resolved_max_rotation_error + add, p.max_rotation_error + float(add_pairs[p.distance].max()),
                   math.pi)

    pairs = tuple(PairError(p.distance, min(p.max_rotation_error + float(add_pairs[p.distance].max()), math.pi),
                            min(p.mean_rotation_error + float(add_pairs[p.distance].mean()), math.pi), resolved(p))
                  for p in row.pair_errors)
    return replace(
        row, max_angle_error=float(ang.max()), mean_angle_error=row.mean_angle_error + float(add_angle.mean()),
        max_rotation_error=float(rot.max()),
        mean_rotation_error=min(row.mean_rotation_error + float(add_rot.mean()), math.pi),
        angle_error_profile=tuple(ang.tolist()),
        mean_angle_error_profile=tuple((np.asarray(row.mean_angle_error_profile) + add_angle).tolist()),
        rotation_error_profile=tuple(rot.tolist()),
        mean_rotation_error_profile=tuple(np.minimum(np.asarray(row.mean_rotation_error_profile) + add_rot,
                                                     math.pi).tolist()),
        pair_errors=pairs, bound=label)
