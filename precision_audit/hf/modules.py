"""Audit the code a model really runs: live rotary modules, every rotary class of transformers, ALiBi builders.

The rope auditor models recipes; this module runs the real thing and holds it
against the same oracle.

* :func:`audit_rope_module`: any torch module or callable that follows the
  rotary protocol ``forward(x, position_ids) -> (cos, sin)`` (or Gemma's
  ``forward(x, position_ids, layer_type)``) is called for positions
  ``0..L-1`` in chunks with ``x`` in a dtype; its cos/sin are measured against
  the exact float64 angles of the schedule it is *meant* to implement (from
  its config, :func:`schedule_from_config`, not from its possibly downcast
  buffer), and the rope auditor's presets for the same schedule, dtype and
  length say which code path its numbers match (``matches_recipe``).
* :func:`build_rotary_module` / :func:`audit_model_type`: a model type's
  rotary class built from its default config (or a ``config.json``), no
  weights, optionally ``.to(dtype)`` as ``model.to(dtype)`` does.
* :func:`scan`: every ``*RotaryEmbedding`` class of the installed
  transformers, as built and after the cast, with a verdict per class.
* :func:`audit_alibi_builder`: Bloom's, Falcon's and MPT's ALiBi builders,
  side by side with the alibi auditor's recipe that matches them.

transformers is an optional dependency (``pip install 'precision-audit[hf]'``),
imported only when a function needs it; a live module needs torch only.

>>> s = schedule_from_config({"hidden_size": 4096, "num_attention_heads": 32,
...                           "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})
>>> s.head_dim, s.base
(128, 500000.0)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import os
import pkgutil
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from .._common import Row
from ..formats import get_format, round_to, spacing
from ..rope import audit, check_rope_lengths, exact_angles, preset, wrap
from ..schedules import RopeSchedule, schedule_from_rope_parameters

__all__ = [
    "ALIBI_BUILDERS",
    "DIAGNOSES",
    "HF_INSTALL",
    "VERDICTS",
    "AlibiBuilderRow",
    "ModuleRow",
    "ScanRow",
    "TransformersMissing",
    "audit_alibi_builder",
    "audit_model_type",
    "audit_rope_module",
    "build_rotary_module",
    "damage_threshold",
    "find_rotary_classes",
    "match_recipe",
    "require_transformers",
    "rotary_classes",
    "scan",
    "schedule_from_config",
]

F64 = npt.NDArray[np.float64]
HF_INSTALL = "pip install 'precision-audit[hf]'"

# The order breaks ties between presets with equal figures: the benign explanation first.
_MATCH_ORDER = ("fp32", "lowp-inv-freq", "lowp", "fp64")
DIAGNOSES: dict[str, str] = {
    "fp32": "float32 until cos/sin, cast to {dtype} (fp32)",
    "lowp-inv-freq": "inv_freq buffer in {dtype} (lowp-inv-freq)",
    "lowp": "positions, inv_freq and angles in {dtype} (lowp)",
    "fp64": "float64 angles, cos/sin cast to {dtype} (fp64)",
}
VERDICTS: tuple[str, ...] = ("safe", "damaged by the cast", "damaged as built")


class TransformersMissing(ImportError):
    """transformers is not installed (it is the optional extra ``[hf]``)."""


def require_transformers() -> Any:
    """Import transformers, or raise :class:`TransformersMissing` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise TransformersMissing(f"this command needs transformers: {HF_INSTALL}") from None
    return transformers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence warnings and transformers' logger while building configs and modules."""
    tf_logging = None
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as tf_logging  # type: ignore[no-redef]
    level = tf_logging.get_verbosity() if tf_logging else None
    if tf_logging:
        tf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if tf_logging and level is not None:
            tf_logging.set_verbosity(level)


# --------------------------------------------------------------------------- config -> schedule


