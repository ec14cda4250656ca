"""Assertion helpers for your own pytest suite: guard a model's position code in CI.

Each helper audits one thing and returns None when it is fine; otherwise it
raises AssertionError whose message is a readable table of what broke (the
rows, their verdict and the limit they crossed), so a failing CI log says why.

* :func:`assert_rope_module`: a live rotary module (anything with
  ``forward(x, position_ids) -> (cos, sin)``, e.g. transformers'
  ``LlamaRotaryEmbedding``), called for positions 0..L-1 in chunks, against
  the exact float64 angles of the schedule its config describes;
* :func:`assert_config`: a model's ``config.json`` (or GGUF file, Hub id)
  through the tool's own schedules (:mod:`precision_audit.config`), on a
  recipe or on the code path of an inference stack (``stack=``);
* :func:`assert_rope`: a schedule and a RoPE recipe or stack (``stack=``);
* :func:`assert_positions`: position ids cast to a format;
* :func:`assert_rotary_kernel`: an apply-style rotary kernel (``apply(q, k, positions) -> (q_rot, k_rot)``)
  run on unit vectors (:func:`precision_audit.audit_rotary_kernel`).

The default limit is the verdict rule of :mod:`precision_audit.verdicts`: a
row passes when it is ``safe`` (no collision, every pairwise rotation error
below pi/8, the error the probe model starts to notice).  Give
``max_rotation_error`` (rad) to set your own limit on the absolute error
instead; collisions and a lost phase (>= pi/2) always fail.

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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


from .checks import ArgumentTypeError, check_flag, check_int, check_length, check_number, check_path, describe
from .config import FALLBACK_CONTEXT, ModelConfig, load_config_dict, load_model
from .verdicts import DEFAULT_TOLERANCE, NOTICED, PHASE_LOST, rope_verdict
from .formats import get_format
from .rope.schedules import RopeSchedule, check_schedule

__all__ = [
    "assert_config",
    "assert_positions",
    "assert_rope",
    "assert_rope_module",
    "assert_rotary_kernel",
]


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, Any]]) -> str:
    from .render import table

    return table(rows, columns)


def _limit_text(max_rotation_error: float | None, tolerance: float, bound: float) -> str:
    if max_rotation_error is not None:
        return f"max rotation error <= {max_rotation_error:.4g} rad, no colliding positions"
    return f"verdict safe: no colliding positions, pairwise rotation errors < pi/8 = {NOTICED:.4g} rad"


def _fails(max_err: float, colliding: int, bound: float, max_rotation_error: float | None, tolerance: float,
           pair_errors: Sequence[Any] = ()) -> bool:
    if colliding > 0 or not math.isfinite(max_err) or max_err >= PHASE_LOST:
        return True
    if max_rotation_error is not None:
        return max_err > max_rotation_error
    return rope_verdict(max_err, colliding, pair_errors=pair_errors) != "safe"


def _check_limits(max_rotation_error: float | None, tolerance: float) -> tuple[float | None, float]:
    """``max_rotation_error``: None or a number > 0 (rad; inf leaves only collisions and a lost phase);
    ``tolerance``: a finite number > 0 (times the cache bound)."""
    if max_rotation_error is not None:
        max_rotation_error = check_number(max_rotation_error, "max_rotation_error", positive=True, finite=False)
    return max_rotation_error, check_number(tolerance, "tolerance", positive=True)


def _check_text(value: Any, name: str, *, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise ArgumentTypeError(f"{name} {describe(value)} must be a string" + (" or None" if optional else ""))


_ROPE_COLUMNS: list[tuple[str, Any]] = [
    ("dtype", "dtype"), ("length", "length"), ("max rot err", "max_rotation_error"),
    ("mean rot err", "mean_rotation_error"), ("x cache bound", lambda r: f"{r['ratio']:.3g}"),
    ("colliding", "colliding_positions"), ("verdict", "verdict"),
]


# --------------------------------------------------------------------------- live modules


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

    Measured by :func:`precision_audit.hf.audit_rope_module` (pairwise errors at the default distances)
    against the float64 schedule of ``config`` (:func:`precision_audit.hf.reference_schedule`; default
    ``module.config``).  Passes when the verdict is ``safe`` (or, with ``max_rotation_error``, when the max
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
    rotary module Rotary fails at length 8192 in bfloat16 (limit: verdict safe: no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad)
    """
    from .hf import audit_rope_module, reference_schedule

    max_rotation_error, tolerance = _check_limits(max_rotation_error, tolerance)
    length = check_length(length)
    schedule = reference_schedule(module, config, layer_type, name="config")
    (a,) = audit_rope_module(module, schedule, length, dtype=dtype, layer_type=layer_type, match=False)
    if _fails(a.max_rotation_error, a.colliding_positions, a.cache_bound or 0.0, max_rotation_error, tolerance,
              a.pair_errors):
        raise AssertionError(
            f"rotary module {a.module_class} fails at length {a.length} in {a.dtype} "
            f"(limit: {_limit_text(max_rotation_error, tolerance, a.cache_bound or 0.0)})\n\n"
            + _table([a.to_dict()], _ROPE_COLUMNS)
            + f"\n\nreference: {schedule.describe()} (float64, exact m * theta_i); errors in rad, pi = phase lost."
            + "\nA float32 inv_freq buffer downcast by model.to(dtype) gives errors like these; keep it float32 "
              "(or rebuild it) after casting the model.")


