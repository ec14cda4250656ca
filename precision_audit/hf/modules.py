"""Live rotary modules: any module or callable that follows the rotary protocol, against its exact schedule.

The rope auditor models recipes; this module runs the real thing and holds it
against the same oracle.

* :func:`audit_rope_module`: any torch module or callable that follows the
  rotary protocol ``forward(x, position_ids) -> (cos, sin)`` (or Gemma's
  ``forward(x, position_ids, layer_type)``) is called for positions
  ``0..L-1`` in chunks with ``x`` in a dtype; its cos/sin are measured against
  the exact float64 angles of the schedule it is *meant* to implement (from
  its config, :func:`~precision_audit.config.schedule_from_config`, not from
  its possibly downcast buffer), and the rope auditor's presets for the same
  schedule, dtype and length say which code path its numbers match
  (``matches_recipe``).
* a model type's transformers classes: :mod:`.classes`.

A live module needs torch only; transformers is imported when a function
needs it (:func:`~precision_audit.hf._transformers.require_transformers`).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import ArgumentTypeError, check_callable, check_flag, check_int, check_path, describe
from ..rows import Row
from ..config import ModelConfig, load_config, load_config_dict, schedule_from_config
from ..verdicts import rope_verdict
from ..formats import get_format, spacing
from ..rope import (MAX_ROPE_LENGTH, PairError, audit, cache_rounding_bound, check_rope_lengths, exact_angles,
                    preset, wrap)
from ..rope.audit import default_chunk
from ..rope.pairs import check_distances
from ..rope.schedules import RopeSchedule
from .rotation import RotationErrors, rotation_pass

__all__ = [
    "DIAGNOSES",
    "ModuleRow",
    "RotationErrors",
    "audit_rope_module",
    "match_recipe",
    "module_bottom_line",
    "named_schedule",
    "reference_schedule",
    "rotation_pass",
]

F64 = npt.NDArray[np.float64]

# The order breaks ties between presets with equal figures: the benign explanation first.
_MATCH_ORDER = ("fp32", "lowp-inv-freq", "lowp", "fp64")
DIAGNOSES: dict[str, str] = {
    "fp32": "float32 until cos/sin, cast to {dtype} (fp32)",
    "lowp-inv-freq": "inv_freq buffer in {dtype} (lowp-inv-freq)",
    "lowp": "positions, inv_freq and angles in {dtype} (lowp)",
    "fp64": "float64 angles, cos/sin cast to {dtype} (fp64)",
}


# --------------------------------------------------------------------------- live modules


def _torch_dtype(dtype: Any) -> tuple[str, Any]:
    """A format name (or torch dtype) -> (canonical name, torch dtype)."""
    name = str(dtype).removeprefix("torch.")
    f = get_format(name)
    if f.torch_dtype is None:
        raise ValueError(f"torch has no dtype for {f.name}; a live module runs in a torch dtype")
    return f.name, f.torch_dtype


def _as_rows(t: Any, n: int, what: str) -> F64:
    """A module output (batch 1, n positions, width) as a float64 (n, width) array."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"the module returned {type(t).__name__} for {what}, not a tensor")
    a = t.detach().to(torch.float64).cpu().numpy()
    if a.ndim < 1 or a.size % n:
        raise ValueError(f"the module returned {what} of shape {tuple(t.shape)} for {n} positions")
    return a.reshape(n, -1)


def _layout(c: F64, nf: int) -> Callable[[F64], F64]:
    """Which columns hold the ``nf`` frequencies: ``[f, f]`` halves, ``f`` interleaved twice, or ``f`` once."""
    w = c.shape[1]
    if w == nf:
        return lambda a: a
    if w == 2 * nf:
        if np.array_equal(c[:, :nf], c[:, nf:], equal_nan=True):
            return lambda a: a[:, :nf]
        if np.array_equal(c[:, ::2], c[:, 1::2], equal_nan=True):
            return lambda a: a[:, ::2]
        raise ValueError(f"the module's {w} cos columns are neither [f, f] nor interleaved pairs")
    raise ValueError(f"the module returns {w} cos columns; the schedule from its config has {nf} frequencies")