def _get(config: Any, key: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def _is_per_layer(params: Mapping[str, Any]) -> bool:
    return bool(params) and all(v is None or isinstance(v, Mapping) for v in params.values())


_NOT_ROTARY = ("llama_4_scaling_beta", "max_position_embeddings")
_SCHEDULE_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "factor",
                  "original_max_position_embeddings",
                  "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                  "attention_factor", "truncate", "short_factor", "long_factor"}


def schedule_from_config(config: Any, layer_type: str | None = None) -> RopeSchedule:
    """The RoPE schedule a model config declares (a transformers config object or a ``config.json`` dict).

    head_dim: ``qk_rope_head_dim`` (DeepSeek's rotated part), else
    ``head_dim``, else ``hidden_size // num_attention_heads``; with a partial
    rotary factor, ``head_dim`` first (the factor applies to it) (for a
    per-layer-type config, the layer type's own config, e.g. Gemma 4's
    ``global_head_dim``); rope parameters: ``rope_parameters`` (transformers 5
    folds ``rope_theta``, ``rope_scaling`` and ``partial_rotary_factor`` into
    it), else the legacy ``rope_scaling`` with ``rope_theta`` (default 10000,
    transformers' default); per-layer-type parameters (Gemma) need
    ``layer_type``.  ``partial_rotary_factor`` (or legacy ``rotary_pct``),
    ``max_position_embeddings`` and ``original_max_position_embeddings`` are
    passed to :func:`~precision_audit.schedules.schedule_from_rope_parameters`.

    >>> cfg = {"head_dim": 256, "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
    ...        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    >>> schedule_from_config(cfg, "sliding_attention").base
    10000.0
    >>> schedule_from_config(cfg)
    Traceback (most recent call last):
    ...
    ValueError: the config has rope parameters per layer type (full_attention, sliding_attention); pass a layer type
    """
    params = _get(config, "rope_parameters")
    if params is None:
        params = _get(config, "rope_scaling")
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(f"rope parameters {params!r} must be a mapping")
    params = dict(params or {})
    sub = config
    if _is_per_layer(params):
        if layer_type is None:
            raise ValueError(f"the config has rope parameters per layer type ({', '.join(params)}); pass a layer type")
        if layer_type not in params:
            raise ValueError(f"unknown layer type {layer_type!r}; the config has {', '.join(params)}")
        if params[layer_type] is None:
            raise ValueError(f"layer type {layer_type!r} has no rope parameters (no rotary embedding)")
        params = dict(params[layer_type])
        per_layer = _get(config, "per_layer_config")
        if per_layer is not None:
            with contextlib.suppress(KeyError, TypeError):
                sub = per_layer[layer_type]
    elif layer_type is not None:
        raise ValueError(f"layer type {layer_type!r} given, but the config has one set of rope parameters")
    if "mrope_section" in params:
        raise ValueError("multimodal rope (mrope_section): 3-D position ids, not the 1-D rotary protocol")
    if params.get("rope_type", params.get("type")) == "axial":
        raise ValueError("axial (2-D vision) rope: positions are (row, column) pairs, not the 1-D rotary protocol")
    # keys transformers itself declares as not part of the rotary frequencies (ignored at rope validation),
    # e.g. Ministral 3's llama_4_scaling_beta (a query scale in attention); a copy of max_position_embeddings
    ignored = (set(_get(config, "ignore_keys_at_rope_validation") or ()) | set(_NOT_ROTARY)) - _SCHEDULE_KEYS
    max_pos = _get(config, "max_position_embeddings") or params.get("max_position_embeddings")
    params = {k: v for k, v in params.items() if k not in ignored}
    prf = params.get("partial_rotary_factor") or _get(config, "partial_rotary_factor") or _get(config, "rotary_pct")
    # a partial rotary factor applies to head_dim (transformers' rule: Mistral 4 rotates 0.5 x 128 = its
    # qk_rope_head_dim); without one, DeepSeek's qk_rope_head_dim is the rotated part of a wider head
    head_dim = _get(sub, "head_dim") if prf else (_get(sub, "qk_rope_head_dim") or _get(sub, "head_dim"))
    if not head_dim:
        hidden, heads = _get(sub, "hidden_size"), _get(sub, "num_attention_heads")
        if not hidden or not heads:
            raise ValueError("the config gives no head_dim and no hidden_size / num_attention_heads")
        head_dim = hidden // heads
    base = _get(config, "rope_theta")
    return schedule_from_rope_parameters(
        params,
        head_dim=head_dim,
        base=10000.0 if base is None else base,
        max_position_embeddings=max_pos,
        original_max_position_embeddings=_get(config, "original_max_position_embeddings"),
        partial_rotary_factor=prf,
    )


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


@dataclass(frozen=True)
class _Errors:
    length: int
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int


def _module_pass(module: Any, schedule: RopeSchedule, lengths: Sequence[int], dtype: Any, layer_type: str | None,
                 chunk_elems: int, progress: Callable[[int], None] | None) -> list[_Errors]:
    """One pass per frequency group over positions 0..L-1; prefix reductions give every length."""
    import torch

    _, tdt = _torch_dtype(dtype)
    nf = schedule.n_freq
    groups: dict[int | None, list[int]] = {}
    for L in lengths:
        groups.setdefault(schedule.frequency_key(L), []).append(L)
    chunk = max(256, chunk_elems // max(nf, 1))
    out: list[_Errors] = []
    # groups in ascending order: a dynamic module keeps the largest frequencies it has grown to
    for key, ls in sorted(groups.items(), key=lambda kv: max(kv[1])):
        theta = schedule.inv_freq(key)
        top = max(ls)
        worst, total, collisions = 0.0, 0.0, 0
        last: F64 | None = None
        pick: Callable[[F64], F64] | None = None
        start = 0
        for L in sorted(ls):
            while start < L:
                stop = min(L, start + chunk)
                n = stop - start
                # every call also holds the group's last position, as one forward over the whole
                # sequence does: dynamic and longrope modules pick their frequencies from the largest id
                pos = torch.cat([torch.tensor([top - 1]), torch.arange(start, stop)])[None]
                c, s = _call(module, torch.zeros(1, n + 1, 1, dtype=tdt), pos, layer_type)
                c, s = _as_rows(c, n + 1, "cos")[1:], _as_rows(s, n + 1, "sin")[1:]
                if pick is None:
                    pick = _layout(c, nf)
                c, s = pick(c), pick(s)
                if s.shape != c.shape:
                    raise ValueError(f"the module returned sin of {s.shape[1]} columns and cos of {c.shape[1]}")
                rows = np.concatenate([c, s], axis=1)
                prev = rows if last is None else np.concatenate([last[None, :], rows])
                same = (prev[1:] == prev[:-1]) | (np.isnan(prev[1:]) & np.isnan(prev[:-1]))
                collisions += int(np.count_nonzero(same.all(axis=1)))
                last = rows[-1].copy()
                k = _scale(module, layer_type)
                with np.errstate(invalid="ignore", over="ignore"):
                    err = np.abs(wrap(np.arctan2(s / k, c / k) - exact_angles(np.arange(start, stop), theta)))
                err[~np.isfinite(err)] = math.pi
                worst, total = max(worst, float(err.max())), total + float(err.sum())
                if progress is not None:
                    progress(n)
                start = stop
            out.append(_Errors(L, worst, total / (L * nf), collisions))
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
    for row in audit(schedule, recs, lengths):
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

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"length {self.length!r} must be at least 1")
        if not 0 <= self.colliding_positions < self.length:
            raise ValueError(f"colliding_positions {self.colliding_positions!r} not in [0, {self.length})")

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {("class" if k == "module_class" else k): v for k, v in d.items()}


def audit_rope_module(
    module: Any,
    schedule: RopeSchedule,
    lengths: int | Iterable[int],
    *,
    dtype: Any = "bfloat16",
    layer_type: str | None = None,
    match: bool = True,
    model_type: str | None = None,
    cast_module: bool | None = None,
    chunk_elems: int = 2**19,
    progress: Callable[[int], None] | None = None,
) -> list[ModuleRow]:
    """Audit a live rotary module (or callable) against the schedule it is meant to implement.

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
    ``cast_module`` only label the rows.

    >>> import torch
    >>> s = RopeSchedule(head_dim=8)
    >>> theta = torch.tensor(s.inv_freq_in("float32"), dtype=torch.float32)
    >>> def rotary(x, position_ids):  # the fp32 recipe, as a function
    ...     ang = position_ids[..., None].float() * theta
    ...     return ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    >>> (row,) = audit_rope_module(rotary, s, 1024)
    >>> row.matches_recipe, row.max_rotation_error < 0.005
    ('fp32', True)
    """
    lens = check_rope_lengths(lengths)
    name, _ = _torch_dtype(dtype)
    buf_fmt = _check_buffer(module, schedule, layer_type)
    errs = _module_pass(module, schedule, lens, name, layer_type, chunk_elems, progress)
    cls = module.__class__.__name__ if not inspect.isfunction(module) else module.__qualname__
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
            recipe_max_rotation_error=m[2], recipe_mean_rotation_error=m[3],
        ))
    return rows