def assert_rotary_kernel(
    apply: Any,
    schedule: Any,
    *,
    length: int = 1 << 20,
    dtype: str = "bfloat16",
    layout: str = "neox",
    cache: Any = None,
    tensors: str = "torch",
    max_rotation_error: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Fail unless an apply-style rotary kernel rotates accurately at positions 0..length-1 in ``dtype``.

    Measured by :func:`precision_audit.audit_rotary_kernel` (unit vectors per frequency pair in ``layout``,
    ``neox`` or ``gptj``; ``cache`` and ``tensors`` as it takes them; default length 1M positions) against
    the float64 ``schedule`` (a :class:`~precision_audit.rope.RopeSchedule` or a config).  Passes when the
    verdict is ``safe`` (or, with ``max_rotation_error``, when the max rotation error is at most that many
    rad) and no position collides.  A kernel that raises or does not rotate the layout's pairs: ValueError.

    >>> import torch
    >>> s = RopeSchedule(head_dim=64)
    >>> def rope(q, k, positions, pos_dtype=torch.int64):  # NeoX, float32 angles
    ...     a = positions.to(pos_dtype)[:, None].float() * torch.tensor(s.inv_freq_in("float32"))
    ...     cos, sin = torch.cat((a, a), -1).cos().to(q.dtype), torch.cat((a, a), -1).sin().to(q.dtype)
    ...     half = lambda x: torch.cat((-x[:, 32:], x[:, :32]), -1)
    ...     return q * cos + half(q) * sin, k * cos + half(k) * sin
    >>> assert_rotary_kernel(rope, s, length=32768)
    >>> try:  # positions rounded to bfloat16 (Baichuan's bug)
    ...     assert_rotary_kernel(lambda q, k, p: rope(q, k, p, torch.bfloat16), s, length=32768)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    rotary kernel <lambda> (neox) fails at length 32768 in bfloat16 (limit: verdict safe: no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad)
    """
    from .trace import audit_rotary_kernel

    max_rotation_error, tolerance = _check_limits(max_rotation_error, tolerance)
    length = check_length(length)
    (r,) = audit_rotary_kernel(apply, schedule, length, dtype, layout=layout, cache=cache, tensors=tensors)
    if _fails(r.max_rotation_error, r.colliding_positions, r.cache_bound, max_rotation_error, tolerance,
              r.pair_errors):
        cols = _ROPE_COLUMNS[:-1] + [("first nonfinite", lambda d: "-" if d["first_nonfinite"] is None
                                      else d["first_nonfinite"])]
        cols += [(f"pair err D={p.distance}", (lambda v: lambda _: f"{v:.3g}")(p.max_rotation_error))
                 for p in r.pair_errors] + [_ROPE_COLUMNS[-1]]
        raise AssertionError(
            f"rotary kernel {r.kernel} ({r.layout}) fails at length {r.length} in {r.dtype} "
            f"(limit: {_limit_text(max_rotation_error, tolerance, r.cache_bound)})\n\n"
            + _table([r.to_dict()], cols)
            + f"\n\nreference: {r.schedule} (float64, exact m * theta_i); angles read from the rotated (1, 0) "
              "pairs of q; errors in rad, pi = phase lost."
            + "\nColliding positions mean the kernel's positions were rounded (a bfloat16 or float16 arange or "
              "cast): keep positions integer or float32 and build the angles in float32.")


# --------------------------------------------------------------------------- schedules and configs


def _fix_line(path: str) -> str:
    """"Fix: ..." for a stack or preset whose bottom line names one, else empty."""
    from .bottomline import fix_for

    fix = fix_for(path)
    return f"\nFix: {fix}." if fix else ""


# the path judged when none is named: the code the model runs as built
_DEFAULT_PATH = {"rope": "fp32", "alibi": "fp32", "relative": "transformers", "learned": "mask-int64"}


def _recipe_or_stack(recipe: Any, stack: Any, default: str | None) -> tuple[str | None, str | None]:
    """Check that one of ``recipe`` / ``stack`` is given (``recipe`` falls back to ``default``), not both."""
    _check_text(stack, "stack", optional=True)
    if stack is not None and recipe is not None:
        raise ValueError(f"give recipe {describe(recipe)} or stack {stack!r}, not both")
    if stack is None and recipe is None:
        if default is None:
            raise ValueError("give a recipe (a preset name or a Recipe) or a stack name")
        recipe = default
    return recipe, stack


def assert_rope(
    schedule: RopeSchedule,
    recipe: Any = None,
    length: int | None = None,
    *,
    stack: str | None = None,
    dtype: str = "bfloat16",
    max_rotation_error: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_pair_error: float | None = None,
    distances: int | Iterable[int] | None = None,
) -> None:
    """Fail unless a RoPE code path is accurate at ``length``: a recipe (a preset name or a
    :class:`~precision_audit.rope.Recipe`) or the code path of ``stack`` (a name of
    :data:`precision_audit.rope.STACKS`: vllm, llama.cpp-cpu, ...; give one of the two).

    ``max_pair_error`` (rad): also fail when the pairwise rotation error between
    positions D apart (what attention sees; :mod:`precision_audit.rope.pairs`)
    exceeds it at a distance of ``distances`` (as :func:`~precision_audit.rope.audit`
    takes them; default 1, 16, 256, 4096 and L/2).  The default verdict judges
    those pairwise errors too.

    >>> assert_rope(RopeSchedule(head_dim=128), "fp32", 32768)
    >>> assert_rope(RopeSchedule(head_dim=128), length=32768, stack="llama.cpp-cpu")
    >>> try:
    ...     assert_rope(RopeSchedule(head_dim=128), "fp32", 32768, max_rotation_error=1e-3)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    RoPE recipe fp32 fails at length 32768 in bfloat16 (limit: max rotation error <= 0.001 rad, no colliding positions)
    >>> assert_rope(RopeSchedule(head_dim=128), "fp32", 32768, max_pair_error=0.01)
    >>> try:
    ...     assert_rope(RopeSchedule(head_dim=128), "fp32", 32768, max_pair_error=0.005, distances=[1, 256])
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    RoPE recipe fp32 fails at length 32768 in bfloat16 (limit: verdict safe: no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad; pairwise error <= 0.005 rad at D = 1, 256)
    >>> try:
    ...     assert_rope(RopeSchedule(head_dim=128), length=32768, stack="transformers-cast")
    ... except AssertionError as e:
    ...     lines = str(e).splitlines()
    >>> print(lines[0]); print(lines[-1])
    RoPE stack transformers-cast fails at length 32768 in bfloat16 (limit: verdict safe: no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad)
    Fix: call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype).
    """
    from .rope import Recipe, audit, preset
    from .rope import stack as stack_recipe

    max_rotation_error, tolerance = _check_limits(max_rotation_error, tolerance)
    if max_pair_error is not None:
        max_pair_error = check_number(max_pair_error, "max_pair_error", positive=True)
    check_schedule(schedule)
    recipe, stack = _recipe_or_stack(recipe, stack, None)
    if length is None:
        raise ArgumentTypeError("length must be given (the context length to check)")
    if stack is not None:
        rec = stack_recipe(stack, dtype, schedule)
    elif isinstance(recipe, (str, Recipe)):
        rec = recipe if isinstance(recipe, Recipe) else preset(recipe, dtype)
    else:
        raise ArgumentTypeError(f"recipe {describe(recipe)} must be a preset name or a Recipe")
    (r,) = audit(schedule, rec, [check_length(length)], distances=distances)
    pairs_fail = max_pair_error is not None and any(p.max_rotation_error > max_pair_error for p in r.pair_errors)
    if _fails(r.max_rotation_error, r.colliding_positions, r.cache_bound, max_rotation_error, tolerance,
              r.pair_errors) or pairs_fail:
        row = {**r.to_dict(), "ratio": r.max_rotation_error / r.cache_bound,
               "verdict": r.verdict}
        what = "stack" if stack is not None else "recipe"
        limit = _limit_text(max_rotation_error, tolerance, r.cache_bound)
        cols = [(what, "recipe")] + _ROPE_COLUMNS
        if max_pair_error is not None:
            limit += (f"; pairwise error <= {max_pair_error:.4g} rad at D = "
                      + ", ".join(str(p.distance) for p in r.pair_errors))
            cols += [(f"pair err D={p.distance}", (lambda v: lambda _: v)(p.max_rotation_error))
                     for p in r.pair_errors]
        raise AssertionError(
            f"RoPE {what} {rec.name} fails at length {r.length} in {r.dtype} (limit: {limit})\n\n"
            + _table([row], cols)
            + f"\n\n{schedule.describe()}; stages: "
            + ", ".join(f"{k} {v}" for k, v in rec.how.items())
            + (_fix_line(rec.name) if isinstance(recipe, str) or stack is not None else ""))


def _load(path: Any) -> ModelConfig:
    """A ModelConfig, a config dict, or what :func:`precision_audit.config.load_model` reads (a config.json or
    its folder, a .gguf file, a Hub id)."""
    if isinstance(path, ModelConfig):
        return path
    if isinstance(path, Mapping):
        return load_config_dict(path)
    if isinstance(path, (str, os.PathLike)):
        return load_model(check_path(path, "path"))
    raise ArgumentTypeError(f"path {describe(path)} must be a config.json path, a config dict or a ModelConfig")


def assert_config(
    path: Any,
    *,
    length: int | None = None,
    dtype: str = "bfloat16",
    recipe: str | None = None,
    stack: str | None = None,
    max_rotation_error: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Fail unless a model is safe on one code path: a recipe or a stack.

    ``path``: a ``config.json`` path (or its folder), a ``.gguf`` file, a Hub
    id, a config dict or a ModelConfig.  ``length`` defaults to the config's
    context (:data:`~precision_audit.config.FALLBACK_CONTEXT` when it declares
    none); ``recipe`` is a RoPE preset or an ALiBi recipe (default ``fp32``,
    which exists for both), a relative-bucket / sinusoid path (default
    ``transformers``) or a learned-id path (default ``mask-int64``: OPT's ids
    from an int64 mask); ``stack`` instead judges that inference stack's
    code path (RoPE models; see :data:`precision_audit.rope.STACKS`).  Every
    layer type's schedule is checked.  ``max_rotation_error`` applies to RoPE
    models.

    >>> llama2 = {"_name_or_path": "meta-llama/Llama-2-7b-hf", "model_type": "llama", "hidden_size": 4096,
    ...           "num_attention_heads": 32, "max_position_embeddings": 4096}  # its config.json, shortened
    >>> assert_config(llama2)
    >>> assert_config(llama2, stack="vllm")
    >>> try:
    ...     assert_config(llama2, recipe="lowp-inv-freq")
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    meta-llama/Llama-2-7b-hf fails on recipe lowp-inv-freq in bfloat16 (limit: verdict safe: no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad)
    >>> try:
    ...     assert_config(llama2, stack="transformers-cast")
    ... except AssertionError as e:
    ...     lines = str(e).splitlines()
    >>> print(lines[0]); print(lines[-1])
    meta-llama/Llama-2-7b-hf fails on stack transformers-cast in bfloat16 (limit: verdict safe: no colliding positions, pairwise rotation errors < pi/8 = 0.3927 rad)
    Fix: call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype).
    """
    from .config import audit_config
    from .rope import cache_rounding_bound

    max_rotation_error, tolerance = _check_limits(max_rotation_error, tolerance)
    _check_text(recipe, "recipe", optional=True)
    if length is not None:
        length = check_length(length)
    model = _load(path)
    recipe, stack = _recipe_or_stack(recipe, stack, _DEFAULT_PATH.get(model.kind, "fp32"))
    if model.kind != "rope" and max_rotation_error is not None:
        raise ValueError(f"{model.name} uses {model.kind}: max_rotation_error applies to RoPE models only")
    lengths = [length if length is not None else model.max_position_embeddings or FALLBACK_CONTEXT]
    if stack is not None:
        rows = audit_config(model, lengths, [dtype], stacks=[stack], tolerance=tolerance, positions=False)
    else:
        rows = audit_config(model, lengths, [dtype], recipes=[str(recipe)], tolerance=tolerance, positions=False)
    if model.kind == "rope":
        bad = [r for r in rows if _fails(r.max_rotation_error, r.colliding_positions, r.cache_bound,  # type: ignore[arg-type]
                                         max_rotation_error, tolerance, r.pair_errors)]
        what = "stack" if stack is not None else "recipe"
        cols = [("layer", "layer_type")] * any(r.layer_type for r in rows) + [(what, "recipe")] + _ROPE_COLUMNS
        limit = _limit_text(max_rotation_error, tolerance, rows[0].cache_bound if rows else cache_rounding_bound(dtype))
    elif model.kind == "alibi":
        bad = [r for r in rows if r.verdict != "safe"]
        cols = [("recipe", "recipe"), ("dtype", "dtype"), ("length", "length"),
                ("min distinct", "min_distinct_biases"), ("max |err|", "max_abs_error"),
                ("max dP", "max_prob_change"), ("colliding", "colliding_positions"), ("verdict", "verdict")]
        limit = f"verdict safe (no colliding biases, bias error <= {tolerance:g} half-ulps)"
    else:
        bad = [r for r in rows if r.verdict != "safe"]
        cols = [("path", "recipe"), ("side", "layer_type"), ("dtype", "dtype"), ("length", "length"),
                ("changed", "changed"), ("first changed", "first_changed"), ("verdict", "verdict")]
        limit = "verdict safe (every bucket, row or position id exact)"
    if bad:
        path_name = stack if stack is not None else str(recipe)
        raise AssertionError(
            f"{model.name} fails on {'stack' if stack is not None else 'recipe'} {path_name} in "
            f"{get_format(dtype).name} (limit: {limit})\n\n"
            + _table([r.to_dict() for r in rows], cols) + "\n\n" + model.describe()
            + (_fix_line(path_name) if model.kind == "rope" else ""))


