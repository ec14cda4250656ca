"""Keep a live model's position buffers in float32 through dtype casts.

``model.to(torch.bfloat16)`` (and ``.half()``, ``.bfloat16()``, ``.type(...)``)
casts every floating buffer, including the rotary inverse frequencies
``inv_freq`` (and ``original_inv_freq``, per-layer-type copies such as
``sliding_attention_inv_freq``): a user cannot mark one buffer "stay float32".
Rounded to bfloat16, ``inv_freq`` keeps 8 significant bits, so the angle
``m * theta_i`` drifts by up to ``m * theta_i * 2**-9`` and at 32K tokens
whole radians are lost.  The fix the industry adopted keeps positions,
frequencies and angles in float32 and casts only cos/sin; transformers' rotary
modules already compute in float32 (``inv_freq.to(dtype=torch.float)``) and
return ``cos.to(x.dtype)``, so keeping the *buffer* float32 is all they need.

:func:`keep_rotary_fp32` does that for a model (or a bare rotary module):

* it finds every rotary module by its buffers and its protocol, not by class:
  a floating buffer whose name ends in ``inv_freq`` and a forward taking
  ``(x, position_ids, ...)`` (transformers' rotary modules, which compute in
  float32 and return cos/sin in ``x.dtype``); modules with such buffers but
  another forward (vision or audio rotary tables that return their buffers'
  dtype) are listed as skipped, since keeping their buffers float32 could
  change what they return; and every module caching an ALiBi tensor as a
  buffer named ``alibi``, ``*_alibi*``, ``slopes`` or ``*_slopes`` (the module
  must cast its output itself, as the fix recipe does);
* it makes later casts leave those buffers' dtype alone while device moves
  still apply: the module's ``_apply`` (which ``to``, ``half``, ``bfloat16``,
  ``float``, ``double``, ``type``, ``cuda``, ``cpu`` all go through) is
  replaced, on that instance only, by one that turns a dtype-changing
  conversion of a protected buffer into a device-only move;
* buffers already downcast are rebuilt from the module's own config (its class
  constructed again from ``module.config`` in float32: the same code that built
  them), never upcast from their rounded values; a module without a config
  raises ``ValueError`` instead;
* it returns a :class:`ProtectionReport` of what it protected; ``undo()``
  (or :func:`release_rotary_fp32`) restores the normal casting behaviour.

Weights, parameters, other buffers and the outputs' dtype are untouched:
transformers' rotary modules still return cos/sin in ``x.dtype``.  Plain tensor
attributes (transformers' lazily built ``long_inv_freq`` for LongRoPE) are not
touched by casts at all; they are listed in the report for completeness.

>>> import torch
>>> class Rotary(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         inv_freq = 1.0 / 10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8)
...         self.register_buffer("inv_freq", inv_freq, persistent=False)
...     def forward(self, x, position_ids):
...         angles = position_ids[..., None].float() * self.inv_freq.float()
...         return angles.cos().to(x.dtype), angles.sin().to(x.dtype)
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), Rotary())
>>> print(keep_rotary_fp32(model))
1.inv_freq (rotary, float32, kept)
>>> model = model.to(torch.bfloat16)
>>> model[0].weight.dtype, model[1].inv_freq.dtype
(torch.bfloat16, torch.float32)
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .checks import ArgumentTypeError, check_flag, describe

__all__ = [
    "KINDS",
    "ProtectedBuffer",
    "ProtectionReport",
    "buffer_kind",
    "keep_rotary_fp32",
    "release_rotary_fp32",
]

# buffer name -> kind, by pattern: rotary frequencies and cached ALiBi tensors (bias or slopes)
_PATTERNS: dict[str, re.Pattern[str]] = {
    "rotary": re.compile(r"(^|_)inv_freq$"),
    "alibi": re.compile(r"(^|_)alibi($|_)|(^|_)slopes$"),
}
KINDS: tuple[str, ...] = tuple(_PATTERNS)
_WHERE = ("buffer", "attribute")  # a registered buffer (cast by model.to) or a plain tensor attribute (not cast)


def buffer_kind(name: str) -> str | None:
    """The kind of position tensor a buffer name stands for, or None.

    >>> [buffer_kind(n) for n in ("inv_freq", "sliding_attention_original_inv_freq", "alibi", "alibi_slopes",
    ...                           "slopes", "weight", "slope_rate")]
    ['rotary', 'rotary', 'alibi', 'alibi', 'alibi', None, None]
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name {describe(name)} must be a string (a buffer name)")
    for kind, pattern in _PATTERNS.items():
        if pattern.search(name):
            return kind
    return None


