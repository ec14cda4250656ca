"""What the model report draws of a :class:`~precision_audit.config.ModelConfig` (the one model description,
read by :mod:`precision_audit.config`): one RoPE schedule (the ``full_attention`` layers' when a model has one
per layer type), the ALiBi heads and their slopes (:meth:`~precision_audit.config.ModelConfig.alibi_slopes`).

>>> from precision_audit.config import load_config_dict
>>> s = drawn(load_config_dict({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
...           "rope_theta": 500000.0, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}))
>>> s.rope.head_dim, s.rope.base, s.max_context, s.dtype, s.alibi_heads
(128, 500000.0, 8192, 'bfloat16', None)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..config import ModelConfig, default_dtype
from ..rope.schedules import RopeSchedule

__all__ = ["Drawn", "drawn"]


@dataclass(frozen=True)
class Drawn:
    """What the model report draws of one model (:func:`drawn`); ``model`` is the description itself."""

    name: str
    model_type: str
    dtype: str
    max_context: int | None
    rope: RopeSchedule | None = None
    alibi_heads: int | None = None
    alibi_slopes: tuple[float, ...] | None = None  # None: the ALiBi reference rule
    notes: tuple[str, ...] = field(default=())
    model: ModelConfig = field(default=None, repr=False, compare=False)  # type: ignore[assignment]  # every layer type
    layer_type: str = "all"  # the layer type whose schedule is ``rope``

    def drawn_model(self) -> ModelConfig:
        """The model with the drawn schedule only (what the report's RoPE sections audit through ``config``)."""
        return replace(self.model, rope=tuple((t, s) for t, s in self.model.rope if t == self.layer_type))

    def __post_init__(self) -> None:
        if self.rope is None and self.alibi_heads is None and self.model.kind in ("rope", "alibi"):
            raise ValueError(f"model_type {self.model_type!r}: the config has no position encoding the report "
                             "knows (RoPE, ALiBi, relative buckets or sinusoids, learned positions)")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max context {self.max_context} must be at least 1")


def drawn(mc: ModelConfig) -> Drawn:
    """What the report draws of ``mc`` (see the module docstring)."""
    dtype = default_dtype(mc)  # the config's torch_dtype, else bfloat16 (as `config` defaults)
    notes = list(mc.notes)
    if mc.kind == "alibi":
        return Drawn(mc.name, mc.model_type, dtype, mc.max_position_embeddings, None, mc.num_heads, mc.alibi_slopes(),
                         tuple(notes), mc)
    if mc.kind in ("relative", "learned"):  # no schedule, no slopes: the report audits it through `config`
        return Drawn(mc.name, mc.model_type, dtype, mc.max_position_embeddings, None, None, None, tuple(notes), mc)
    by_type = dict(mc.rope)
    key = "full_attention" if "full_attention" in by_type else next(iter(by_type))
    if len(by_type) > 1:
        notes.append(f"one RoPE schedule per layer type ({', '.join(by_type)}): the {key} layers' are drawn")
    return Drawn(mc.name, mc.model_type, dtype, mc.max_position_embeddings, by_type[key], None, None,
                 tuple(notes), mc, key)