def assert_positions(length: int, dtype: str, *, exact: bool = True, max_run: int | None = None) -> None:
    """Fail unless position ids 0..length-1 survive a cast to ``dtype``.

    ``exact=True`` (default): every position keeps its value.  ``max_run=N``
    instead: at most N neighbouring positions share one value.
    ``exact=False`` (and no ``max_run``): positions may round onto their
    neighbours, but none may overflow.  Overflow always fails: a position
    that rounds beyond the format's largest finite value becomes inf or nan,
    or, in formats without either (float4, float6), saturates to that largest
    value, which is as wrong (float4_e2m1fn stores 7..99 all as 6).

    >>> assert_positions(8192, "bfloat16", max_run=33)  # bf16 merges up to 33 neighbours at 8K
    >>> try:
    ...     assert_positions(100, "float4_e2m1fn", exact=False)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    position ids 0..99 in float4_e2m1fn fail (want no overflow): 93 positions (7..99) overflow (saturate to 6)
    """
    from .positions import audit_positions

    exact = check_flag(exact, "exact")
    if max_run is not None:
        max_run = check_int(max_run, "max_run", minimum=1)
    length = check_length(length)
    f = get_format(dtype)
    (p,) = audit_positions([length], [f])
    colliding = p.length - p.distinct_values
    overflowing = max(p.length - f.overflow_integer, 0)  # they round beyond max_finite: inf, nan or saturated
    if max_run is not None:
        failed, want = p.max_run > max_run or overflowing > 0, f"max run <= {max_run}, no overflow"
    elif exact:
        failed, want = p.exact_count < p.length, "every position exact"
    else:
        failed, want = overflowing > 0, "no overflow"
    if failed:
        reasons = []
        if max_run is not None and p.max_run > max_run:
            reasons.append(f"up to {p.max_run} neighbouring positions share one value")
        elif max_run is None and exact and colliding:
            reasons.append(f"{colliding} positions collide with their neighbour")
        if overflowing:
            to = {"inf": "inf", "nan": "nan", "saturate": f"saturate to {f.max_finite:g}"}[f.overflow]
            reasons.append(f"{overflowing} positions ({f.overflow_integer}..{p.length - 1}) overflow ({to})")
        row = {**p.to_dict(), "colliding": colliding, "overflowing": overflowing}
        raise AssertionError(
            f"position ids 0..{p.length - 1} in {p.dtype} fail (want {want}): " + "; ".join(reasons) + "\n\n"
            + _table([row], [
                ("dtype", "dtype"), ("length", "length"), ("exact", "exact_count"), ("distinct", "distinct_values"),
                ("max run", "max_run"), ("colliding", "colliding"), ("1st inexact", "first_inexact"),
                ("overflowing", "overflowing")]))