@dataclass(frozen=True)
class ProtectedBuffer:
    """One protected tensor: where it lives, what it is, what it was found as, whether it was rebuilt.

    ``module`` is the dotted path from the model ("" for the model itself);
    ``dtype`` the dtype found before the fix (``float32`` unless already cast);
    ``restored`` whether it was rebuilt from the module's config;
    ``rotary_protocol`` whether the module's forward takes ``(x, position_ids, ...)``
    as transformers' rotary modules do (a rotary buffer of any other module is
    skipped: ``protected`` is False); ``where`` is ``buffer`` (cast by
    ``model.to``; now kept) or ``attribute`` (a plain tensor attribute, which casts
    never touch).

    >>> ProtectedBuffer("model.rotary_emb", "inv_freq", "rotary", "bfloat16", True, True, (64,))
    ProtectedBuffer(module='model.rotary_emb', name='inv_freq', kind='rotary', dtype='bfloat16', restored=True, rotary_protocol=True, shape=(64,), where='buffer')
    >>> ProtectedBuffer("", "inv_freq", "rope", "float32", False, True, (64,))
    Traceback (most recent call last):
    ...
    ValueError: kind 'rope' must be one of rotary, alibi
    """

    module: str
    name: str
    kind: str
    dtype: str
    restored: bool
    rotary_protocol: bool
    shape: tuple[int, ...]
    where: str = "buffer"

    def __post_init__(self) -> None:
        for name in ("module", "name", "kind", "dtype", "where"):
            if not isinstance(getattr(self, name), str):
                raise ArgumentTypeError(f"{name} {describe(getattr(self, name))} must be a string")
        check_flag(self.restored, "restored")
        check_flag(self.rotary_protocol, "rotary_protocol")
        if not isinstance(self.shape, tuple) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                        for n in self.shape):
            raise ArgumentTypeError(f"shape {describe(self.shape)} must be a tuple of sizes (integers >= 0)")
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} must be one of {', '.join(KINDS)}")
        if self.where not in _WHERE:
            raise ValueError(f"where {self.where!r} must be one of {', '.join(_WHERE)}")
        if buffer_kind(self.name) != self.kind:
            raise ValueError(f"buffer name {self.name!r} is not a {self.kind} buffer name")
        if self.restored and not self.protected:
            raise ValueError(f"{self.path} is skipped (its forward is not (x, position_ids, ...)), so not restored")

    @property
    def protected(self) -> bool:
        """True unless a rotary buffer of a module outside the rotary protocol (skipped)."""
        return self.kind == "alibi" or self.rotary_protocol

    @property
    def path(self) -> str:
        """``module.name`` (just ``name`` for the model itself)."""
        return f"{self.module}.{self.name}" if self.module else self.name

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "name": self.name, "kind": self.kind, "dtype": self.dtype,
                "restored": self.restored, "rotary_protocol": self.rotary_protocol, "shape": list(self.shape),
                "where": self.where, "protected": self.protected}


@dataclass(frozen=True)
class ProtectionReport:
    """What :func:`keep_rotary_fp32` protected; ``undo()`` restores normal casting.

    >>> r = ProtectionReport((ProtectedBuffer("rotary", "inv_freq", "rotary", "bfloat16", True, True, (4,)),))
    >>> r.modules, len(r.restored)
    (('rotary',), 1)
    >>> print(r)
    rotary.inv_freq (rotary, bfloat16, restored from config)
    """

    buffers: tuple[ProtectedBuffer, ...]
    _targets: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.buffers, tuple) or not all(isinstance(b, ProtectedBuffer) for b in self.buffers):
            raise ArgumentTypeError(f"buffers {describe(self.buffers)} must be a tuple of ProtectedBuffer rows")

    @property
    def modules(self) -> tuple[str, ...]:
        """The protected modules' paths, in model order."""
        return tuple(dict.fromkeys(b.module for b in self.buffers if b.protected))

    @property
    def skipped(self) -> tuple[ProtectedBuffer, ...]:
        """Rotary buffers of modules outside the rotary protocol, left to cast as before."""
        return tuple(b for b in self.buffers if not b.protected)

    @property
    def restored(self) -> tuple[ProtectedBuffer, ...]:
        """The buffers that had been downcast and were rebuilt from their module's config."""
        return tuple(b for b in self.buffers if b.restored)

    def undo(self) -> int:
        """Give the protected modules their normal casting back; returns how many were released.

        Buffers keep their current values and dtype; the next cast casts them.
        """
        return sum(_release(m) for m in self._targets)

    def to_dict(self) -> dict[str, Any]:
        return {"modules": list(self.modules), "buffers": [b.to_dict() for b in self.buffers]}

    def __str__(self) -> str:
        if not self.buffers:
            return "no rotary or ALiBi buffers found"
        return "\n".join(f"{b.path} ({b.kind}, {b.dtype}, {_state(b)})" for b in self.buffers)


