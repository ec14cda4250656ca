"""The Baichuan reproduction's consequence: the probe with bfloat16 position ids at context 8192.

Baichuan's public issue: position ids built in bfloat16 (``torch.arange(n,
dtype=torch.bfloat16)``) collide above 256; the ``lowp`` preset models that
path (positions rounded to the dtype, then every stage in it), ``fp32`` is
the fix (positions, frequencies, angles and cos/sin in float32, the cache
cast to bfloat16).  The probe's sequences are placed at the end of the
context: ``offset = context - span``, so the longest sequence ends at
position ``context - 1``.

>>> path_recipe("lowp", "bfloat16").stages["positions"]  # lowp builds positions in the dtype
'bfloat16'
>>> rows = baichuan_effect(sequences=16)
>>> [(r.task, r.path, r.offset) for r in rows][:2]  # 24 local-order tokens at 8168 .. 8191
[('local', 'lowp', 8168), ('local', 'fp32', 8168)]
>>> [r.accuracy < 0.6 for r in rows], [r.accuracy == r.exact_accuracy for r in rows]
([True, False, True, False], [False, True, False, True])
"""

from __future__ import annotations

from ..checks import check_int
from .evaluate import EVAL_SEED, SEQUENCES, EffectRow, _batch, evaluate, path_recipe  # noqa: F401 (doctest)
from .tasks import TASKS

__all__ = ["BAICHUAN_CONTEXT", "baichuan_effect"]

BAICHUAN_CONTEXT = 8192


def baichuan_effect(context: int = BAICHUAN_CONTEXT, dtype: str = "bfloat16", *, sequences: int = SEQUENCES,
                    seed: int = EVAL_SEED) -> tuple[EffectRow, ...]:
    """The probe per task with bf16 position ids (``lowp``) next to the float32 fix (``fp32``) at the end
    of a ``context``-token context, each beside its exact-arithmetic run."""
    context = check_int(context, "context", minimum=1)
    rows = []
    for task in TASKS:
        span = _batch(task, None, sequences, seed).span
        if span > context:
            raise ValueError(f"context {context} is shorter than the {task} task's span {span}")
        rows += [evaluate(p, dtype, context - span, None, task, sequences=sequences, seed=seed)
                 for p in ("lowp", "fp32")]
    return tuple(rows)
