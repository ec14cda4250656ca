"""ALiBi auditor: slopes, bias recipes, bias collisions and their effect on attention.

ALiBi (Press et al., 2022) adds ``-slope_h * (i - j)`` to the attention logit
of query ``i`` and key ``j`` in head ``h``.  When the bias is built or stored
in bfloat16/float16, neighbouring keys get the same bias and large biases lose
the slope.  This package runs each code path (a :class:`Recipe`) stage by stage,
rounding once per stage with :func:`~precision_audit.formats.round_to`, and
measures per head and context length what survives.

What is audited.  The query is the last one, at position ``L - 1``; it sees
all ``L`` keys, so its biases are the worst case of a length-``L`` context.

* ``form="key"`` (Bloom's ``build_alibi_tensor``): the stored bias of key
  ``j`` is ``round(slope * j)`` for ``j = 0 .. L-1``; softmax is invariant to
  the shift ``-slope * (L-1)``, so the code drops it.  The rounding spacing
  then grows with the *absolute* key position: the nearest keys of a late
  query are the ones that collide.
* ``form="relative"``: the stored penalty for distance ``d = i - j`` is
  ``round(slope * d)`` for ``d = 0 .. L-1`` (bias ``-penalty``); the nearest
  keys keep the finest spacing.

Both forms store the same ``L`` magnitudes ``round(slope * k)``, ``k = 0 ..
L-1``, so collision counts agree; the attention effect differs.

>>> alibi_slopes(8).tolist()
[0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
>>> r = audit_alibi(8, "cast-output", 8192, "bfloat16")[0]
>>> r.min_distinct_biases, r.max_run, r.order_inversions
(897, 33, 0)
>>> audit_alibi(8, "fp32", 8192, "bfloat16")[0].min_distinct_biases
8192

The package: :mod:`.slopes` (the slope rules), :mod:`.recipes` (code paths and the biases they store),
:mod:`.rows` (the result rows), :mod:`.stream` (the chunked metrics engine) and :mod:`.audit`
(:func:`audit_alibi`, :func:`stored_bias_metrics`).
"""

from __future__ import annotations

from .audit import CHUNK_ELEMENTS, MAX_ALIBI_LENGTH, audit_alibi, stored_bias_metrics  # noqa: F401
from .recipes import (FORMS, RECIPES, Recipe, alibi_bias, alibi_bias_torch, get_recipe, recipe, recipe_names,
                      stored_slopes)
from .rows import AlibiAudit, AlibiRow, HeadAudit, HeadRow  # noqa: F401  (*Audit: the former names)
from .slopes import (MAX_HEADS, SLOPE_FUNCTIONS, SLOPE_RULES, alibi_slopes, bloom_slopes,  # noqa: F401
                     check_heads, mpt_slopes)

__all__ = [
    "FORMS",
    "RECIPES",
    "SLOPE_RULES",
    "AlibiRow",
    "HeadRow",
    "Recipe",
    "alibi_bias",
    "alibi_bias_torch",
    "alibi_slopes",
    "audit_alibi",
    "bloom_slopes",
    "get_recipe",
    "recipe",
    "recipe_names",
    "stored_slopes",
]
# also importable from here: CHUNK_ELEMENTS, MAX_ALIBI_LENGTH, MAX_HEADS, SLOPE_FUNCTIONS, check_heads,
# stored_bias_metrics