def _state(b: ProtectedBuffer) -> str:
    if not b.protected:
        return "skipped: forward is not (x, position_ids, ...)"
    if b.restored:
        return "restored from config"
    return "kept" if b.where == "buffer" else "attribute, not cast"


# --------------------------------------------------------------------------- the cast guard


def _guarded_apply(module: Any, fn: Callable[[Any], Any], recurse: bool = True, *,
                   kinds: tuple[str, ...] = KINDS) -> Any:
    """``nn.Module._apply`` for a protected module: protected buffers take the device of ``fn``'s
    result, never its dtype.  Children get ``fn`` as is; buffers are matched by name at cast time,
    so a buffer the module registers again later (dynamic RoPE does) is protected too."""
    if recurse:
        for child in module.children():
            child._apply(fn)
    protected = {id(b) for n, b in module._buffers.items()
                 if b is not None and b.is_floating_point() and buffer_kind(n) in kinds}

    def keep_dtype(t: Any) -> Any:
        out = fn(t)
        if id(t) in protected and getattr(out, "dtype", t.dtype) != t.dtype:
            return t.to(device=out.device)
        return out

    return type(module)._apply(module, keep_dtype, recurse=False)


def _is_guarded(module: Any) -> bool:
    g = module.__dict__.get("_apply")
    return isinstance(g, functools.partial) and g.func is _guarded_apply


def _guard(module: Any, kinds: tuple[str, ...]) -> None:
    if _is_guarded(module):
        return
    module.__dict__["_apply"] = functools.partial(_guarded_apply, module, kinds=kinds)


def _release(module: Any) -> bool:
    if not _is_guarded(module):
        return False
    del module.__dict__["_apply"]
    return True


# --------------------------------------------------------------------------- discovery and restoring


def _rotary_protocol(module: Any) -> bool:
    """forward(x, position_ids, ...): two leading positional parameters, the second a position tensor."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 and "position" in positional[1].name


def _tensors(module: Any) -> Iterator[tuple[str, Any, str]]:
    """(name, tensor, where) of the module's own floating position tensors: buffers, then plain attributes."""
    import torch

    for name, buf in module._buffers.items():
        if buf is not None and buf.is_floating_point() and buffer_kind(name) is not None:
            yield name, buf, "buffer"
    for name, value in vars(module).items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and buffer_kind(name) is not None:
            yield name, value, "attribute"


def _is_low_precision(t: Any) -> bool:
    import torch

    return torch.finfo(t.dtype).bits < 32


def _rebuilt(module: Any, path: str, names: list[str]) -> dict[str, Any]:
    """The named tensors as the module's own class builds them from its config, in float32.

    The class is constructed again from ``module.config`` (the same code that built the module),
    on the CPU with float32 as the default dtype; raises ValueError naming what is missing.
    """
    import torch

    where = f"{path or type(module).__name__}: {', '.join(names)} already {_dtype_name(getattr(module, names[0]))}"
    config = getattr(module, "config", None)
    if config is None:
        raise ValueError(f"{where}, and the module has no config to rebuild them from (rounded values are not "
                         "upcast); call keep_rotary_fp32 before casting, or rebuild the model") from None
    cls = type(module)
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        with warnings.catch_warnings(), torch.device("cpu"):
            warnings.simplefilter("ignore")
            fresh = cls(config)
    except Exception as e:  # noqa: BLE001 - any constructor failure is reported with the module's path
        raise ValueError(f"{where}; rebuilding {cls.__name__} from its config failed: {e}") from None
    finally:
        torch.set_default_dtype(previous)
    out = {}
    for name in names:
        old, new = getattr(module, name), getattr(fresh, name, None)
        if not isinstance(new, torch.Tensor) or new.shape != old.shape or new.dtype != torch.float32:
            raise ValueError(f"{where}; {cls.__name__}(config) does not rebuild {name} as a float32 tensor "
                             f"of shape {tuple(old.shape)}")
        out[name] = new.to(device=old.device)
    return out


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _dynamic_grown(module: Any) -> bool:
    """A dynamic-NTK module whose frequencies were regrown for a longer context than it was built for."""
    rope_type = getattr(module, "rope_type", "")
    types = rope_type.values() if isinstance(rope_type, dict) else [rope_type]
    cached, built = getattr(module, "max_seq_len_cached", None), getattr(module, "original_max_seq_len", None)
    try:
        return any("dynamic" in str(t) for t in types) and cached is not None and built is not None and cached > built
    except (TypeError, RuntimeError):
        return False


