"""Build a found class with its defaults or small inferred arguments, and lay out the calls it supports.

An argument is inferred from its name (:data:`INFERRED`): a dimension is 64, a base 10000, heads 8, a length
the scan's length, a grid ``(64, L / 64)``, Flux-like axes ``(16, 24, 24)``; ``overrides`` (``--arg
NAME=VALUE``) win over both the inference and the default.  A required argument with no such name cannot be
inferred: the callable is listed with that reason.  A call passes positions (int64 ids) where the callable takes a
position argument, or omits them where they are optional (positions made inside), with vectors ``x`` of ones
where it takes vectors; :func:`call_plans` gives each such plan.

>>> infer_value("head_dim", 8192), infer_value("rope_theta", 8192), infer_value("max_seq_len", 8192)
(64, 10000.0, 8192)
>>> infer_value("feat_shape", 8192), infer_value("crops_coords", 8192)
((64, 128), ((0, 0), (64, 128)))
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .discover import POSITION_PARAM

__all__ = ["DIM", "HEADS", "INFERRED", "CallPlan", "build_instance", "call_plans", "infer_value", "parse_arg", "position_methods"]

DIM = 64
"""The dimension a scan gives a module that names none (a head dim, an embedding dim)."""
HEADS = 2
"""Heads of the vectors a scan rotates (few: every value has a float64 shadow)."""
_LENGTH = re.compile(r"^(seq_len|seqlen|seq_length|length|max_seq_len|max_seq_length|max_len|max_length|"
                     r"num_positions|n_positions|max_position_embeddings|max_positions|num_tokens|n_ctx|"
                     r"context_length|block_size|end|seq|n|cache_len|max_seqlen|max_pos)$")
INFERRED: dict[str, Callable[[int], Any]] = {
    r"^(dim|head_dim|d_model|embed_dim|embedding_dim|rotary_dim|n_elem|d|channels|hidden_size|num_channels|"
    r"d_head|dim_head|feature_dim|emb_dim|rope_dim|out_dim|attention_head_dim|hidden_dim)$": lambda n: DIM,
    r"^(theta|base|rope_theta|max_period|temperature|rotary_base|rope_base)$": lambda n: 10000.0,
    r"^(num_heads|n_heads|heads|n_head|num_attention_heads|nheads|n_heads_q)$": lambda n: 8,
    r"^(num_buckets|relative_attention_num_buckets)$": lambda n: 32,
    r"^(max_distance|relative_attention_max_distance)$": lambda n: 128,
    r"^(bidirectional)$": lambda n: True,
    r"^(axes_dim|axes_dims|axes_dim_rope|rope_axes_dim|axes_dims_rope)$": lambda n: (16, 24, 24),
    r"^(patch_size|patch_size_t|compressed_patch_size)$": lambda n: 1,
    r"^(shape|feat_shape|grid_size|grid|grid_shape|hw|spatial_size)$": lambda n: (64, max(1, n // 64)),
    r"^(len_h|height|grid_h|h)$": lambda n: 64,
    r"^(len_w|width|grid_w|w)$": lambda n: max(1, n // 64),
    r"^(temporal_size|num_frames|frames)$": lambda n: 2,
    r"^(crops_coords)$": lambda n: ((0, 0), (64, max(1, n // 64))),
    _LENGTH.pattern: lambda n: n,
}
"""A parameter name (regular expression) -> its value for a scan at length n."""
_X = re.compile(r"^(x|q|k|xq|xk|query|key|hidden_states|input|inputs|tensor|qk|states|t_x|query_states|"
                r"key_states)$")
_METHOD = re.compile(r"rot|rope|apply|embed|freq|cos|sin|cache|pos|bias|bucket|angle", re.I)
_FACTORIES = (r"^(position_ids|pos_ids|cache_position)$",)


def parse_arg(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as given to ``--arg``: the value as a Python literal (64, 1e4, (16, 24, 24), True), else
    the string itself.

    >>> parse_arg("dim=128"), parse_arg("axes_dim=(16,56,56)"), parse_arg("mode=lang")
    (('dim', 128), ('axes_dim', (16, 56, 56)), ('mode', 'lang'))
    """
    name, eq, value = str(text).partition("=")
    if not eq or not name.strip().isidentifier():
        raise ValueError(f"--arg {text!r} must be NAME=VALUE (NAME a parameter name)")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        return name.strip(), value.strip()


