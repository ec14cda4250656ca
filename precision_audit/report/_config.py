"""The model report's view of a config: :class:`ModelSpec`, read by :mod:`precision_audit.config`.

``precision_audit.config`` parses the config (every rope type, per layer type,
ALiBi); this module only picks what the report draws: one RoPE schedule (the
``full_attention`` layers' when a model has one per layer type), the ALiBi
heads and, for MPT, its slopes (``alibi_bias_max`` may differ from 8).

>>> s = model_spec({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
...                 "rope_theta": 500000.0, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"})
>>> s.rope.head_dim, s.rope.base, s.max_context, s.dtype, s.alibi_heads
(128, 500000.0, 8192, 'bfloat16', None)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ModelConfig, default_dtype, load_config_dict, load_model
from ..config import load_config as _load
from ..rope.schedules import RopeSchedule

__all__ = ["ModelSpec", "load_config", "load_spec", "model_spec", "mpt_slopes", "spec_for_model_type"]


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
    model: ModelConfig | None = field(default=None, repr=False, compare=False)  # every layer type, for the stacks

    def __post_init__(self) -> None:
        if self.rope is None and self.alibi_heads is None and (self.model is None or self.model.kind in
                                                               ("rope", "alibi")):
            raise ValueError(f"model_type {self.model_type!r}: the config has no position encoding the report "
                             "knows (RoPE, ALiBi, relative buckets or sinusoids, learned positions)")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max context {self.max_context} must be at least 1")

    def model_config(self) -> ModelConfig:
        """The parsed config (every layer type: what the stacks are audited on), or, for a spec built by hand,
        one holding the drawn schedule or the heads."""
        if self.model is not None:
            return self.model
        if self.rope is not None:
            return ModelConfig(self.name, self.model_type, "rope", rope=(("all", self.rope),),
                               max_position_embeddings=self.max_context)
        return ModelConfig(self.name, self.model_type, "alibi", num_heads=self.alibi_heads,
                           max_position_embeddings=self.max_context)


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


def _spec(mc: ModelConfig) -> ModelSpec:
    dtype = default_dtype(mc)  # the config's torch_dtype, else bfloat16 (as `config` defaults)
    notes = list(mc.notes)
    if mc.kind == "alibi":
        slopes = None
        if mc.model_type == "mpt":
            bias_max = 8.0 if mc.alibi_bias_max is None else float(mc.alibi_bias_max)
            slopes = mpt_slopes(int(mc.num_heads or 1), bias_max)
        return ModelSpec(mc.name, mc.model_type, dtype, mc.max_position_embeddings, None, mc.num_heads, slopes,
                         tuple(notes), mc)
    if mc.kind in ("relative", "learned"):  # no schedule, no slopes: the report audits it through `config`
        return ModelSpec(mc.name, mc.model_type, dtype, mc.max_position_embeddings, None, None, None, tuple(notes), mc)
    by_type = dict(mc.rope)
    key = "full_attention" if "full_attention" in by_type else next(iter(by_type))
    if len(by_type) > 1:
        notes.append(f"one RoPE schedule per layer type ({', '.join(by_type)}): the {key} layers' are drawn")
    return ModelSpec(mc.name, mc.model_type, dtype, mc.max_position_embeddings, by_type[key], None, None,
                     tuple(notes), mc)


def model_spec(cfg: Any, name: str = "model") -> ModelSpec:
    """The :class:`ModelSpec` of a config dict (a config.json's content) or a transformers config object."""
    return _spec(load_config_dict(cfg, name=name))


def load_config(path: str | Path) -> ModelSpec:
    """Read a config.json file (see :func:`precision_audit.config.load_config`)."""
    return _spec(_load(path))


def load_spec(model: str | Path) -> ModelSpec:
    """A model named as the ``config`` command takes it: a config.json (or its folder), a .gguf file or a Hub id
    (see :func:`precision_audit.config.load_model`)."""
    return _spec(load_model(model))


def spec_for_model_type(model_type: str) -> ModelSpec:
    """transformers' default config for ``model_type`` (``AutoConfig.for_model``; nothing downloaded)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ValueError("--model-type needs transformers (pip install 'precision-audit[hf]' or transformers)") \
            from None
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ..hf import unknown_model_type

    if model_type not in CONFIG_MAPPING:
        raise ValueError(unknown_model_type(model_type))
    try:
        cfg = AutoConfig.for_model(model_type)  # read by attribute: to_dict() drops e.g. Gemma 4's head dims
    except (ValueError, KeyError) as e:
        raise ValueError(f"model type {model_type!r}: transformers cannot build its default config "
                         f"({str(e)[:200]})") from None
    return model_spec(cfg, f"{model_type} (transformers default config)")