# --------------------------------------------------------------------------- transformers' rotary classes

_NON_TEXT = ("vision", "visual", "audio", "image", "video", "patch", "speech", "2d", "3d", "pixel", "encoder")


def _modeling_files(pkg_dir: str) -> list[str]:
    try:
        names = sorted(os.listdir(pkg_dir))
    except OSError:
        return []
    return [f[:-3] for f in names if f.startswith("modeling_") and f.endswith(".py")
            and not f.startswith(("modeling_tf_", "modeling_flax_"))]


def _mentions_rotary(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            return "RotaryEmbedding" in fh.read()
    except OSError:
        return False


@dataclass(frozen=True)
class _Found:
    package: str
    module: str
    cls: Any  # the class, or None when the module did not import
    error: str | None = None

    @property
    def name(self) -> str:
        return self.cls.__name__ if self.cls is not None else f"{self.module} (import failed)"


def _text_first(name: str) -> tuple[int, str]:
    return (int(any(w in name.lower() for w in _NON_TEXT)), name)


def _classes_in(module: Any) -> list[Any]:
    found = [obj for n, obj in vars(module).items()
             if n.endswith("RotaryEmbedding") and inspect.isclass(obj) and obj.__module__ == module.__name__]
    return sorted(found, key=lambda c: _text_first(c.__name__))


def rotary_classes(families: Iterable[str] | None = None) -> list[_Found]:
    """Every ``*RotaryEmbedding`` class in the installed transformers (text classes first per package).

    Walks the subpackages of ``transformers.models`` (``families``: only
    these package names, e.g. ``llama``, ``gemma3``) and imports each
    ``modeling_*.py`` whose source mentions ``RotaryEmbedding``; a module
    that fails to import is listed with its error (``cls=None``).
    """
    require_transformers()
    import transformers.models as models

    wanted = None if families is None else set(families)
    out: list[_Found] = []
    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda i: i.name):
        if not info.ispkg or (wanted is not None and info.name not in wanted):
            continue
        pkg_dir = os.path.join(models.__path__[0], info.name)
        for mod_name in _modeling_files(pkg_dir):
            if not _mentions_rotary(os.path.join(pkg_dir, mod_name + ".py")):
                continue
            full = f"transformers.models.{info.name}.{mod_name}"
            try:
                with _quiet():
                    mod = importlib.import_module(full)
            except Exception as e:  # a broken optional dependency must not stop the scan
                out.append(_Found(info.name, full, None, f"import failed: {e!r}"))
                continue
            out.extend(_Found(info.name, full, c) for c in _classes_in(mod))
    return out


