"""RoPE auditor: computation recipes, the exact oracle, angle and rotation errors.

Rotary position embedding rotates pair ``i`` of a query/key at position ``m``
by the angle ``m * theta_i``.  A :class:`~precision_audit.rope.schedules.RopeSchedule`
gives the frequencies ``theta_i`` of every rope type.  A :class:`Recipe`
gives one number format per stage of the computation::

    positions -> inv_freq -> angle (= position * inv_freq) -> trig (cos/sin) -> cache

and says how each value is made, as real code makes it:

* ``positions``: the integer position ``m`` rounded to the format (as
  ``torch.arange(L, dtype=...)`` or ``position_ids.to(dtype)`` builds it);
* ``inv_freq``: either the schedule's formula *evaluated in* a format G (every
  operation, exponent, power, reciprocal and scaling factors, rounded to G, as
  ``1 / base ** (arange(0, d, 2) / d)`` in float32 does) and then stored in the
  stage format (``module.to(bfloat16)`` casts that buffer), or the exact value
  rounded once (``inv_freq_from="exact"``, a lower bound no real code reaches);
* ``angle``: the exact product of the two rounded operands, rounded to the
  format (one multiply, as ``torch.outer`` / a K=1 matmul does);
* ``trig``: the angle is converted to the trig format (a no-op unless that
  format is narrower) and cos/sin are evaluated exactly on that value and
  rounded to the format.  For a float32 trig stage this is the correctly
  rounded cos/sin, where real libm/SLEEF kernels may be off by one float32
  ulp; for bfloat16/float16 it is the correctly rounded result, where torch
  evaluates in float32 and rounds again (identical except near midpoints);
* ``cache``: cos/sin times the schedule's attention factor (YaRN, LongRoPE;
  1 otherwise) in the trig format, as ``emb.cos() * attention_scaling`` does,
  then cast to the stored format.

The numpy engine (:func:`recipe_stages`) rounds every operation correctly; the
torch engine (:func:`torch_stages`) runs this machine's torch kernels.  Every
error is measured against one oracle: the exact product of the integer ``m``
and the float64 ``theta_i`` (a two-term product), reduced modulo 2*pi with a
three-term 2*pi (Cody-Waite), i.e. accurate to ~1e-16 rad at 2**26.

>>> sched = RopeSchedule(head_dim=128, base=10000.0)
>>> rows = audit(sched, [preset("lowp", "bf16"), preset("fp32", "bf16")], [4096])
>>> [(r.recipe, r.max_rotation_error > 3.0) for r in rows]
[('lowp', True), ('fp32', False)]

The package's modules: :mod:`.recipes` (the vocabulary: stages, recipes,
presets), :mod:`.formulas` (the formulas stacks evaluate: inverse frequencies, angle makers), :mod:`.stacks` (the stacks'
code paths), :mod:`.oracle` (exact angles), :mod:`.engine` (the numpy engine),
:mod:`.lookup` (lookup tables for 16-bit formats), :mod:`.narrow_cache` and :mod:`.float32_cache` (stored cos/sin without a libm call per element), :mod:`.chunk_stats` (one chunk's reductions, shared stages once), :mod:`.torch_engine`,
:mod:`.pairs` (pairwise errors at distances D), :mod:`.audit` (the chunked
driver and its rows), :mod:`.schedules` (the rope types' frequencies: :mod:`.rope_types` their formulas,
:mod:`.arithmetic` the two arithmetics that evaluate them), :mod:`.attention` (errors of
the attention logits and of the rotated vectors) and :mod:`.overflow` (angles that overflow).  Every public name is
importable from ``precision_audit.rope``.
"""

from __future__ import annotations

from .schedules import RopeSchedule
from .audit import (RopeRow, audit, cache_rounding_bound, check_rope_lengths, default_workers, positions_to_scan,
                    stored_bound, stored_format)
from .engine import ENGINES, recipe_stages, run_recipe
from .oracle import MAX_ROPE_LENGTH, exact_angles, wrap
from .pairs import DEFAULT_DISTANCES, PairError, row_distances
from .recipes import (
    APPLY_MODES,
    PRESETS,
    SCALINGS,
    STAGES,
    Recipe,
    effective_recipe,
    parse_stages,
    preset,
    stored_inv_freq,
)
from .stacks import SETTINGS, STACKS, Stack, recipe, select_stacks, setting_stacks, stack
from .torch_engine import torch_stages
from .overflow import AngleOverflow, angle_overflow
from .attention import ApplyRow, AttentionRow, apply_errors, attention_errors

__all__ = [
    "AngleOverflow",
    "ApplyRow",
    "AttentionRow",
    "DEFAULT_DISTANCES",
    "PRESETS",
    "SCALINGS",
    "SETTINGS",
    "STACKS",
    "STAGES",
    "PairError",
    "Recipe",
    "Stack",
    "RopeRow",
    "RopeSchedule",
    "angle_overflow",
    "apply_errors",
    "attention_errors",
    "audit",
    "APPLY_MODES",
    "ENGINES",
    "cache_rounding_bound",
    "effective_recipe",
    "exact_angles",
    "parse_stages",
    "preset",
    "recipe",
    "recipe_stages",
    "row_distances",
    "run_recipe",
    "select_stacks",
    "setting_stacks",
    "stack",
    "stored_bound",
    "stored_format",
    "stored_inv_freq",
    "torch_stages",
    "wrap",
]
# also importable from here, as before the split: MAX_ROPE_LENGTH, check_rope_lengths, default_workers,
# positions_to_scan