def _buffer(module: Any, layer_type: str | None) -> Any:
    """The module's initial inverse-frequency buffer (``original_inv_freq`` if kept), or None."""
    prefix = f"{layer_type}_" if layer_type else ""
    for name in (f"{prefix}original_inv_freq", f"{prefix}inv_freq"):
        t = getattr(module, name, None)
        if t is not None and hasattr(t, "dtype") and getattr(t, "is_floating_point", lambda: False)():
            return t
    return None


def _check_buffer(module: Any, schedule: RopeSchedule, layer_type: str | None) -> str | None:
    """Compare the module's inv_freq buffer with the schedule; returns the buffer's format name.

    The buffer may be cast (``.to(bfloat16)``): it must then equal the
    schedule's float32 formula within two ulps of its own format.  A buffer
    further away implements another schedule, and every figure would be
    wrong: ValueError.
    """
    t = _buffer(module, layer_type)
    if t is None:
        return None
    import torch

    fmt, _ = _torch_dtype(t.dtype)
    buf = t.detach().to(torch.float64).cpu().numpy().reshape(-1)
    ref = schedule.inv_freq()
    if buf.shape != ref.shape:
        raise ValueError(f"the module's inv_freq has {buf.size} values; the schedule from its config has "
                         f"{ref.size} ({schedule.describe()})")
    tol = 2 * spacing(ref, fmt) + 1e-5 * np.abs(ref)
    bad = ~(np.abs(buf - ref) <= tol)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"the module's inv_freq[{i}] = {buf[i]!r} is not the schedule's {ref[i]!r} "
                         f"({schedule.describe()}): it implements another schedule")
    return fmt


def _call(module: Any, x: Any, pos: Any, layer_type: str | None) -> tuple[Any, Any]:
    import torch

    with torch.no_grad():
        out = module(x, pos) if layer_type is None else module(x, pos, layer_type)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise ValueError(f"the module returned {type(out).__name__}, not (cos, sin)")
    return out[0], out[1]


def _scale(module: Any, layer_type: str | None) -> float:
    name = f"{layer_type}_attention_scaling" if layer_type else "attention_scaling"
    s = getattr(module, name, None)
    try:
        s = float(s)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1.0
    return s if math.isfinite(s) and s > 0 else 1.0



class _Caller:
    """The module's stored cos/sin (its layout picked once) and their signed rotation errors for a range of
    positions; every call also holds the group's last position ``top - 1``, as one forward over the whole
    sequence does: dynamic and longrope modules pick their frequencies from the largest id."""

    def __init__(self, module: Any, tdt: Any, nf: int, layer_type: str | None, top: int, theta: F64) -> None:
        self.module, self.tdt, self.nf, self.layer_type, self.top, self.theta = module, tdt, nf, layer_type, top, theta
        self.pick: Callable[[F64], F64] | None = None

    def cos_sin(self, start: int, stop: int) -> tuple[F64, F64]:
        import torch

        n = stop - start
        pos = torch.cat([torch.tensor([self.top - 1]), torch.arange(start, stop)])[None]
        c, s = _call(self.module, torch.zeros(1, n + 1, 1, dtype=self.tdt), pos, self.layer_type)
        c, s = _as_rows(c, n + 1, "cos")[1:], _as_rows(s, n + 1, "sin")[1:]
        if self.pick is None:
            self.pick = _layout(c, self.nf)
        c, s = self.pick(c), self.pick(s)
        if s.shape != c.shape:
            raise ValueError(f"the module returned sin of {s.shape[1]} columns and cos of {c.shape[1]}")
        return c, s

    def signed(self, c: F64, s: F64, start: int, stop: int) -> F64:
        """wrap(atan2 - exact) of stored rows (the attention factor divided out); nan where not finite."""
        k = _scale(self.module, self.layer_type)
        with np.errstate(invalid="ignore", over="ignore"):
            return wrap(np.arctan2(s / k, c / k) - exact_angles(np.arange(start, stop), self.theta))

    def shifted(self, start: int, stop: int) -> F64:
        return self.signed(*self.cos_sin(start, stop), start, stop)