def _config_classes(cls: Any) -> list[Any]:
    """Candidate config classes for a rotary class: its ``config`` annotation, the module's models'
    ``config_class``, the package's model type in ``CONFIG_MAPPING``."""
    from transformers import PreTrainedConfig, PreTrainedModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mod = importlib.import_module(cls.__module__)
    out: list[Any] = []
    try:
        ann = inspect.signature(cls.__init__).parameters["config"].annotation
    except (KeyError, ValueError, TypeError):
        ann = inspect.Parameter.empty
    if isinstance(ann, str):
        ann = getattr(mod, ann.strip("'\""), None)
    if inspect.isclass(ann) and issubclass(ann, PreTrainedConfig):
        out.append(ann)
    for obj in vars(mod).values():
        if inspect.isclass(obj) and issubclass(obj, PreTrainedModel) and obj.__module__ == mod.__name__:
            cc = getattr(obj, "config_class", None)
            if inspect.isclass(cc) and cc not in out:
                out.append(cc)
    pkg = cls.__module__.split(".")[2]
    with contextlib.suppress(KeyError):
        if CONFIG_MAPPING[pkg] not in out:
            out.append(CONFIG_MAPPING[pkg])
    return out


def _sub_configs(config: Any) -> list[Any]:
    """The config and its text sub-config (multimodal configs hold the text model's config)."""
    out = [config]
    with contextlib.suppress(Exception):
        t = config.get_text_config()
        if t is not None and t is not config:
            out.append(t)
    return out


