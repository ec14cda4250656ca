"""Assertion helpers for your own pytest suite: guard a model's position code in CI.

Each helper audits one thing and returns None when it is fine; otherwise it
raises AssertionError whose message is a readable table of what broke (the
rows, their verdict and the limit they crossed), so a failing CI log says why.

* :func:`assert_rope_module`: a live rotary module (anything with
  ``forward(x, position_ids) -> (cos, sin)``, e.g. transformers'
  ``LlamaRotaryEmbedding``), called for positions 0..L-1 in chunks, against
  the exact float64 angles of the schedule its config describes;
* :func:`assert_config`: a model's ``config.json`` through the tool's own
  schedules (:mod:`precision_audit.config`);
* :func:`assert_rope`: a schedule and a RoPE recipe;
* :func:`assert_positions`: position ids cast to a format.

The default limit is the verdict rule of :mod:`precision_audit.config`: a
row passes when it is ``safe`` (no collision, max rotation error at most
``tolerance`` = 8 times the cache format's own rounding bound).  Give
``max_rotation_error`` (rad) to set your own limit instead; collisions and a
lost phase (>= pi/2) always fail.

>>> assert_positions(2048, "float16")  # every integer up to 2048 is a float16 value
>>> try:
...     assert_positions(4096, "bfloat16")
... except AssertionError as e:
...     print(str(e).splitlines()[0])
position ids 0..4095 in bfloat16 fail (want every position exact): 3327 positions collide with their neighbour
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


from ._common import Row, check_length
from .config import DEFAULT_TOLERANCE, PHASE_LOST, ModelConfig, load_config, load_config_dict, rope_verdict
from .formats import get_format
from .schedules import RopeSchedule

__all__ = [
    "ModuleAudit",
    "assert_config",
    "assert_positions",
    "assert_rope",
    "assert_rope_module",
    "audit_rope_module",
]


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, Any]]) -> str:
    from .cli import table

    return table(rows, columns)


def _limit_text(max_rotation_error: float | None, tolerance: float, bound: float) -> str:
    if max_rotation_error is not None:
        return f"max rotation error <= {max_rotation_error:.4g} rad, no colliding positions"
    return (f"verdict safe: max rotation error <= {tolerance:g} x cache bound = {tolerance * bound:.4g} rad, "
            f"no colliding positions")


def _fails(max_err: float, colliding: int, bound: float, max_rotation_error: float | None, tolerance: float) -> bool:
    if colliding > 0 or not math.isfinite(max_err) or max_err >= PHASE_LOST:
        return True
    if max_rotation_error is not None:
        return max_err > max_rotation_error
    return rope_verdict(max_err, colliding, bound, tolerance) != "safe"


def _check_limit(max_rotation_error: float | None) -> None:
    if max_rotation_error is not None and (isinstance(max_rotation_error, bool) or
                                           not isinstance(max_rotation_error, (int, float)) or
                                           not max_rotation_error > 0):
        raise ValueError(f"max_rotation_error {max_rotation_error!r} must be a number > 0 (rad)")


_ROPE_COLUMNS: list[tuple[str, Any]] = [
    ("dtype", "dtype"), ("length", "length"), ("max rot err", "max_rotation_error"),
    ("mean rot err", "mean_rotation_error"), ("x cache bound", lambda r: f"{r['ratio']:.3g}"),
    ("colliding", "colliding_positions"), ("verdict", "verdict"),
]


# --------------------------------------------------------------------------- live modules


@dataclass(frozen=True)
class ModuleAudit(Row):
    """Rotation errors of a live rotary module's cos/sin over positions 0..length-1 (rad).

    Same metrics as the rope auditor: the rotation ``atan2(sin, cos)`` of each
    stored pair against the exact ``m * theta_i`` of the float64 schedule;
    ``colliding_positions`` = positions whose cos/sin row equals the previous
    one's; ``ratio`` = max error / :func:`~precision_audit.rope.cache_rounding_bound`
    of ``dtype`` (the format the module returns).
    """

    module: str
    dtype: str
    length: int
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int
    cache_bound: float
    ratio: float
    verdict: str


def _schedule_of(module: Any, config: Any, layer_type: str | None) -> RopeSchedule:
    if isinstance(config, RopeSchedule):
        return config
    if config is None:
        config = getattr(module, "config", None)
        if config is None:
            raise ValueError(f"{type(module).__name__} has no .config; pass config= (a RopeSchedule, a config "
                             "dict, a config.json path or a transformers config)")
    if isinstance(config, ModelConfig):
        return config.schedule_for(layer_type)
    if isinstance(config, (str, os.PathLike)):
        return load_config(config).schedule_for(layer_type)
    if hasattr(config, "to_dict") and not isinstance(config, Mapping):
        # a transformers config object: read as transformers reads it (its to_dict() drops per-layer
        # attributes such as Gemma 4's global_head_dim)
        from .hf import schedule_from_config

        return schedule_from_config(config, layer_type)
    if isinstance(config, Mapping):
        return load_config_dict(config, name=type(module).__name__, source="config").schedule_for(layer_type)
    raise ValueError(f"config {config!r} is not a RopeSchedule, ModelConfig, config dict or config.json path")


def audit_rope_module(
    module: Any,
    *,
    length: int,
    dtype: str = "bfloat16",
    config: Any = None,
    layer_type: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    chunk: int = 4096,
) -> ModuleAudit:
    """Call a rotary module for positions 0..length-1 and measure its rotation errors.

    The module is called as ``module(x, position_ids)`` (plus ``layer_type=``
    when given) with ``x`` in ``dtype`` and ``chunk`` positions at a time;
    each call also holds position ``length - 1`` (its output is dropped), so
    modules that pick frequencies by the longest position (dynamic NTK,
    LongRoPE) behave as in one full-length forward.  The reference is the
    float64 schedule of ``config`` (default ``module.config``): the
    frequencies the module is *meant* to have, not its possibly downcast
    buffer.  The measurement is :func:`precision_audit.hf.audit_rope_module`'s.
    """
    from .hf import audit_rope_module as _audit
    from .rope import cache_rounding_bound

    length = check_length(length)
    fmt = get_format(dtype)
    if fmt.torch_dtype is None:
        raise ValueError(f"format {fmt.name!r} has no torch dtype")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk {chunk!r} must be an integer >= 1")
    schedule = _schedule_of(module, config, layer_type)
    (row,) = _audit(module, schedule, length, dtype=fmt.name, layer_type=layer_type, match=False,
                    chunk_elems=chunk * schedule.n_freq)
    bound = cache_rounding_bound(fmt, schedule.cos_sin_scale)
    err, colliding = row.max_rotation_error, row.colliding_positions
    return ModuleAudit(module=type(module).__name__, dtype=fmt.name, length=length, max_rotation_error=err,
                       mean_rotation_error=row.mean_rotation_error, colliding_positions=colliding,
                       cache_bound=bound, ratio=err / bound, verdict=rope_verdict(err, colliding, bound, tolerance))


def assert_rope_module(
    module: Any,
    *,
    length: int,
    dtype: str = "bfloat16",
    max_rotation_error: float | None = None,
    config: Any = None,
    layer_type: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Fail unless a live rotary module's cos/sin are accurate at ``length`` in ``dtype``.

    See :func:`audit_rope_module` for how it is measured.  Passes when the
    verdict is ``safe`` (or, with ``max_rotation_error``, when the max
    rotation error is at most that many rad) and no position collides.

    >>> import torch
    >>> class Rotary(torch.nn.Module):  # the rotary protocol, float32 inv_freq buffer
    ...     def __init__(self, dim=64, base=10000.0):
    ...         super().__init__()
    ...         self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))
    ...     def forward(self, x, position_ids):
    ...         f = position_ids[..., None].float() * self.inv_freq.float()
    ...         emb = torch.cat((f, f), dim=-1)
    ...         return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    >>> schedule = RopeSchedule(head_dim=64, base=10000.0)
    >>> assert_rope_module(Rotary(), length=8192, config=schedule)  # as built: passes
    >>> try:  # after model.to(torch.bfloat16) the buffer is bf16
    ...     assert_rope_module(Rotary().to(torch.bfloat16), length=8192, config=schedule)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    rotary module Rotary fails at length 8192 in bfloat16 (limit: verdict safe: max rotation error <= 8 x cache bound = 0.02216 rad, no colliding positions)
    """
    _check_limit(max_rotation_error)
    a = audit_rope_module(module, length=length, dtype=dtype, config=config, layer_type=layer_type,
                          tolerance=tolerance)
    if _fails(a.max_rotation_error, a.colliding_positions, a.cache_bound, max_rotation_error, tolerance):
        schedule = _schedule_of(module, config, layer_type)
        raise AssertionError(
            f"rotary module {a.module} fails at length {a.length} in {a.dtype} "
            f"(limit: {_limit_text(max_rotation_error, tolerance, a.cache_bound)})\n\n"
            + _table([a.to_dict()], _ROPE_COLUMNS)
            + f"\n\nreference: {schedule.describe()} (float64, exact m * theta_i); errors in rad, pi = phase lost."
            + "\nA float32 inv_freq buffer downcast by model.to(dtype) gives errors like these; keep it float32 "
              "(or rebuild it) after casting the model.")