def _module_pass(module: Any, schedule: RopeSchedule, lengths: Sequence[int], dtype: Any, layer_type: str | None,
                 chunk: int | None, progress: Callable[[int], None] | None,
                 distances: Sequence[int] | None = ()) -> list[RotationErrors]:
    """One pass per frequency group over positions 0..L-1; prefix reductions give every length (and the pair
    errors at ``distances``, :class:`~precision_audit.rope.pairs.PairPass`: () none, None the defaults)."""
    _, tdt = _torch_dtype(dtype)
    nf = schedule.n_freq
    groups: dict[int | None, list[int]] = {}
    for L in lengths:
        groups.setdefault(schedule.frequency_key(L), []).append(L)
    chunk = default_chunk(nf) if chunk is None else chunk
    out: list[RotationErrors] = []
    # groups in ascending order: a dynamic module keeps the largest frequencies it has grown to
    for key, ls in sorted(groups.items(), key=lambda kv: max(kv[1])):
        caller = _Caller(module, tdt, nf, layer_type, max(ls), schedule.inv_freq(key))

        def block(start: int, stop: int, caller: _Caller = caller) -> tuple[F64, F64]:
            c, s = caller.cos_sin(start, stop)
            return np.concatenate([c, s], axis=1), caller.signed(c, s, start, stop)

        out += rotation_pass(block, nf, ls, chunk, shifted=caller.shifted, progress=progress, distances=distances,
                             frequencies=schedule.inv_freq(key))
    return sorted(out, key=lambda e: e.length)


@functools.lru_cache(maxsize=512)
def _preset_figures(schedule: RopeSchedule, dtype: str,
                    lengths: tuple[int, ...]) -> dict[str, dict[int, tuple[float, float]]]:
    """(max, mean) rotation error of each distinct rope preset at each length (cached per schedule)."""
    recs, seen = [], set()
    for name in _MATCH_ORDER:
        r = preset(name, dtype)
        key = (tuple(r.stages.values()), r.inv_freq_from)
        if key not in seen:  # float32: lowp and lowp-inv-freq are the fp32 recipe
            seen.add(key)
            recs.append(r)
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for row in audit(schedule, recs, lengths, distances=()):
        out.setdefault(row.recipe, {})[row.length] = (row.max_rotation_error, row.mean_rotation_error)
    return out


def match_recipe(schedule: RopeSchedule, dtype: str, length: int, max_rotation_error: float,
                 mean_rotation_error: float) -> tuple[str, str, float, float]:
    """The rope preset whose figures are closest: ``(name, diagnosis, its max, its mean)``.

    Distance: ``|ln(max / max_r)| + |ln(mean / mean_r)|`` over the presets
    run by the rope auditor for the same schedule, dtype and length (ties go
    to the benign explanation: fp32, lowp-inv-freq, lowp, fp64).

    >>> s = RopeSchedule(head_dim=64)
    >>> (row,) = audit(s, preset("lowp-inv-freq", "bf16"), 4096)
    >>> match_recipe(s, "bfloat16", 4096, row.max_rotation_error, row.mean_rotation_error)[:2]
    ('lowp-inv-freq', 'inv_freq buffer in bfloat16 (lowp-inv-freq)')
    """
    dtype = get_format(dtype).name
    figures = _preset_figures(schedule, dtype, (int(length),))
    tiny = 1e-300

    def dist(name: str) -> float:
        mx, mn = figures[name][length]
        return (abs(math.log(max(max_rotation_error, tiny) / max(mx, tiny)))
                + abs(math.log(max(mean_rotation_error, tiny) / max(mn, tiny))))

    best = min(figures, key=lambda n: (dist(n), _MATCH_ORDER.index(n)))
    return best, DIAGNOSES[best].format(dtype=dtype), *figures[best][length]


