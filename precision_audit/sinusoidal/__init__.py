"""Absolute sinusoidal position encodings in low precision.

The encoding of Vaswani et al. (2017), section 3.5::

    PE(pos, 2i)   = sin(pos * w_i)        w_i = base ** (-2i / d),  base = 10000
    PE(pos, 2i+1) = cos(pos * w_i)        i = 0 .. d/2 - 1

is built by a *recipe*: five stages, each rounding exactly once into its own
format, like the real code path::

    positions   u_p  = round(p, F_pos)                  position_ids.to(dtype)
    frequencies v_i  = round(w_i, F_freq)               div_term / inv_freq buffer
    angles      a_pi = round(u_p * v_i, F_ang)          position * div_term
    trig        t    = round(sin(a_pi), F_trig)         torch.sin in the angle dtype
    table       s    = round(t, F_table)                the stored buffer / .to(dtype)

(``w_i`` is the float64 value of ``base ** (-2i/d)``; the product ``u_p * v_i``
is formed exactly in float64 whenever the significand bits of the position and
frequency formats sum to at most 53, true of every preset; sin and cos are
evaluated in float64 on the rounded angle, then rounded.)  A stage left as
``None`` uses the target dtype.  The presets:

=================  ==================================================================
``lowp``           every stage in the target dtype: ``torch.arange(L, dtype=dtype)``
                   times a ``div_term`` / ``inv_freq`` buffer that ``model.to(dtype)``
                   cast, ``sin``/``cos`` in that dtype (e.g. on-the-fly encodings)
``lowp-positions`` positions in the target dtype, the rest in float32, table cast
                   (isolates the position-id rounding)
``fp32``           the fix: positions, frequencies, angles, sin/cos in float32, only
                   the finished table cast to the target dtype (the Annotated
                   Transformer / HF ``pe`` buffer after ``model.half()``)
``fp64``           the floor: the exact encoding rounded once into the target dtype
=================  ==================================================================

Metrics per (recipe, dtype, length), see :class:`SinusoidalRow`, all measured
against the float64 oracle :func:`exact_table` (checked against mpmath in the
tests).  They stay tractable at long contexts: duplicate rows are found
exactly by hashing every row (O(L d)) and verifying each hash collision
element by element; the exact encoding is translation invariant
(|PE(p)-PE(q)| and PE(p).PE(q) depend on q-p only: :func:`exact_distances`,
:func:`decay_exact`), and a stored row is within its error e(p) of the exact
one, so only lags whose exact distance is small can hold a nearest neighbour
(see ``nn_certified``); the decay curve (:func:`decay_curve`) is compared
over lags 0 .. ``max_lag``.  They do not depend on the
column layout (interleaved as in the paper / Annotated Transformer / HF, or
sin-half then cos-half as in fairseq / tensor2tensor), which only permutes
columns; :func:`encoding_table` offers both.  (fairseq and tensor2tensor also
use another schedule, w_i = 10000 ** (-i / (d/2 - 1)), not modelled here.  The
Annotated Transformer's float32 ``exp(arange(0, d, 2) * -(log(10000) / d))``
is up to 7 float32 ulps off the correctly rounded w_i at d = 512; the fp32
preset uses correctly rounded w_i; spot checks (d = 512, L = 8K .. 1M) move its
table error by under 1 %, since the float32 angle rounding dominates.)

>>> rows = audit_sinusoidal(64, ["lowp", "fp32"], [512], ["bfloat16"])
>>> [(r.recipe, r.duplicate_rows, r.distinct_rows) for r in rows]
[('lowp', 191, 385), ('fp32', 0, 512)]

(bf16 positions: 257 -> 256, 259 and 261 -> 260, ..., 509 -> 508: 2 + 63 * 3 = 191
positions share a row; 0..256, the 127 even values 258..510 and 512 stay distinct.)
"""

# recipes: stages, presets, w_i;  tables: whole stored and exact tables;  audit: the streaming auditor and its rows;
# duplicates: exact duplicate rows;  neighbours: nearest stored neighbours.  The limits MAX_* stay importable here.
from .audit import MAX_LAG, MAX_SINUSOIDAL_LENGTH, SinusoidalRow, audit_sinusoidal
from .recipes import DEFAULT_BASE, MAX_DIM, RECIPES, STAGES, Recipe, frequencies, get_recipe, recipe
from .tables import (
    LAYOUTS,
    decay_curve,
    decay_exact,
    encoding_table,
    encoding_table_torch,
    exact_distances,
    exact_table,
)

__all__ = [
    "DEFAULT_BASE",
    "LAYOUTS",
    "RECIPES",
    "STAGES",
    "Recipe",
    "SinusoidalRow",
    "audit_sinusoidal",
    "decay_curve",
    "decay_exact",
    "encoding_table",
    "encoding_table_torch",
    "exact_distances",
    "exact_table",
    "frequencies",
    "get_recipe",
    "recipe",
]