def infer_value(name: str, length: int, annotation: Any = None) -> Any:
    """The value a scan gives a parameter by its name (KeyError: none); a sequence annotation (``List[int]``,
    ``tuple[int, int, int]``) makes a dimension per-axis ``(16, 24, 24)`` and a patch size ``(1, 1, 1)``.

    >>> infer_value("rope_dim", 8192, "list[int]"), infer_value("patch_size", 8192, "Tuple[int, int, int]")
    ((16, 24, 24), (1, 1, 1))
    """
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation or ""))
    for pattern, make in INFERRED.items():
        if re.match(pattern, name):
            value = make(length)
            if isinstance(value, int) and not isinstance(value, bool) and re.search(r"(?i)list|tuple|sequence",
                                                                                      text):
                return (16, 24, 24) if value == DIM else (value,) * 3
            return value
    raise KeyError(name)


def _signature(fn: Any) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        raise ValueError("has no inspectable signature") from None


def _fill(sig: inspect.Signature, length: int, overrides: dict[str, Any], skip: tuple[str, ...] = ()
          ) -> dict[str, Any]:
    """Keyword arguments for the parameters that need or get a value: overrides, inferred, lengths set to
    ``length`` even where they have a default (a cache shorter than the scan would refuse it)."""
    out, missing = {}, []
    for name, p in sig.parameters.items():
        if name == "self" or name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in overrides:
            out[name] = overrides[name]
        elif _LENGTH.match(name) and (p.default is p.empty or isinstance(p.default, int)):
            out[name] = length
        elif p.default is p.empty:
            try:
                out[name] = infer_value(name, length, p.annotation)
            except KeyError:
                missing.append(name)
    if missing:
        raise ValueError(f"cannot infer argument{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         "(give --arg NAME=VALUE)")
    return out


def _transformers_class(cls: type, sig: inspect.Signature) -> bool:
    """A transformers module class built from a ``config`` (its rotary classes): built as ``hf-scan`` builds it."""
    p = sig.parameters.get("config")
    return p is not None and p.default is p.empty and getattr(cls, "__module__", "").startswith("transformers.")


def build_instance(cls: type, length: int, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(cls(**kwargs), kwargs)`` with inferred and overridden arguments; ValueError saying why not.  A
    transformers class that takes a ``config`` is built from its model's default config
    (:func:`precision_audit.hf.build_rotary_module`, as ``hf-scan`` builds it; kwargs ``{"config": cfg}``).

    >>> class Rotary:
    ...     def __init__(self, head_dim, base=500000.0, max_seq_len=4096): pass
    >>> build_instance(Rotary, 8192, {})[1]  # the length too: a 4096 cache would refuse 8192 positions
    {'head_dim': 64, 'max_seq_len': 8192}
    """
    sig = _signature(cls)
    if _transformers_class(cls, sig) and "config" not in overrides:
        from ..hf import build_rotary_module

        try:
            module, cfg = build_rotary_module(cls)
        except Exception as e:
            raise ValueError(f"{cls.__name__} from its default config: {' '.join(str(e).split())[:200]}") from None
        return module, {"config": cfg}
    kwargs = _fill(sig, length, overrides)
    try:
        return cls(**kwargs), kwargs
    except Exception as e:
        raise ValueError(f"{cls.__name__}({_show(kwargs)}) raised {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:200]}") from None


def _show(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def position_methods(cls: type) -> list[str]:
    """``forward`` and the public methods the class itself defines whose name says rotate / apply / embed /
    freq / cos / sin / cache / pos / bias / bucket / angle (the ones a scan calls).

    >>> import torch
    >>> class R(torch.nn.Module):
    ...     def forward(self, x): return x
    ...     def build_rope_cache(self, n): pass
    ...     def reset(self): pass
    >>> position_methods(R)
    ['forward', 'build_rope_cache']
    """
    names = ["forward"] if "forward" in vars(cls) or hasattr(cls, "forward") else []
    for name, f in vars(cls).items():
        if inspect.isfunction(f) and not name.startswith("_") and name != "forward" and _METHOD.search(name):
            names.append(name)
    return names


@dataclass
class CallPlan:
    """One way to call a callable: the keyword arguments (``x`` / position entries are made per mode by
    :meth:`inputs`), which of them are positions, which are vectors."""

    label: str
    fixed: dict[str, Any]
    positions: tuple[str, ...] = ()
    vectors: tuple[str, ...] = ()
    pos_shapes: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)

    def inputs(self, dtype: Any, length: int, x_shape: tuple[int, ...], pos_shape: dict[str, tuple[int, ...]]
               ) -> dict[str, Any]:
        """The arguments of one call: positions ``0..length-1`` (int64, each the shape chosen), vectors of
        ones of ``x_shape`` in ``dtype``."""
        import torch

        out = dict(self.fixed)
        for p in self.positions:
            shape = pos_shape[p]
            ids = torch.arange(length, dtype=torch.int64)
            out[p] = ids if shape == (length,) else ids[None] if shape == (1, length) else \
                ids[:, None].expand(shape).contiguous()
        for v in self.vectors:
            out[v] = torch.ones(x_shape, dtype=dtype)
        return out


def _pos_shapes(name: str, length: int) -> list[tuple[int, ...]]:
    if re.match(_FACTORIES[0], name):
        return [(1, length), (length,)]
    return [(length,), (1, length), (length, 3), (length, 2)]


def call_plans(fn: Any, length: int, overrides: dict[str, Any], name: str) -> list[CallPlan]:
    """The plans for ``fn`` (a bound forward or method, or a function): with positions passed (where it takes
    a position argument) and with positions made inside (where those are optional or absent).  ValueError
    when an argument cannot be inferred.

    >>> def forward(x, input_pos=None): pass
    >>> [(p.label, p.positions, p.vectors) for p in call_plans(forward, 8192, {}, "forward")]
    [('forward(x, input_pos)', ('input_pos',), ('x',)), ('forward(x)', (), ('x',))]
    """
    sig = _signature(fn)
    params = {n: p for n, p in sig.parameters.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL,
                                                                                         p.VAR_KEYWORD)}
    types = getattr(getattr(fn, "__self__", None), "layer_types", None)
    if "layer_type" in params and "layer_type" not in overrides and isinstance(types, (list, tuple)) and types \
            and all(isinstance(t, str) for t in types):  # one plan per layer type the module holds (Gemma 3)
        plans = []
        for t in dict.fromkeys(types):
            for plan in call_plans(fn, length, {**overrides, "layer_type": t}, name):
                plan.label = plan.label.replace("layer_type", f"layer_type={t!r}")
                plans.append(plan)
        return plans
    pos = [n for n in params if POSITION_PARAM.match(n) and n not in overrides]
    vec = [n for n, p in params.items() if _X.match(n) and n not in overrides
           and (p.default is p.empty or not pos)]
    vec_req = [n for n in vec if params[n].default is params[n].empty]
    fixed = _fill(sig, length, overrides, skip=tuple(pos) + tuple(vec))
    plans = []
    if pos:
        use = [pos[0]]  # the first position argument; the others keep their defaults
        others = [n for n in pos[1:] if params[n].default is params[n].empty]
        use += others
        plans.append(CallPlan(f"{name}({', '.join([*vec_req, *use, *fixed])})", fixed, tuple(use), tuple(vec_req),
                              {p: _pos_shapes(p, length) for p in use}))
    if all(params[n].default is not params[n].empty for n in pos):
        made = vec if not pos else vec_req
        if made or fixed or not params or not pos:
            plans.append(CallPlan(f"{name}({', '.join([*made, *fixed])})", fixed, (), tuple(made)))
    return plans
