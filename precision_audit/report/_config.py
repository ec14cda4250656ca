"""A minimal reader of Hugging Face ``config.json`` files for the model report.

STOPGAP: ``precision_audit.config`` (model-config parsing, issue 9) replaces
this; the report only needs :func:`model_spec` to return a :class:`ModelSpec`,
so swapping the reader means changing that one function.

Reads: ``rope_theta`` / ``rope_parameters`` (transformers 5, also per layer
type) / ``rope_scaling`` (types default, linear, dynamic, yarn, llama3),
``head_dim`` or ``hidden_size / num_attention_heads``,
``partial_rotary_factor``, the maximum context, the dtype, and ALiBi (bloom;
falcon with ``alibi``; mpt with ``attn_config.alibi``; baichuan with
hidden_size 5120, the 13B models).

>>> s = model_spec({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
...                 "rope_theta": 500000.0, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"})
>>> s.rope.head_dim, s.rope.base, s.max_context, s.dtype, s.alibi_heads
(128, 500000.0, 8192, 'bfloat16', None)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats import get_format
from ..rope import RopeSchedule

__all__ = ["ModelSpec", "load_config", "model_spec", "spec_for_model_type"]

_ROPE_TYPES = {"default": "none", "linear": "linear", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3"}
_CONTEXT_KEYS = ("max_position_embeddings", "max_seq_len", "seq_length", "n_positions", "model_max_length")
_HEADS_KEYS = ("num_attention_heads", "n_head", "n_heads")


@dataclass(frozen=True)
class ModelSpec:
    """What the model report needs to know about one model."""

    name: str
    model_type: str
    dtype: str
    max_context: int | None
    rope: RopeSchedule | None = None
    alibi_heads: int | None = None
    alibi_slopes: tuple[float, ...] | None = None  # None: the ALiBi reference rule
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.rope is None and self.alibi_heads is None:
            raise ValueError(f"model_type {self.model_type!r}: the config has neither RoPE nor ALiBi "
                             "(the report covers those position encodings)")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max context {self.max_context} must be at least 1")


def _first(cfg: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((cfg[k] for k in keys if cfg.get(k) is not None), None)


def mpt_slopes(num_heads: int, alibi_bias_max: float = 8.0) -> tuple[float, ...]:
    """MPT's ALiBi slopes: 2**-(k * bias_max / n2) for k = 1..n2, n2 = next power of two,
    interleaved (odd then even indices) when ``num_heads`` is not a power of two.

    >>> mpt_slopes(4)  # 2**-(8k/4)
    (0.25, 0.0625, 0.015625, 0.00390625)
    """
    n2 = 1 << max(0, math.ceil(math.log2(num_heads)))
    s = [2.0 ** -(k * alibi_bias_max / n2) for k in range(1, n2 + 1)]
    if n2 != num_heads:
        s = (s[1::2] + s[::2])[:num_heads]
    return tuple(s)


def _alibi(cfg: dict[str, Any], mt: str) -> tuple[bool, tuple[float, ...] | None, tuple[str, ...]]:
    if mt == "bloom":
        return True, None, ()
    if mt == "falcon" and cfg.get("alibi"):
        return True, None, ()
    if mt == "mpt":
        ac = cfg.get("attn_config") or {}
        if ac.get("alibi"):
            heads = int(_first(cfg, _HEADS_KEYS))
            return True, mpt_slopes(heads, float(ac.get("alibi_bias_max", 8))), ()
    if mt == "baichuan" and cfg.get("hidden_size") == 5120:
        return True, None, ("baichuan with hidden_size 5120 read as a 13B model (ALiBi); 7B models use RoPE",)
    return False, None, ()


def _rope(cfg: dict[str, Any]) -> tuple[RopeSchedule, tuple[str, ...]]:
    notes: list[str] = []
    params = cfg.get("rope_parameters") or {}
    if params and all(isinstance(v, dict) for v in params.values()):  # per layer type (Gemma 3)
        key = "full_attention" if "full_attention" in params else sorted(params)[0]
        notes.append(f"rope_parameters per layer type: the {key} layers' are audited")
        params = params[key]
    scaling = dict(cfg.get("rope_scaling") or {})
    p = {**params, **scaling}
    rtype = p.get("rope_type") or p.get("type") or "default"
    if rtype not in _ROPE_TYPES:
        raise ValueError(f"rope type {rtype!r} is not read by the report yet; supported: {', '.join(_ROPE_TYPES)}")
    base = float(p.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    heads = _first(cfg, _HEADS_KEYS)
    head_dim = cfg.get("head_dim") or (cfg["hidden_size"] // heads if cfg.get("hidden_size") and heads else None)
    if not head_dim:
        raise ValueError("config gives neither head_dim nor hidden_size and num_attention_heads")
    prf = float(p.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    kw: dict[str, Any] = {"head_dim": int(head_dim), "base": base, "rotary_dim": int(head_dim * prf),
                          "scaling": _ROPE_TYPES[rtype]}
    if rtype != "default":
        kw["factor"] = float(p.get("factor", 1.0))
        orig = p.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings")
        if rtype == "dynamic" or not orig:
            orig = cfg.get("max_position_embeddings", 8192)
        kw["original_max_position_embeddings"] = int(orig)
        for k in ("low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                  "attention_factor"):
            if p.get(k) is not None:
                kw[k] = float(p[k])
    return RopeSchedule(**kw), tuple(notes)


def model_spec(cfg: dict[str, Any], name: str = "model") -> ModelSpec:
    """The :class:`ModelSpec` of a config dict (a config.json's content)."""
    if not isinstance(cfg, dict):
        raise ValueError("config.json must hold a JSON object")
    mt = str(cfg.get("model_type") or "unknown")
    dtype = cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16"
    dtype = get_format(str(dtype).replace("torch.", "")).name
    ctx = _first(cfg, _CONTEXT_KEYS)
    is_alibi, slopes, notes = _alibi(cfg, mt)
    rope, alibi_heads = None, None
    if is_alibi:
        alibi_heads = int(_first(cfg, _HEADS_KEYS))
    elif any(k in cfg for k in ("rope_theta", "rope_parameters", "rope_scaling")):
        rope, more = _rope(cfg)
        notes += more
    return ModelSpec(name, mt, dtype, int(ctx) if ctx else None, rope, alibi_heads, slopes, notes)


def load_config(path: str | Path) -> ModelSpec:
    """Read a config.json file."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read config {str(path)!r}: {e}") from None
    name = cfg.get("_name_or_path") or p.parent.name or p.stem
    return model_spec(cfg, str(name))


def spec_for_model_type(model_type: str) -> ModelSpec:
    """transformers' default config for ``model_type`` (``AutoConfig.for_model``; nothing downloaded)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ValueError("--model-type needs transformers (pip install 'precision-audit[hf]' or transformers)") \
            from None
    try:
        cfg = AutoConfig.for_model(model_type).to_dict()
    except (ValueError, KeyError) as e:
        raise ValueError(f"unknown model type {model_type!r} for transformers: {e}") from None
    return model_spec(cfg, f"{model_type} (transformers default config)")
