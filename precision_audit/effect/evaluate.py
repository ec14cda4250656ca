"""What a RoPE code path costs the probe: accuracy and NLL next to its exact-arithmetic run.

A code path is a RoPE preset (``lowp``, ``lowp-inv-freq``, ``fp32``, ``fp64``:
:func:`precision_audit.rope.preset`) or a stack (:data:`precision_audit.rope.STACKS`)
in a dtype.  The probe's evaluation sequences are placed at ``offset +``
their relative positions; the project's numpy engine
(:func:`precision_audit.rope.run_recipe`, schedule ``RopeSchedule(head_dim=128,
base=10000.0)``) computes the stored cos/sin at those positions, and the probe
runs with them, every other operation in float64
(:func:`~precision_audit.effect.model.forward`), so any drop is due to
position alone.  The rotation of q/k is done in float64 too: a stack's own
rotation (``apply``: e.g. fp32-then-cast) is not modelled here.  The exact run
uses cos/sin of the oracle's float64 angles
(:func:`precision_audit.rope.exact_angles`) at the same positions.

>>> row = evaluate("fp32", "bfloat16", offset=0, task="local", sequences=16)
>>> row.task, row.path, row.dtype, row.accuracy == row.exact_accuracy
('local', 'fp32', 'bfloat16', True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..checks import check_choice, check_int
from ..rows import Row
from ..formats import get_format
from ..rope import MAX_ROPE_LENGTH, PRESETS, STACKS, Recipe, RopeSchedule, exact_angles, preset, run_recipe, stack
from .model import BASE, HEAD_DIM, _weights, forward, load_probe
from .tasks import GAPS, TASKS, Batch, make_batch

__all__ = ["EVAL_SEED", "SCHEDULE", "SEQUENCES", "EffectRow", "evaluate", "evaluate_many", "exact_accuracy",
           "path_recipe"]

SCHEDULE = RopeSchedule(head_dim=HEAD_DIM, base=BASE)
EVAL_SEED = 2026  # the evaluation sequences (training used other seeds: scripts/train_probe.py)
SEQUENCES = 256


@dataclass(frozen=True)
class EffectRow(Row):
    """The probe on one task with one code path at one offset.

    ``accuracy``: fraction of queries whose most likely token is the target;
    ``nll``: mean negative log-likelihood of the target (nats); ``exact_*``:
    the same with exact RoPE at the same positions.  ``gap``: the distance the
    gap task reads (None: every trained gap, mixed), 1 for local order.
    ``offset``: the position of each sequence's first token.  ``dtype``: the
    dtype the path was asked for (a stack may keep its cache in float32);
    for a :class:`~precision_audit.rope.Recipe` given as the path, its cache format.
    """

    task: str
    path: str
    dtype: str
    offset: int
    gap: int | None
    accuracy: float
    exact_accuracy: float
    nll: float
    exact_nll: float

    @property
    def drop(self) -> float:
        """Exact accuracy minus the path's accuracy."""
        return self.exact_accuracy - self.accuracy


def path_recipe(path: str | Recipe, dtype: str = "bfloat16") -> Recipe:
    """The recipe of a code path: a preset name, a stack name or a :class:`~precision_audit.rope.Recipe`.

    >>> path_recipe("lowp", "bf16").stages["positions"], path_recipe("vllm").stack
    ('bfloat16', 'vllm')
    >>> path_recipe("fp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown path 'fp16'; valid: lowp, lowp-inv-freq, fp32, fp64, transformers, ...
    """
    if isinstance(path, Recipe):
        return path
    name = check_choice(path, "path", (*PRESETS, *STACKS))
    fmt = get_format(dtype).name
    return preset(name, fmt) if name in PRESETS else stack(name, fmt, SCHEDULE)


def _check(task: str, offset: Any, gap: Any, sequences: Any) -> tuple[int, int | None, int]:
    check_choice(task, "task", TASKS)
    offset = check_int(offset, "offset", minimum=0)
    sequences = check_int(sequences, "sequences", minimum=1, maximum=65536)
    if gap is not None:
        gap = check_int(gap, "gap", minimum=1)
        if task == "local" and gap != 1:
            raise ValueError(f"gap {gap} for task 'local': local order reads distance 1 (give gap=None or 1)")
        if task == "gap" and gap not in GAPS:
            raise ValueError(f"gap {gap} is not a distance the probe was trained on; valid: "
                             + ", ".join(map(str, GAPS)))
    return offset, gap, sequences


@lru_cache(maxsize=16)
def _batch(task: str, gap: int | None, sequences: int, seed: int) -> Batch:
    return make_batch(task, seed, sequences, None if task == "local" else gap)


def _score(w: dict[str, Any], b: Batch, cos: np.ndarray, sin: np.ndarray) -> tuple[float, float]:
    """Accuracy and mean NLL of the targets; a non-finite log-probability counts as wrong (NaN cos/sin)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        logp = forward(w, b.tokens, cos, sin, b.queries)
    t = np.take_along_axis(logp, b.targets[..., None], axis=-1)[..., 0]
    pred = np.argmax(np.where(np.isnan(logp), -np.inf, logp), axis=-1)
    ok = (pred == b.targets) & np.isfinite(t)
    with np.errstate(invalid="ignore"):
        nll = float(np.mean(-t))
    return float(np.mean(ok)), nll


def _tables(recipe: Recipe | None, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin (n, T, 64) at integer positions: the recipe's stored cache, or the exact tables (None)."""
    uniq, inv = np.unique(pos, return_inverse=True)
    if recipe is None:
        a = exact_angles(uniq, SCHEDULE.inv_freq())
        c, s = np.cos(a), np.sin(a)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            st = run_recipe(recipe, SCHEDULE, uniq)
        c, s = st["cos"], st["sin"]
    return c[inv].reshape(*pos.shape, -1), s[inv].reshape(*pos.shape, -1)