# --------------------------------------------------------------------------- schedules and configs


def assert_rope(
    schedule: RopeSchedule,
    recipe: Any,
    length: int,
    *,
    dtype: str = "bfloat16",
    max_rotation_error: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Fail unless a RoPE recipe (a preset name or a :class:`~precision_audit.rope.Recipe`) is accurate.

    >>> assert_rope(RopeSchedule(head_dim=128), "fp32", 32768)
    >>> try:
    ...     assert_rope(RopeSchedule(head_dim=128), "fp32", 32768, max_rotation_error=1e-3)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    RoPE recipe fp32 fails at length 32768 in bfloat16 (limit: max rotation error <= 0.001 rad, no colliding positions)
    """
    from .rope import Recipe, audit, preset

    _check_limit(max_rotation_error)
    rec = recipe if isinstance(recipe, Recipe) else preset(recipe, dtype)
    (r,) = audit(schedule, rec, [check_length(length)])
    if _fails(r.max_rotation_error, r.colliding_positions, r.cache_bound, max_rotation_error, tolerance):
        row = {**r.to_dict(), "ratio": r.max_rotation_error / r.cache_bound,
               "verdict": rope_verdict(r.max_rotation_error, r.colliding_positions, r.cache_bound, tolerance)}
        raise AssertionError(
            f"RoPE recipe {rec.name} fails at length {r.length} in {r.dtype} "
            f"(limit: {_limit_text(max_rotation_error, tolerance, r.cache_bound)})\n\n"
            + _table([row], [("recipe", "recipe")] + _ROPE_COLUMNS)
            + f"\n\n{schedule.describe()}; stages: "
            + ", ".join(f"{k} {v}" for k, v in rec.how.items()))


def assert_config(
    path: Any,
    *,
    length: int | None = None,
    dtype: str = "bfloat16",
    recipe: str = "fp32",
    max_rotation_error: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Fail unless a model (a ``config.json`` path, a config dict or a ModelConfig) is safe on one code path.

    ``length`` defaults to the config's context; ``recipe`` is a RoPE preset
    or an ALiBi recipe (``fp32`` exists for both); every layer type's
    schedule is checked.  ``max_rotation_error`` applies to RoPE models.

    >>> llama2 = {"_name_or_path": "meta-llama/Llama-2-7b-hf", "model_type": "llama", "hidden_size": 4096,
    ...           "num_attention_heads": 32, "max_position_embeddings": 4096}  # its config.json, shortened
    >>> assert_config(llama2)
    >>> try:
    ...     assert_config(llama2, recipe="lowp-inv-freq")
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    meta-llama/Llama-2-7b-hf fails on recipe lowp-inv-freq in bfloat16 (limit: verdict safe: max rotation error <= 8 x cache bound = 0.02216 rad, no colliding positions)
    """
    from .config import audit_config
    from .rope import cache_rounding_bound

    _check_limit(max_rotation_error)
    if isinstance(path, ModelConfig):
        model = path
    elif isinstance(path, Mapping):
        model = load_config_dict(path)
    else:
        model = load_config(path)
    if model.kind != "rope" and max_rotation_error is not None:
        raise ValueError(f"{model.name} uses {model.kind}: max_rotation_error applies to RoPE models only")
    lengths = None if length is None else [length]
    if lengths is None and model.max_position_embeddings is not None:
        lengths = [model.max_position_embeddings]
    rows = audit_config(model, lengths, [dtype], recipes=[recipe], tolerance=tolerance, positions=False)
    if model.kind == "rope":
        bad = [r for r in rows if _fails(r.max_rotation_error, r.colliding_positions, r.cache_bound,  # type: ignore[arg-type]
                                         max_rotation_error, tolerance)]
        cols = [("layer", "layer_type")] * any(r.layer_type for r in rows) + [("recipe", "recipe")] + _ROPE_COLUMNS
        limit = _limit_text(max_rotation_error, tolerance, rows[0].cache_bound if rows else cache_rounding_bound(dtype))
    else:
        bad = [r for r in rows if r.verdict != "safe"]
        cols = [("recipe", "recipe"), ("dtype", "dtype"), ("length", "length"),
                ("min distinct", "min_distinct_biases"), ("max |err|", "max_abs_error"),
                ("max dP", "max_prob_change"), ("colliding", "colliding_positions"), ("verdict", "verdict")]
        limit = f"verdict safe (no colliding biases, bias error <= {tolerance:g} half-ulps)"
    if bad:
        raise AssertionError(
            f"{model.name} fails on recipe {recipe} in {get_format(dtype).name} (limit: {limit})\n\n"
            + _table([r.to_dict() for r in rows], cols) + "\n\n" + model.describe())


def assert_positions(length: int, dtype: str, *, exact: bool = True, max_run: int | None = None) -> None:
    """Fail unless position ids 0..length-1 survive a cast to ``dtype``.

    ``exact=True`` (default): every position keeps its value.  ``max_run=N``
    instead: at most N neighbouring positions share one value.  Overflow to
    inf always fails.

    >>> assert_positions(8192, "bfloat16", max_run=33)  # bf16 merges up to 33 neighbours at 8K
    """
    from .positions import audit_positions

    if max_run is not None and (isinstance(max_run, bool) or not isinstance(max_run, int) or max_run < 1):
        raise ValueError(f"max_run {max_run!r} must be an integer >= 1")
    (p,) = audit_positions([check_length(length)], [dtype])
    colliding = p.length - p.distinct_values
    if max_run is not None:
        failed, want = p.max_run > max_run or p.non_finite > 0, f"max run <= {max_run}, no overflow"
    elif exact:
        failed, want = p.exact_count < p.length, "every position exact"
    else:
        failed, want = p.non_finite > 0, "no overflow"
    if failed:
        row = {**p.to_dict(), "colliding": colliding}
        raise AssertionError(
            f"position ids 0..{p.length - 1} in {p.dtype} fail (want {want}): {colliding} positions collide with "
            f"their neighbour\n\n" + _table([row], [
                ("dtype", "dtype"), ("length", "length"), ("exact", "exact_count"), ("distinct", "distinct_values"),
                ("max run", "max_run"), ("colliding", "colliding"), ("1st inexact", "first_inexact"),
                ("non-finite", "non_finite")]))
