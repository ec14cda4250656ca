"""The probe model: what a RoPE code path's precision costs a trained model.

Verdicts elsewhere judge the error of RoPE angles; a user asks "will my
model's outputs change?".  The project trains and ships a small RoPE
transformer (``scripts/train_probe.py``; weights in this package's
``probe.npz``) on two tasks that need position (:mod:`.tasks`): local order
(an induction task that needs distance 1) and exact distance at long range
(fetch the token exactly G positions back, G up to 4096, among tokens at
G +- 1, G +- 2).  :func:`evaluate` runs it with a code path's stored cos/sin
at any offset (exact RoPE depends only on position differences) next to its
own exact-arithmetic run; the drop is the consequence.

>>> sorted(TASKS), GAPS[-1]
(['gap', 'local'], 4096)
>>> r = evaluate("lowp", "bfloat16", offset=8192, task="local", sequences=32)
>>> r.exact_accuracy >= 0.99 and r.accuracy < 0.5
True

Modules: :mod:`.tasks` (the sequences), :mod:`.model` (weights, float64
forward pass), :mod:`.evaluate` (rows), :mod:`.baichuan` (bf16 position ids at
context 8192).
"""

from __future__ import annotations

from .baichuan import baichuan_effect
from .evaluate import EVAL_SEED, SCHEDULE, SEQUENCES, EffectRow, evaluate, evaluate_many, exact_accuracy, path_recipe
from .model import load_probe, probe_metadata
from .tasks import GAPS, TASKS

__all__ = ["EVAL_SEED", "GAPS", "SCHEDULE", "SEQUENCES", "TASKS", "EffectRow", "baichuan_effect", "evaluate",
           "evaluate_many", "exact_accuracy", "load_probe", "path_recipe", "probe_metadata"]
