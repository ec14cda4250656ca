"""Verdicts and the audit of a parsed model: every code path per dtype and length (rules in :mod:`precision_audit.config`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._common import Row, check_lengths
from ..formats import get_format, spacing
from .parse import CONTEXT_KEYS, ModelConfig

if TYPE_CHECKING:
    from ..rope import PairError

__all__ = [
    "DEFAULT_TOLERANCE",
    "PHASE_LOST",
    "VERDICTS",
    "VERDICT_RULES",
    "ConfigRow",
    "alibi_verdict",
    "audit_config",
    "default_dtype",
    "default_lengths",
    "model_stacks",
    "positions_verdict",
    "rope_verdict",
    "work_to_scan",
]


DEFAULT_TOLERANCE = 8.0
VERDICTS: tuple[str, ...] = ("safe", "degraded", "broken")
PHASE_LOST = math.pi / 2
VERDICT_RULES = (
    "**broken**: the phase is lost (max rotation error >= pi/2) or positions collide (position ids, cos/sin "
    "rows or ALiBi biases of neighbouring tokens equal, a bias overflowed or two swapped order); "
    f"**degraded**: max rotation error above {DEFAULT_TOLERANCE:g}x the cache format's own rounding bound "
    f"(ALiBi: a head's bias error above {DEFAULT_TOLERANCE:g} half-ulps of its largest bias), i.e. 3 bits "
    "below what storing cos/sin in the dtype costs anyway; **safe** otherwise."
)



def rope_verdict(max_rotation_error: float, colliding: int, cache_bound: float,
                 tolerance: float = DEFAULT_TOLERANCE) -> str:
    """``broken`` (error >= pi/2 or collisions), ``degraded`` (error > tolerance x cache bound), else ``safe``.

    >>> rope_verdict(0.002, 0, 0.00277), rope_verdict(0.03, 0, 0.00277), rope_verdict(0.003, 5, 0.00277)
    ('safe', 'degraded', 'broken')
    """
    if not math.isfinite(max_rotation_error) or max_rotation_error >= PHASE_LOST or colliding > 0:
        return "broken"
    return "degraded" if max_rotation_error > tolerance * cache_bound else "safe"


def positions_verdict(colliding: int, non_finite: int) -> str:
    """Position ids are exact (``safe``) or collide/overflow (``broken``); nothing in between.

    >>> positions_verdict(0, 0), positions_verdict(7296, 0)
    ('safe', 'broken')
    """
    return "broken" if colliding or non_finite else "safe"


def alibi_verdict(row: Any, tolerance: float = DEFAULT_TOLERANCE) -> str:
    """Verdict of an :class:`~precision_audit.alibi.AlibiAudit` row.

    ``broken``: neighbouring keys share a bias in some head, a bias overflowed
    or two swapped order; ``degraded``: some head's largest bias error exceeds
    ``tolerance`` half-ulps of the bias format at that head's largest exact
    bias ``slope * (length - 1)``; ``safe`` otherwise.

    >>> from precision_audit.alibi import audit_alibi
    >>> [alibi_verdict(audit_alibi(4096, 8, r, "bf16")[0]) for r in ("cast-output", "fp32")]
    ['broken', 'safe']
    """
    if row.min_distinct_biases < row.length or row.nonfinite_biases or row.order_inversions:
        return "broken"
    top = np.array([h.slope * (row.length - 1) for h in row.heads])
    half_ulp = spacing(top, row.bias_dtype) / 2
    errs = np.array([h.max_abs_error for h in row.heads])
    return "degraded" if bool((errs > tolerance * half_ulp).any()) else "safe"


# --------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class ConfigRow(Row):
    """One code path of a model at one dtype and context length, with its verdict.

    ``component``: ``rope`` (``recipe`` a RoPE preset or a stack, ``stack``
    the stack's name for a stack row, ``layer_type`` the schedule's layer type), ``alibi`` (an ALiBi recipe) or ``positions``
    (position ids cast to ``dtype``).  ``colliding_positions``: positions whose
    cos/sin row (rope), id (positions) or bias (alibi, worst head) equals the
    previous one's.  RoPE metrics in rad; ``ratio`` = max rotation error / the
    cache format's rounding bound.  ALiBi metrics: ``min_distinct_biases``,
    ``max_run``, ``max_abs_error``, ``max_prob_change``; positions:
    ``max_run``, ``max_abs_error``, ``non_finite``.  Absent metrics are None.
    ``pair_errors`` (rope rows): the pairwise rotation errors at distances D
    (:class:`~precision_audit.rope.PairError`; verdicts do not use them yet).
    """

    component: str
    recipe: str
    dtype: str
    length: int
    verdict: str
    layer_type: str | None = None
    max_rotation_error: float | None = None
    mean_rotation_error: float | None = None
    colliding_positions: int | None = None
    cache_bound: float | None = None
    ratio: float | None = None
    min_distinct_biases: int | None = None
    max_run: int | None = None
    max_abs_error: float | None = None
    max_prob_change: float | None = None
    non_finite: int | None = None
    stack: str | None = None
    pair_errors: tuple[PairError, ...] = ()

    def __post_init__(self) -> None:
        if self.component not in ("rope", "alibi", "positions"):
            raise ValueError(f"component {self.component!r} must be rope, alibi or positions")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} must be one of {', '.join(VERDICTS)}")


def default_lengths(model: ModelConfig) -> tuple[int, ...]:
    """The model's context and 2x, 4x (context extension).

    >>> from precision_audit.config import load_config_dict
    >>> default_lengths(load_config_dict({"model_type": "llama", "head_dim": 128, "max_position_embeddings": 4096}))
    (4096, 8192, 16384)
    """
    L = model.max_position_embeddings
    if L is None:
        raise ValueError(f"{model.source or model.name}: the config declares no context length "
                         f"({', '.join(CONTEXT_KEYS)}); give the lengths to audit (--length)")
    return (L, 2 * L, 4 * L)


def default_dtype(model: ModelConfig) -> str:
    """The dtype the model runs in: its config's ``torch_dtype`` (canonical name), bfloat16 when it names none.

    >>> from precision_audit.config import load_config_dict
    >>> default_dtype(load_config_dict({"model_type": "llama", "head_dim": 64, "torch_dtype": "float16"}))
    'float16'
    >>> default_dtype(load_config_dict({"model_type": "llama", "head_dim": 64}))
    'bfloat16'
    """
    name = str(model.torch_dtype or "bfloat16").replace("torch.", "")
    try:
        return get_format(name).name
    except ValueError:
        raise ValueError(f"{model.source or model.name}: torch_dtype {model.torch_dtype!r} is not a number format; "
                         "give the dtype to audit (--dtype)") from None


GGUF_STACKS: tuple[str, ...] = ("llama.cpp-cpu", "llama.cpp-cuda")
"""The stacks a GGUF file runs on (llama.cpp's): the default stacks of a model read from one."""


def model_stacks(model: ModelConfig, stacks: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """The stacks to audit a model on, and why the others were left out.

    ``stacks``: names of :data:`precision_audit.rope.STACKS` (``all``: every
    stack that runs each of the model's rope types; a stack named explicitly
    that does not run one raises ValueError); default: every stack that runs
    the model, or llama.cpp's for a model read from a GGUF file.  An ALiBi
    model has none (naming one raises ValueError).

    >>> from precision_audit.config import load_config_dict
    >>> m = load_config_dict({"model_type": "llama", "head_dim": 64, "rope_scaling": {"rope_type": "dynamic",
    ...                       "factor": 2.0}, "max_position_embeddings": 4096})
    >>> names, skipped = model_stacks(m)
    >>> names, len(skipped)
    (['transformers', 'transformers-cast'], 5)
    """
    from ..rope import select_stacks

    if model.kind != "rope":
        if stacks:
            raise ValueError(f"stacks model RoPE code paths; {model.name} uses {model.kind}")
        return [], []
    asked = list(stacks) if stacks else list(GGUF_STACKS if model.origin == "gguf" else ("all",))
    return select_stacks(asked, [s.scaling for _, s in model.rope])


def _recipe_names(kind: str, recipes: Sequence[str] | None) -> list[str]:
    """The RoPE presets or ALiBi recipes asked for (default: all), validated."""
    from ..alibi import RECIPES
    from ..rope import PRESETS

    table, what = (PRESETS, "RoPE") if kind == "rope" else (RECIPES, "ALiBi")
    names = list(recipes) if recipes else list(table)
    bad = [r for r in names if r not in table]
    if bad:
        raise ValueError(f"unknown {what} recipe {bad[0]!r}; valid: {', '.join(table)}")
    return names


def work_to_scan(model: ModelConfig, lengths: Iterable[int], dtypes: Sequence[str],
                 recipes: Sequence[str] | None = None, stacks: Sequence[str] | None = None) -> int:
    """Positions :func:`audit_config` reports to ``progress`` (RoPE: per schedule one pass serves every preset and
    dtype, one more every stack; ALiBi: two passes per recipe and dtype).

    >>> from precision_audit.config import load_config_dict
    >>> work_to_scan(load_config_dict({"model_type": "llama", "head_dim": 64}), [1024, 4096], ["bf16", "fp16"])
    4096
    """
    lens = check_lengths(lengths)
    n = len(dict.fromkeys(get_format(d).name for d in dtypes))
    if model.kind == "alibi":
        return 2 * lens[-1] * n * len(_recipe_names("alibi", recipes))
    from ..rope import positions_to_scan

    passes = (1 if not stacks or recipes is not None else 0) + (1 if stacks else 0)  # presets, stacks
    return sum(positions_to_scan(s, lens) for _, s in model.rope) * passes


def audit_config(
    model: ModelConfig,
    lengths: int | Iterable[int] | None = None,
    dtypes: Sequence[str] = ("bfloat16", "float16"),
    *,
    recipes: Sequence[str] | None = None,
    stacks: Sequence[str] | None = None,
    engine: str = "numpy",
    tolerance: float = DEFAULT_TOLERANCE,
    positions: bool = True,
    progress: Callable[[int], None] | None = None,
    distances: int | Iterable[int] | None = None,
) -> list[ConfigRow]:
    """Audit every code path of a model: rows per dtype, length, then component, recipes and stacks.

    RoPE models: the RoPE presets (``recipes``; all when neither recipes nor
    ``stacks`` are given) and the inference stacks (``stacks``, names of
    :data:`precision_audit.rope.STACKS`; a stack that does not run a layer's
    rope type raises ValueError) of each layer type's schedule, in one pass
    per schedule for every dtype; ALiBi models: the ALiBi recipes (default
    all) with the reference slopes; plus (``positions``) the position ids cast
    to each dtype.  ``lengths`` default to :func:`default_lengths`.
    ``engine`` as for the rope and positions auditors (stacks and ALiBi run numpy).
    RoPE lengths above 2**26 raise ValueError (the oracle's limit).  ``distances``:
    the pair distances of the RoPE rows, as :func:`precision_audit.rope.audit` takes them.
    """
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not tolerance > 0:
        raise ValueError(f"tolerance {tolerance!r} must be a number > 0")
    if engine not in ("numpy", "torch"):
        raise ValueError(f"unknown engine {engine!r}; valid: numpy, torch")
    lens = check_lengths(default_lengths(model) if lengths is None else lengths)
    fmts = list(dict.fromkeys(get_format(d).name for d in dtypes))
    if not fmts:
        raise ValueError("no dtype given")
    if stacks and model.kind != "rope":
        raise ValueError(f"{model.name}: stacks model RoPE code paths; this model uses {model.kind}")
    rows: list[ConfigRow] = []
    names = [] if stacks and recipes is None else _recipe_names(model.kind, recipes)
    if model.kind == "rope":
        rows += _rope_rows(model, lens, fmts, names, list(stacks or ()), engine, tolerance, progress, distances)
    else:
        rows += _alibi_rows(model, lens, fmts, names, tolerance, progress)
    if positions:
        from ..positions import audit_positions

        for p in audit_positions(lens, fmts, engine="torch" if engine == "torch" else "numpy"):
            colliding = p.length - p.distinct_values
            rows.append(ConfigRow(
                component="positions", recipe="position ids", dtype=p.dtype, length=p.length,
                verdict=positions_verdict(colliding, p.non_finite), colliding_positions=colliding,
                max_run=p.max_run, max_abs_error=p.max_abs_error, non_finite=p.non_finite))
    order = {"rope": 0, "alibi": 0, "positions": 1}
    layer_rank = {t: i for i, (t, _) in enumerate(model.rope)}
    rec_rank = {n: i for i, n in enumerate([*names, *(stacks or ())])}
    rows.sort(key=lambda r: (fmts.index(r.dtype), r.length, order[r.component],
                             layer_rank.get(r.layer_type or "all", 0), rec_rank.get(r.recipe, 0)))
    return rows


def _rope_rows(model: ModelConfig, lens: tuple[int, ...], fmts: Sequence[str], names: Sequence[str],
               stacks: Sequence[str], engine: str, tolerance: float,
               progress: Callable[[int], None] | None,
               distances: int | Iterable[int] | None = None) -> list[ConfigRow]:
    """Every preset and stack of every dtype, one audit (one pass) per layer type's schedule."""
    from ..rope import audit, check_rope_lengths, preset, stack

    check_rope_lengths(lens)
    rows = []
    for layer_type, s in model.rope:
        lt = None if layer_type == "all" else layer_type
        found = []
        if names:
            found += audit(s, [preset(n, d) for d in fmts for n in names], lens, progress=progress, engine=engine,
                           distances=distances)
        if stacks:  # a stack's hows are modelled by the numpy engine (its kernels are not torch's)
            found += audit(s, [stack(n, d, s) for d in fmts for n in stacks], lens, progress=progress,
                           distances=distances)
        for r in found:
            rows.append(ConfigRow(
                component="rope", recipe=r.recipe, dtype=r.dtype, length=r.length, layer_type=lt,
                verdict=rope_verdict(r.max_rotation_error, r.colliding_positions, r.cache_bound, tolerance),
                max_rotation_error=r.max_rotation_error, mean_rotation_error=r.mean_rotation_error,
                colliding_positions=r.colliding_positions, cache_bound=r.cache_bound,
                ratio=r.max_rotation_error / r.cache_bound, stack=r.stack, pair_errors=r.pair_errors))
    return rows


def _alibi_rows(model: ModelConfig, lens: tuple[int, ...], fmts: Sequence[str], names: Sequence[str],
                tolerance: float, progress: Callable[[int], None] | None) -> list[ConfigRow]:
    """Every ALiBi recipe of every dtype with the model's head count (reference slopes)."""
    from ..alibi import audit_alibi

    rows = []
    for d in fmts:
        for n in names:
            for a in audit_alibi(lens, int(model.num_heads), n, d, progress=progress):  # type: ignore[arg-type]
                rows.append(ConfigRow(
                    component="alibi", recipe=n, dtype=d, length=a.length, verdict=alibi_verdict(a, tolerance),
                    colliding_positions=a.length - a.min_distinct_biases,
                    min_distinct_biases=a.min_distinct_biases, max_run=a.max_run,
                    max_abs_error=a.max_abs_error, max_prob_change=a.max_prob_change,
                    non_finite=a.nonfinite_biases))
    return rows