@dataclass(frozen=True)
class ModuleRow(Row):
    """Rotation error of a live rotary module at one context length (positions 0..length-1).

    Same metrics as the rope auditor's :class:`~precision_audit.rope.RopeRow`:
    rotation error of ``atan2(sin, cos)`` against the exact ``m * theta_i`` of
    ``schedule`` (rad, wrapped to [-pi, pi]; a non-finite value counts as pi),
    max and mean over positions and frequencies; ``colliding_positions``:
    positions whose whole cos/sin row equals the previous position's.
    ``matches_recipe`` is the rope preset with the closest figures (see
    :func:`match_recipe`; None if not computed), ``diagnosis`` says what it
    means, ``recipe_*`` are that preset's figures.  ``inv_freq_dtype`` is the
    format of the module's inverse-frequency buffer (None: none found).
    ``cache_bound`` is the rounding bound of ``dtype`` for the schedule's
    cos/sin scale (:func:`~precision_audit.rope.cache_rounding_bound`),
    ``ratio`` the max rotation error over it and ``verdict`` the config
    command's (:func:`precision_audit.verdicts.rope_verdict`: pairwise errors when measured).
    ``pair_errors``: the pairwise rotation errors at distances D
    (:class:`~precision_audit.rope.PairError`, as the rope auditor's).
    ``to_dict()`` names ``module_class`` ``class``.
    """

    model_type: str | None
    module_class: str
    layer_type: str | None
    dtype: str
    length: int
    cast_module: bool | None
    schedule: str
    inv_freq_dtype: str | None
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int
    matches_recipe: str | None = None
    diagnosis: str | None = None
    recipe_max_rotation_error: float | None = None
    recipe_mean_rotation_error: float | None = None
    cache_bound: float | None = None
    ratio: float | None = None
    verdict: str | None = None
    pair_errors: tuple[PairError, ...] = ()

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length {self.length!r} must be at least 1")
        if not 0 <= self.colliding_positions < self.length:
            raise ValueError(f"colliding_positions {self.colliding_positions!r} not in [0, {self.length})")

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {("class" if k == "module_class" else k): v for k, v in d.items()}


def reference_schedule(module: Any, schedule: Any = None, layer_type: str | None = None, *,
                       name: str = "schedule") -> RopeSchedule:
    """The float64 schedule a rotary module is *meant* to implement: ``schedule`` itself (a
    :class:`~precision_audit.rope.schedules.RopeSchedule`), or read from a :class:`~precision_audit.config.ModelConfig`,
    a config dict, a ``config.json`` path or a transformers config object; None: the module's own ``.config``.
    ``name``: the argument's name in error messages.

    >>> reference_schedule(None, {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}).head_dim
    64
    """
    if isinstance(schedule, RopeSchedule):
        return schedule
    if schedule is None:
        schedule = getattr(module, "config", None)
        if schedule is None:
            raise ValueError(f"{type(module).__name__} has no .config; pass its schedule (a RopeSchedule, a config "
                             "dict, a config.json path or a transformers config)")
    if isinstance(schedule, ModelConfig):
        return schedule.schedule_for(layer_type)
    if isinstance(schedule, (str, os.PathLike)):
        return load_config(check_path(schedule, name)).schedule_for(layer_type)
    if hasattr(schedule, "to_dict") and not isinstance(schedule, Mapping):
        # a transformers config object: the module's own config, read by attribute as transformers reads it
        # (its to_dict() drops per-layer attributes such as Gemma 4's global_head_dim)
        return schedule_from_config(schedule, layer_type)
    if isinstance(schedule, Mapping):
        return load_config_dict(schedule, name=type(module).__name__, source="config").schedule_for(layer_type)
    raise ArgumentTypeError(f"{name} {describe(schedule)} is not a RopeSchedule, ModelConfig, config dict or "
                            "config.json path")