def _placed(b: Batch, offset: int) -> np.ndarray:
    if offset + b.span > MAX_ROPE_LENGTH:
        raise ValueError(f"offset {offset} + the task's span {b.span} exceeds 2**26 = {MAX_ROPE_LENGTH} "
                         "(the oracle's exact range)")
    return b.positions + offset


_SCORES: dict[tuple[Any, ...], tuple[float, float]] = {}


def _score_once(b: Batch, key: tuple[Any, ...], cos: np.ndarray, sin: np.ndarray) -> tuple[float, float]:
    """:func:`_score`, run once per distinct cos/sin table of a batch (many stacks store the same cache)."""
    digest = hashlib.blake2b(cos.tobytes() + sin.tobytes(), digest_size=16).digest()
    if (*key, digest) not in _SCORES:
        if len(_SCORES) >= 1024:
            _SCORES.clear()
        _SCORES[(*key, digest)] = _score(_weights(), b, cos, sin)
    return _SCORES[(*key, digest)]


@lru_cache(maxsize=64)
def _exact(task: str, gap: int | None, sequences: int, seed: int, offset: int) -> tuple[float, float]:
    b = _batch(task, gap, sequences, seed)
    return _score(_weights(), b, *_tables(None, _placed(b, offset)))


def evaluate(path: str | Recipe, dtype: str = "bfloat16", offset: int = 0, gap: int | None = None,
             task: str = "local", *, sequences: int = SEQUENCES, seed: int = EVAL_SEED) -> EffectRow:
    """The probe on ``task`` with code path ``path`` in ``dtype``, its sequences starting at ``offset``.

    ``gap`` (gap task): one trained distance (:data:`~precision_audit.effect.tasks.GAPS`),
    None for all of them mixed; ``sequences`` evaluation sequences from ``seed``.

    >>> r = evaluate("lowp", "bf16", offset=2**16, task="local", sequences=16)
    >>> r.exact_accuracy > 0.9, r.accuracy < 0.5  # bf16 positions collide in runs of 512 at 64K
    (True, True)
    >>> evaluate("fp32", task="copy")
    Traceback (most recent call last):
    ...
    ValueError: unknown task 'copy'; valid: local, gap
    """
    offset, gap, sequences = _check(task, offset, gap, sequences)
    seed = check_int(seed, "seed", minimum=0)
    recipe = path_recipe(path, dtype)
    b = _batch(task, gap, sequences, seed)
    acc, nll = _score_once(b, (task, gap, sequences, seed, offset), *_tables(recipe, _placed(b, offset)))
    ex_acc, ex_nll = _exact(task, gap, sequences, seed, offset)
    fmt = get_format(recipe.cache if isinstance(path, Recipe) else dtype).name
    return EffectRow(task, recipe.name, fmt, offset, 1 if task == "local" else gap, acc, ex_acc, nll, ex_nll)


def evaluate_many(paths: Iterable[str | Recipe], dtypes: Sequence[str] = ("bfloat16",),
                  offsets: Sequence[int] = (0,), tasks: Sequence[str] = TASKS,
                  gaps: Sequence[int | None] = (None,), *, sequences: int = SEQUENCES, seed: int = EVAL_SEED,
                  progress: Callable[[int], None] | None = None) -> list[EffectRow]:
    """:func:`evaluate` for every task, gap (gap task only), path, dtype and offset, in that order
    (``progress(1)`` after each row).

    >>> rows = evaluate_many(["fp32"], offsets=[0, 2**20], sequences=8)
    >>> [(r.task, r.offset) for r in rows]
    [('local', 0), ('local', 1048576), ('gap', 0), ('gap', 1048576)]
    """
    paths, dtypes, offsets, tasks, gaps = (_many(v) for v in (paths, dtypes, offsets, tasks, gaps))
    for name, v in (("paths", paths), ("dtypes", dtypes), ("offsets", offsets), ("tasks", tasks), ("gaps", gaps)):
        if not v:
            raise ValueError(f"{name}: none given")
    out = []
    for task in dict.fromkeys(tasks):
        for gap in (dict.fromkeys(gaps) if task == "gap" else (None,)):
            for path in paths:
                for dtype in dict.fromkeys(dtypes):
                    for offset in dict.fromkeys(offsets):
                        out.append(evaluate(path, dtype, offset, gap, task, sequences=sequences, seed=seed))
                        if progress is not None:
                            progress(1)
    return out


def _many(value: Any) -> list[Any]:
    """One value (text, a number, a recipe, None) or an iterable of them -> a list."""
    if value is None or isinstance(value, (str, int, Recipe)) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def exact_accuracy(weights: dict[str, Any] | None = None, *, sequences: int = 1024,
                   seed: int = EVAL_SEED) -> dict[str, float]:
    """The exact-arithmetic accuracy per task at offset 0 (``weights``: default the shipped probe).

    The gap task's figure is over every trained gap, mixed (``sequences`` sequences per task).
    """
    w = load_probe() if weights is None else {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
    out = {}
    for task in TASKS:
        b = make_batch(task, seed, sequences)
        out[task] = _score(w, b, *_tables(None, b.positions))[0]
    return out
