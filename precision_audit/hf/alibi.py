"""transformers' ALiBi builders (Bloom, Falcon, MPT), run and audited side by side with the alibi auditor.

:func:`audit_alibi_builder` calls a builder for one sequence, measures the
bias of its last query with :func:`precision_audit.alibi.stored_bias_metrics`
(the alibi auditor's metrics on a whole stored array) and finds the alibi
preset that stores the same biases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..rows import Row
from ..formats import round_to
from ..rope import check_rope_lengths
from ._transformers import _quiet, require_transformers
from .modules import _torch_dtype

__all__ = ["ALIBI_BUILDERS", "MAX_ALIBI_ELEMENTS", "AlibiBuilderRow", "audit_alibi_builder"]

F64 = npt.NDArray[np.float64]

MAX_ALIBI_ELEMENTS = 2**24  # heads x length held at once (the builders materialise the whole tensor)


def _bloom(num_heads: int, length: int, tdt: Any) -> Any:
    import torch
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    return build_alibi_tensor(torch.ones(1, length, dtype=torch.int64), num_heads, tdt)


def _falcon(num_heads: int, length: int, tdt: Any) -> Any:
    import torch
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    return build_alibi_tensor(torch.ones(1, length, dtype=torch.int64), num_heads, tdt)


def _mpt(num_heads: int, length: int, tdt: Any) -> Any:
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    return build_mpt_alibi_tensor(num_heads, length)  # float32; MptAttention adds it to the scores as is


# model type -> (builder, qualified name, form: "key" = slope * j, "relative" = slope * (j - (L-1)))
ALIBI_BUILDERS: dict[str, tuple[Callable[[int, int, Any], Any], str, str]] = {
    "bloom": (_bloom, "transformers.models.bloom.modeling_bloom.build_alibi_tensor", "key"),
    "falcon": (_falcon, "transformers.models.falcon.modeling_falcon.build_alibi_tensor", "key"),
    "mpt": (_mpt, "transformers.models.mpt.modeling_mpt.build_mpt_alibi_tensor", "relative"),
}




@dataclass(frozen=True)
class AlibiBuilderRow(Row):
    """A transformers ALiBi builder's bias for the last query, with the alibi auditor's metrics.

    Metrics as :class:`~precision_audit.alibi.AlibiRow` (summaries over
    heads), measured on the builder's real tensor against the exact float64
    bias ``slope_h * k`` (reference slopes).  ``bias_dtype`` is the dtype
    the builder returns; ``value_format`` the narrowest registry format that
    holds every value it returned (Falcon returns bfloat16 values whatever
    the model dtype).  ``matches_recipe`` / ``recipe_dtype``: the alibi
    preset whose stored biases equal the builder's most often
    (``identical_fraction`` of heads x length); ``recipe`` holds that
    preset's own audit, side by side.
    """

    model_type: str
    builder: str
    dtype: str
    bias_dtype: str
    value_format: str
    form: str
    length: int
    num_heads: int
    min_distinct_biases: int
    distinct_fraction: float
    max_run: int
    max_abs_error: float
    order_inversions: int
    nonfinite_biases: int
    max_prob_change: float
    matches_recipe: str
    recipe_dtype: str
    identical_fraction: float
    recipe: Any = field(repr=False, default=None)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        rec = d.pop("recipe", None)
        if isinstance(rec, dict):
            rec.pop("heads", None)
            d["recipe"] = rec
        return d


def _value_format(a: F64) -> str:
    finite = a[np.isfinite(a)]
    for f in ("bfloat16", "float16", "float32"):
        if np.array_equal(round_to(finite, f), finite):
            return f
    return "float64"


def audit_alibi_builder(model_type: str, num_heads: int, length: int, dtype: Any = "bfloat16") -> AlibiBuilderRow:
    """Run transformers' ALiBi builder of ``bloom``, ``falcon`` or ``mpt`` and audit its bias.

    The builder is called for one sequence of ``length`` tokens (all
    attended); the row of the last query (key form: ``slope * j``, as the
    model adds it; relative form: ``-slope * (L-1-j)``) is measured, and each
    alibi preset (at ``dtype``, and at bfloat16) is run with
    :func:`~precision_audit.alibi.alibi_bias` to find the one that stores the
    same biases; its :func:`~precision_audit.alibi.audit_alibi` row, in the
    builder's form (the attention effect depends on it: Falcon stores the
    ``lowp`` magnitudes in key form), is attached.  E.g.
    ``audit_alibi_builder("bloom", 12, 4096)`` matches ``cast-output`` with
    ``identical_fraction`` 1.0 (tests/test_hf.py runs it).
    """
    from ..alibi import RECIPES, check_heads, alibi_bias, audit_alibi, stored_bias_metrics
    from ..alibi import recipe as alibi_recipe

    if model_type not in ALIBI_BUILDERS:
        raise ValueError(f"unknown ALiBi model type {model_type!r}; valid: {', '.join(ALIBI_BUILDERS)}")
    n = check_heads(num_heads)
    (L,) = check_rope_lengths(length)
    if n * L > MAX_ALIBI_ELEMENTS:
        raise ValueError(f"heads x length = {n * L} exceeds {MAX_ALIBI_ELEMENTS} (the builders hold the whole tensor)")
    name, tdt = _torch_dtype(dtype)
    require_transformers()
    import torch

    build, qual, form = ALIBI_BUILDERS[model_type]
    with _quiet():
        t = build(n, L, tdt)
    bias_dtype = str(t.dtype).removeprefix("torch.")
    b = t.to(torch.float64).reshape(n, -1)[:, -L:].numpy()  # (heads, keys)
    mag = b if form == "key" else -b[:, ::-1]  # magnitudes by key position / distance k
    mag = mag + 0.0  # -0.0 -> 0.0
    metrics = stored_bias_metrics(mag, form=form)  # against the reference slopes
    best: tuple[float, bool, bool, int, str, str] | None = None
    for d in dict.fromkeys([name, "bfloat16"]):
        for i, rname in enumerate(RECIPES):
            r = alibi_recipe(rname, d)
            with np.errstate(over="ignore", invalid="ignore"):
                theirs = alibi_bias(r, n, L, d)
            tm = theirs if r.form == "key" else 0.0 - theirs[:, ::-1]
            frac = float(np.mean((tm == mag) | (np.isnan(tm) & np.isnan(mag))))
            # ties (power-of-two head counts: exact slopes make lowp and cast-output store the same biases)
            # go to the builder's form, then the model dtype, then the preset order
            cand = (frac, r.form == form, d == name, -i, rname, d)
            if best is None or cand[:4] > best[:4]:
                best = cand
    assert best is not None
    frac, _, _, _, rname, rdt = best
    rec = alibi_recipe(rname, rdt)
    if rec.form != form:  # same stored magnitudes; the attention effect depends on the form
        rec = replace(rec, form=form)
    (rec_row,) = audit_alibi(n, rec, L, rdt)
    return AlibiBuilderRow(
        model_type=model_type, builder=qual, dtype=name, bias_dtype=bias_dtype, value_format=_value_format(mag),
        form=form, length=L, num_heads=n, matches_recipe=rname, recipe_dtype=rdt, identical_fraction=frac,
        recipe=rec_row, **metrics)