def named_schedule(module: Any, schedule: Any, layer_type: str | None = None) -> RopeSchedule:
    """:func:`reference_schedule` of a ``schedule=`` argument: every ValueError names it (``schedule <value>: ...``).

    >>> named_schedule(None, {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}).head_dim
    64
    """
    try:
        return reference_schedule(module, schedule, layer_type, name="schedule")
    except ArgumentTypeError:
        raise
    except ValueError as e:
        if str(e).startswith("schedule "):
            raise
        raise ValueError(f"schedule {describe(schedule)}: {e}") from None


def _check_module(module: Any, layer_type: Any) -> None:
    """A callable module; ``layer_type`` None, or a string its forward takes as a third argument."""
    if not callable(module):
        raise ArgumentTypeError(f"module {describe(module)} is not callable: pass a rotary module "
                                "(forward(x, position_ids) -> (cos, sin))")
    if not (layer_type is None or isinstance(layer_type, str)):
        raise ArgumentTypeError(f"layer_type {describe(layer_type)} must be a string or None")
    if layer_type is None:
        return
    try:
        params = inspect.signature(getattr(module, "forward", module)).parameters.values()
    except (TypeError, ValueError):  # no signature to read: let the call tell
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 3 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise ValueError(f"layer_type {layer_type!r} given, but {type(module).__name__}.forward takes no layer_type")


def audit_rope_module(
    module: Any,
    schedule: Any,
    lengths: int | Iterable[int],
    *,
    dtype: Any = "bfloat16",
    layer_type: str | None = None,
    match: bool = True,
    model_type: str | None = None,
    cast_module: bool | None = None,
    chunk: int | None = None,
    progress: Callable[[int], None] | None = None,
    distances: int | Iterable[int] | None = None,
) -> list[ModuleRow]:
    """Audit a live rotary module (or callable) against the schedule it is meant to implement.

    ``schedule``: that schedule, or what gives it (:func:`reference_schedule`: a config dict, a
    ``config.json`` path, a transformers config; None: the module's ``.config``), never the module's
    possibly downcast buffer.
    ``module(x, position_ids)`` (or ``module(x, position_ids, layer_type)``)
    must return ``(cos, sin)`` of shape (1, n, w) with the schedule's
    ``n_freq`` frequencies in ``w = n_freq`` columns or twice that (halves
    ``[f, f]`` or interleaved pairs); ``x`` is a (1, n, 1) tensor in
    ``dtype`` (modules read its dtype and device only).  Positions
    ``0..max(lengths)-1`` go in chunks; each call also holds the last
    position, so dynamic and longrope modules pick the frequencies of the
    whole length.  The ``attention_scaling`` the module multiplies into
    cos/sin is divided out.  If the module has an ``inv_freq`` buffer it must
    hold the schedule's frequencies (in any format, within two of its ulps),
    else ValueError: the figures would measure the wrong schedule.
    ``match=True`` adds :func:`match_recipe`.  ``model_type`` and
    ``cast_module`` only label the rows.  ``distances``: the pair distances,
    as :func:`precision_audit.rope.audit` takes them (() for none).  Each
    position is asked for once (chunks of ``chunk`` positions; default about
    2**19 angles): for a distance above a chunk (the default L/2), a chunk D
    later comes right after its twin (:func:`rotation_pass`).  Each row carries
    the verdict of :mod:`precision_audit.verdicts`.

    >>> import torch
    >>> s = RopeSchedule(head_dim=8)
    >>> theta = torch.tensor(s.inv_freq_in("float32"), dtype=torch.float32)
    >>> def rotary(x, position_ids):  # the fp32 recipe, as a function
    ...     ang = position_ids[..., None].float() * theta
    ...     return ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    >>> (row,) = audit_rope_module(rotary, s, 1024)
    >>> row.matches_recipe, row.max_rotation_error < 0.005, row.verdict
    ('fp32', True, 'safe')
    """
    _check_module(module, layer_type)
    chunk = None if chunk is None else check_int(chunk, "chunk", minimum=1, maximum=MAX_ROPE_LENGTH)
    match = check_flag(match, "match")
    progress = check_callable(progress, "progress")
    if not (model_type is None or isinstance(model_type, str)):
        raise ArgumentTypeError(f"model_type {describe(model_type)} must be a string or None")
    if not (cast_module is None or isinstance(cast_module, bool)):
        raise ArgumentTypeError(f"cast_module {describe(cast_module)} must be True, False or None")
    schedule = reference_schedule(module, schedule, layer_type)
    lens = check_rope_lengths(lengths)
    asked = check_distances(distances, lens)
    name, _ = _torch_dtype(dtype)
    buf_fmt = _check_buffer(module, schedule, layer_type)
    errs = _module_pass(module, schedule, lens, name, layer_type, chunk, progress, asked)
    cls = module.__class__.__name__ if not inspect.isfunction(module) else module.__qualname__
    bound = cache_rounding_bound(name, schedule.cos_sin_scale)
    rows = []
    for e in errs:
        m: tuple[Any, ...] = (None, None, None, None)
        if match:
            m = match_recipe(schedule, name, e.length, e.max_rotation_error, e.mean_rotation_error)
        rows.append(ModuleRow(
            model_type=model_type, module_class=cls, layer_type=layer_type, dtype=name, length=e.length,
            cast_module=cast_module, schedule=schedule.describe(), inv_freq_dtype=buf_fmt,
            max_rotation_error=e.max_rotation_error, mean_rotation_error=e.mean_rotation_error,
            colliding_positions=e.colliding_positions, matches_recipe=m[0], diagnosis=m[1],
            recipe_max_rotation_error=m[2], recipe_mean_rotation_error=m[3], cache_bound=bound,
            ratio=e.max_rotation_error / bound,
            verdict=rope_verdict(e.max_rotation_error, e.colliding_positions, pair_errors=e.pair_errors),
            pair_errors=e.pair_errors,
        ))
    return rows