def keep_rotary_fp32(model: Any) -> ProtectionReport:
    """Keep every rotary (``*inv_freq``) and ALiBi (``*alibi*``, ``*slopes``) buffer of ``model`` in
    float32 through later dtype casts; device moves still apply.  Works on a whole model or on a bare
    rotary module.  Buffers already downcast are rebuilt from their module's config first.  Idempotent.

    >>> import torch
    >>> class Alibi(torch.nn.Module):
    ...     def __init__(self, heads=4):
    ...         super().__init__()
    ...         self.register_buffer("slopes", 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads))
    >>> m = Alibi()
    >>> report = keep_rotary_fp32(m)
    >>> m.half().slopes.dtype, m.to("cpu").slopes.dtype
    (torch.float32, torch.float32)
    >>> report.undo(), m.half().slopes.dtype
    (1, torch.float16)
    >>> keep_rotary_fp32(m)
    Traceback (most recent call last):
    ...
    ValueError: Alibi: slopes already float16, and the module has no config to rebuild them from (rounded values are not upcast); call keep_rotary_fp32 before casting, or rebuild the model
    """
    _check_model(model)
    # plan everything first, so a module that cannot be restored leaves the whole model untouched
    plan = []
    for path, module in model.named_modules(remove_duplicate=True):
        found = list(_tensors(module))
        if not found:
            continue
        protocol = _rotary_protocol(module)
        kinds = tuple(k for k in KINDS if k == "alibi" or protocol)
        low = [name for name, t, _ in found if buffer_kind(name) in kinds and _is_low_precision(t)]
        if low and _dynamic_grown(module):
            raise ValueError(f"{path or type(module).__name__}: dynamic RoPE frequencies regrown for "
                             f"{module.max_seq_len_cached} positions are already {_dtype_name(getattr(module, low[0]))}; "
                             "call keep_rotary_fp32 before casting")
        fresh = _rebuilt(module, path, low) if low else {}
        guarded = any(where == "buffer" and buffer_kind(name) in kinds for name, _, where in found)
        if guarded and "_apply" in module.__dict__ and not _is_guarded(module):
            raise ValueError(f"{path or type(module).__name__} already overrides _apply; cannot protect it")
        plan.append((path, module, found, fresh, protocol, kinds, guarded))
    rows, targets = [], []
    for path, module, found, fresh, protocol, kinds, guarded in plan:
        for name, t, where in found:
            if name in fresh:
                if where == "buffer":
                    module._buffers[name] = fresh[name]
                else:
                    module.__dict__[name] = fresh[name]
            rows.append(ProtectedBuffer(path, name, buffer_kind(name) or "", _dtype_name(t), name in fresh, protocol,
                                        tuple(t.shape), where))
        if guarded:
            _guard(module, kinds)
            targets.append(module)
    return ProtectionReport(tuple(rows), tuple(targets))


def release_rotary_fp32(model: Any) -> int:
    """Undo :func:`keep_rotary_fp32` on every module of ``model``; returns how many modules were released.

    >>> import torch
    >>> release_rotary_fp32(torch.nn.Linear(2, 2))
    0
    """
    _check_model(model)
    return sum(_release(m) for m in model.modules())


def _check_model(model: Any) -> None:
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ArgumentTypeError(f"model {describe(model)} must be a torch.nn.Module, not {type(model).__name__}")