def _forward_kind(cls: Any) -> str:
    """``"plain"`` for forward(x, position_ids), ``"layer_type"`` for forward(x, position_ids, layer_type)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        raise ValueError("forward has no inspectable signature") from None
    names = [p.name for p in params]
    if len(params) < 2 or names[1] != "position_ids":
        raise ValueError(f"forward({', '.join(names)}) is not the rotary protocol forward(x, position_ids)")
    required = [p.name for p in params[2:] if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if "layer_type" in names:
        return "layer_type"
    if required:
        raise ValueError(f"forward({', '.join(names)}) needs more than (x, position_ids)")
    return "plain"


def build_rotary_module(cls: Any, config: Any | None = None) -> tuple[Any, Any]:
    """Build a rotary class from ``config`` (default: its model's default config); returns (module, config).

    The config class comes from the ``config`` annotation of ``__init__``,
    else the ``config_class`` of the module's models, else ``CONFIG_MAPPING``;
    a multimodal config is tried with its text sub-config too.  No weights,
    no downloads.
    """
    require_transformers()
    errors: list[str] = []
    candidates = [config] if config is not None else []
    with _quiet():
        if config is None:
            for cc in _config_classes(cls):
                try:
                    candidates.append(cc())
                except Exception as e:
                    errors.append(f"{cc.__name__}() failed: {e!r}")
        for cfg in candidates:
            for c in _sub_configs(cfg):
                try:
                    return cls(c), c
                except Exception as e:
                    errors.append(f"{cls.__name__}({type(c).__name__}) failed: {e!r}")
    raise ValueError("; ".join(errors) or f"no config class found for {cls.__name__}")


def _layer_types(module: Any, config: Any) -> list[str | None]:
    """The layer types to audit: those with rope parameters of their own (per-layer-type configs), else [None]."""
    params = _get(config, "rope_parameters")
    if isinstance(params, Mapping) and _is_per_layer(params):
        lts = getattr(module, "layer_types", None) or list(params)
        return [lt for lt in sorted(set(lts)) if params.get(lt) is not None]
    return [None]


def _model_type_module(model_type: str) -> Any:
    transformers = require_transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, model_type_to_module_name

    if model_type not in CONFIG_MAPPING:
        import difflib

        near = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ValueError(f"unknown model type {model_type!r} for transformers {transformers.__version__}{hint}")
    pkg = model_type_to_module_name(model_type)
    try:
        with _quiet():
            return importlib.import_module(f"transformers.models.{pkg}.modeling_{pkg}")
    except ImportError as e:
        raise ValueError(f"model type {model_type!r}: cannot import its modeling module ({e})") from None


def find_rotary_classes(model_type: str) -> list[Any]:
    """The ``*RotaryEmbedding`` classes of a model type's modeling module, text classes first.

    E.g. ``find_rotary_classes("llama")`` gives ``[LlamaRotaryEmbedding]``
    (tests/test_hf.py runs it).
    """
    mod = _model_type_module(model_type)
    found = _classes_in(mod)
    if not found:
        raise ValueError(f"model type {model_type!r} has no *RotaryEmbedding class in {mod.__name__}")
    return found


def _config_from_dict(cls: Any, model_type: str, data: Mapping[str, Any]) -> Any:
    """A config object for ``cls`` from a config.json dict (never executes code)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    declared = data.get("model_type", model_type)
    with _quiet():
        for cc in _config_classes(cls):
            if getattr(cc, "model_type", None) == declared:
                return cc.from_dict(dict(data))
        if declared not in CONFIG_MAPPING:
            raise ValueError(f"config model_type {declared!r} is unknown to this transformers")
        return CONFIG_MAPPING[declared].from_dict(dict(data))


def audit_model_type(
    model_type: str,
    lengths: int | Iterable[int] = 8192,
    *,
    dtype: Any = "bfloat16",
    cast_module: bool = False,
    config: Mapping[str, Any] | None = None,
    layer_type: str | None = None,
    class_name: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[ModuleRow]:
    """Build a model type's rotary module (default config, or a config.json dict) and audit it.

    ``cast_module=True`` applies ``.to(dtype)`` first, as ``model.to(dtype)``
    does.  The first text ``*RotaryEmbedding`` class is used unless
    ``class_name`` names another; per-layer-type modules (Gemma) give one
    row set per layer type unless ``layer_type`` picks one.
    """
    classes = find_rotary_classes(model_type)
    if class_name is not None:
        named = [c for c in classes if c.__name__ == class_name]
        if not named:
            raise ValueError(f"model type {model_type!r} has no class {class_name!r}; it has "
                             f"{', '.join(c.__name__ for c in classes)}")
        classes = named
    cls = classes[0]
    kind = _forward_kind(cls)
    cfg = None if config is None else _config_from_dict(cls, model_type, config)
    name, tdt = _torch_dtype(dtype)
    module, cfg = build_rotary_module(cls, cfg)
    lts = _layer_types(module, cfg) if kind == "layer_type" else [None]
    if layer_type is not None:
        if layer_type not in lts:
            has = f"has layer types {', '.join(map(str, lts))}" if lts != [None] else "has no layer types"
            raise ValueError(f"unknown layer type {layer_type!r}: {cls.__name__} with this config {has}")
        lts = [layer_type]
    if cast_module:
        module = module.to(tdt)
    rows: list[ModuleRow] = []
    for lt in lts:
        sched = schedule_from_config(cfg, lt)
        rows += audit_rope_module(module, sched, lengths, dtype=name, layer_type=lt, model_type=model_type,
                                  cast_module=cast_module, progress=progress)
    return rows


# --------------------------------------------------------------------------- the scan


def damage_threshold(schedule: RopeSchedule, dtype: str, length: int) -> tuple[float, float]:
    """``(threshold, fp32 figure)``: a module is *damaged* when its max rotation error exceeds the threshold.

    The fp32 preset (float32 until cos/sin, cast to ``dtype``: the fix) is
    what correct code reaches; its max rotation error ``R`` is dominated by
    the cache rounding (bf16: ~2.8e-3 rad) plus float32 angle rounding.
    Real code differs from the correctly rounded model only by its faithful
    (not correctly rounded) kernels: a float32 ``pow`` one ulp off moves the
    angle by at most ``(L-1) * ulp(theta_i)``, and a faithful cos/sin by one
    ulp of the cache format, both well inside ``R`` itself.  So the threshold
    is ``2 R + (L-1) * max_i ulp_f32(theta_i)``: correct code stays below it
    on any CPU, while each damaged code path measured lies far above it (a
    bfloat16 ``inv_freq`` buffer moves ``theta_i`` by up to ``2**-9``
    relative: at 8K the angles of the fast frequencies are off by radians).

    >>> t, r = damage_threshold(RopeSchedule(head_dim=128), "bfloat16", 8192)
    >>> r < t < 0.01
    True
    """
    figures = _preset_figures(schedule, get_format(dtype).name, (int(length),))
    r = figures["fp32"][length][0]
    theta = schedule.inv_freq(schedule.frequency_key(length))
    ulp = float(spacing(theta, "float32").max()) if theta.size else 0.0
    return 2 * r + (length - 1) * ulp, r


@dataclass(frozen=True)
class ScanRow(Row):
    """One rotary class (and layer type) of the scan: as built, after ``.to(dtype)``, and the verdict.

    ``status`` is ``audited`` or ``skipped`` (``reason`` says why).  Verdict
    (audited rows): ``damaged as built`` when the built module's max rotation
    error exceeds :func:`damage_threshold`, else ``damaged by the cast`` when
    the cast module's does, else ``safe``.  ``fp32_max_rotation_error`` is the
    fp32 preset's figure the threshold derives from; ``cast_matches_recipe``
    the rope preset the cast module's figures match.  With the fix pass
    (:func:`precision_audit.fix.keep_rotary_fp32` applied before the cast):
    ``fix_*_rotation_error`` and ``fix_restored`` (the fixed, cast module's
    errors equal the as-built ones exactly).  ``to_dict()`` names
    ``module_class`` ``class``.
    """

    model_type: str | None
    module_class: str
    layer_type: str | None
    status: str
    reason: str
    dtype: str
    length: int
    schedule: str | None = None
    built_max_rotation_error: float | None = None
    built_mean_rotation_error: float | None = None
    cast_max_rotation_error: float | None = None
    cast_mean_rotation_error: float | None = None
    fp32_max_rotation_error: float | None = None
    threshold: float | None = None
    cast_matches_recipe: str | None = None
    verdict: str | None = None
    fix_max_rotation_error: float | None = None
    fix_mean_rotation_error: float | None = None
    fix_restored: bool | None = None

    def __post_init__(self) -> None:
        if self.status not in ("audited", "skipped"):
            raise ValueError(f"status {self.status!r} must be audited or skipped")
        if self.verdict is not None and self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {("class" if k == "module_class" else k): v for k, v in d.items()}


def _scan_class(found: _Found, length: int, dtype: str, fix: bool = False) -> list[ScanRow]:
    """Audit one class (every layer type); any failure becomes a skipped row with its reason."""
    import torch

    base = dict(module_class=found.name, dtype=dtype, length=length)
    if found.cls is None:
        return [ScanRow(model_type=found.package, layer_type=None, status="skipped",
                        reason=found.error or "import failed", **base)]  # type: ignore[arg-type]
    cls = found.cls
    model_type = found.package
    try:
        if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
            raise ValueError("not a torch.nn.Module")
        kind = _forward_kind(cls)
        module, cfg = build_rotary_module(cls)
        model_type = getattr(cfg, "model_type", None) or model_type
        lts = _layer_types(module, cfg) if kind == "layer_type" else [None]
        if not lts:
            raise ValueError("no layer type of the config has rope parameters")
    except Exception as e:
        return [ScanRow(model_type=model_type, layer_type=None, status="skipped", reason=_reason(e),
                        **base)]  # type: ignore[arg-type]
    rows = []
    _, tdt = _torch_dtype(dtype)
    for lt in lts:
        try:
            sched = schedule_from_config(cfg, lt)
            (built,) = audit_rope_module(module, sched, length, dtype=dtype, layer_type=lt, match=False)
            cast_mod, _ = build_rotary_module(cls, cfg)
            (cast,) = audit_rope_module(cast_mod.to(tdt), sched, length, dtype=dtype, layer_type=lt, match=False)
            thr, r = damage_threshold(sched, dtype, length)
            m = match_recipe(sched, dtype, length, cast.max_rotation_error, cast.mean_rotation_error)
            if built.max_rotation_error > thr:
                verdict = "damaged as built"
            elif cast.max_rotation_error > thr:
                verdict = "damaged by the cast"
            else:
                verdict = "safe"
            notes = [f"cast matches {m[1]}"]
            if cast.max_rotation_error > math.pi / 2 or built.max_rotation_error > math.pi / 2:
                notes.append("phase lost")
            fixed: dict[str, Any] = {}
            if fix:
                from ..fix import keep_rotary_fp32

                fix_mod, _ = build_rotary_module(cls, cfg)
                keep_rotary_fp32(fix_mod)
                (fx,) = audit_rope_module(fix_mod.to(tdt), sched, length, dtype=dtype, layer_type=lt, match=False)
                fixed = dict(fix_max_rotation_error=fx.max_rotation_error,
                             fix_mean_rotation_error=fx.mean_rotation_error,
                             fix_restored=(fx.max_rotation_error, fx.mean_rotation_error)
                             == (built.max_rotation_error, built.mean_rotation_error))
            rows.append(ScanRow(
                model_type=model_type, layer_type=lt, status="audited", reason="; ".join(notes),
                schedule=sched.describe(), built_max_rotation_error=built.max_rotation_error,
                built_mean_rotation_error=built.mean_rotation_error, cast_max_rotation_error=cast.max_rotation_error,
                cast_mean_rotation_error=cast.mean_rotation_error, fp32_max_rotation_error=r, threshold=thr,
                cast_matches_recipe=m[0], verdict=verdict, **fixed, **base))  # type: ignore[arg-type]
        except Exception as e:
            rows.append(ScanRow(model_type=model_type, layer_type=lt, status="skipped", reason=_reason(e),
                                **base))  # type: ignore[arg-type]
    return rows


def _reason(e: BaseException) -> str:
    text = str(e) if isinstance(e, ValueError) else repr(e)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def scan(
    *,
    dtype: Any = "bfloat16",
    length: int = 8192,
    families: Iterable[str] | None = None,
    progress: Callable[[int], None] | None = None,
    classes: Sequence[_Found] | None = None,
    fix: bool = False,
) -> list[ScanRow]:
    """Every ``*RotaryEmbedding`` class of the installed transformers, built and cast, with a verdict.

    Each class is built from its model's default config (no weights, no
    downloads: ``HF_HUB_OFFLINE=1`` is set for the scan), audited as built
    and after ``.to(dtype)`` at one ``length``; see :class:`ScanRow` for the
    verdict.  A class that cannot be audited (vision 2-D rotary, another
    forward signature, a default config that does not build, multimodal
    mrope, a module whose frequencies are not its config's schedule) is a
    skipped row with its reason; one bad class never stops the scan.
    ``families`` restricts it to these ``transformers.models`` packages;
    ``progress`` is called with 1 after each class (``classes``: a list from
    :func:`rotary_classes`, to count them first).  ``fix=True`` audits each
    class a third time with :func:`precision_audit.fix.keep_rotary_fp32`
    applied before the cast.
    """
    name, _ = _torch_dtype(dtype)
    (length,) = check_rope_lengths(length)
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        found = rotary_classes(families) if classes is None else list(classes)
        rows: list[ScanRow] = []
        for f in found:
            rows += _scan_class(f, length, name, fix)
            if progress is not None:
                progress(1)
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
    return rows


# --------------------------------------------------------------------------- ALiBi builders

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


def _alibi_metrics(mag: F64, ref: F64, sign: float) -> dict[str, Any]:
    """The alibi auditor's metrics of stored magnitudes ``mag`` (heads, L) against the exact ``ref``.

    Same definitions as :class:`~precision_audit.alibi.HeadAudit`, on the
    whole array: distinct values along k, longest run of equal neighbours,
    largest |error| (inf if non-finite), inversions ``m[k+1] < m[k]``,
    non-finite count, and the largest change of the softmax over logits
    ``sign * bias`` (float64).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        same = (mag[:, 1:] == mag[:, :-1]) | (np.isnan(mag[:, 1:]) & np.isnan(mag[:, :-1]))
        distinct = 1 + (~same).sum(axis=1)
        runs = []
        for h in range(mag.shape[0]):
            breaks = np.flatnonzero(~same[h])
            edges = np.concatenate([[-1], breaks, [mag.shape[1] - 1]])
            runs.append(int(np.diff(edges).max()))
        bad = ~np.isfinite(mag)
        err = np.where(bad, np.inf, np.abs(mag - ref)).max(axis=1)
        inversions = int((mag[:, 1:] < mag[:, :-1]).sum())

        def softmax(z: F64) -> F64:
            e = np.exp(z - z.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)

        dp = np.abs(softmax(sign * mag) - softmax(sign * ref)).max(axis=1)
    L = mag.shape[1]
    return dict(min_distinct_biases=int(distinct.min()), distinct_fraction=int(distinct.min()) / L,
                max_run=max(runs), max_abs_error=float(err.max()), order_inversions=inversions,
                nonfinite_biases=int(bad.sum()), max_prob_change=float(np.max(dp)))


@dataclass(frozen=True)
class AlibiBuilderRow(Row):
    """A transformers ALiBi builder's bias for the last query, with the alibi auditor's metrics.

    Metrics as :class:`~precision_audit.alibi.AlibiAudit` (summaries over
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
    from ..alibi import RECIPES, _check_heads, alibi_bias, alibi_slopes, audit_alibi
    from ..alibi import get_recipe as alibi_recipe

    if model_type not in ALIBI_BUILDERS:
        raise ValueError(f"unknown ALiBi model type {model_type!r}; valid: {', '.join(ALIBI_BUILDERS)}")
    n = _check_heads(num_heads)
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
    k = np.arange(L, dtype=np.float64)
    ref = alibi_slopes(n)[:, None] * k[None, :]
    sign = 1.0 if form == "key" else -1.0
    metrics = _alibi_metrics(mag, ref, sign)
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
    (rec_row,) = audit_alibi(L, n, rec, rdt)
    return AlibiBuilderRow(
        model_type=model_type, builder=qual, dtype=name, bias_dtype=bias_dtype, value_format=_value_format(mag),
        form=form, length=L, num_heads=n, matches_recipe=rname, recipe_dtype=rdt, identical_fraction=frac,
        recipe=rec_row, **metrics)