def _module_label(r: ModuleRow) -> str:
    lt = f" ({r.layer_type})" if r.layer_type else ""
    return f"{r.module_class}{lt} " + ("after module.to(dtype)" if r.cast_module else "as built")


def module_bottom_line(rows: Sequence[ModuleRow]) -> list[Any]:
    """The bottom line of live module rows: one :class:`~precision_audit.bottomline.Summary` per module (class,
    layer type, cast or not) and dtype, its path and label naming the module.

    The fix: for a module whose ``inv_freq`` buffer the cast downcast,
    :func:`precision_audit.fix.keep_rotary_fp32` before the cast; otherwise
    the fix of the preset its worst row matches (``matches_recipe``), if any.
    """
    from dataclasses import replace

    from ..bottomline import VERDICT_ORDER, bottom_line, fix_for

    if any(r.verdict is None for r in rows):
        raise ValueError("module rows need a verdict (rows of audit_rope_module)")
    groups: dict[tuple[str, str], list[ModuleRow]] = {}
    for r in rows:
        groups.setdefault((_module_label(r), r.dtype), []).append(r)
    out = []
    for s in bottom_line([{"path": k[0], "dtype": k[1], "length": r.length, "verdict": r.verdict}
                          for k, rs in groups.items() for r in rs]):
        group = groups[s.path, s.dtype]
        worst = max(group, key=lambda r: (VERDICT_ORDER.index(str(r.verdict)), -r.length))
        downcast = worst.cast_module and worst.inv_freq_dtype not in (None, "float32", "float64")
        fix = fix_for("transformers-cast") if downcast else fix_for(worst.matches_recipe or "")
        out.append(replace(s, fix=fix))
    return out
