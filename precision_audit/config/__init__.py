"""Model configs: read a Hugging Face ``config.json`` and audit the model it describes.

This package is the one reader of model configs (:mod:`~precision_audit.config.parse`;
:mod:`~precision_audit.config.audit` holds the verdicts and the audit).  :func:`load_config` parses
the JSON text only (nothing is imported or executed: no remote code, no
transformers) into a :class:`ModelConfig`: the position encoding (``kind``:
``"rope"`` or ``"alibi"``), the RoPE schedule of each attention layer type (a
:class:`~precision_audit.rope.schedules.RopeSchedule`, built by
:func:`~precision_audit.rope.schedules.schedule_from_rope_parameters`) or the ALiBi
head count, and the context length.  :func:`load_config_dict` takes the dict,
or a transformers config object (read by attribute, as transformers reads
it); :func:`schedule_from_config` gives the schedule of one rotary module's
config with the same rules.  :func:`audit_config` runs the
tool's own auditors on it: every RoPE preset (or ALiBi recipe) and the
position ids, per dtype and context length, each row with a verdict.

Verdicts (:func:`rope_verdict`, :func:`alibi_verdict`, :func:`positions_verdict`): the rules and their
calibration are stated once, in :mod:`precision_audit.verdicts` (:data:`~precision_audit.verdicts.RULES`).

>>> m = load_config_dict({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
...                       "max_position_embeddings": 4096}, name="llama-2-7b")
>>> m.kind, m.max_position_embeddings, m.rope[0][1].head_dim, m.rope[0][1].base
('rope', 4096, 128, 10000.0)
>>> rows = audit_config(m, lengths=[4096], dtypes=["bfloat16"], recipes=["lowp", "fp32"])
>>> [(r.component, r.recipe, r.verdict) for r in rows]
[('rope', 'lowp', 'broken'), ('rope', 'fp32', 'safe'), ('positions', 'position ids', 'broken')]
"""

from __future__ import annotations

from .audit import (
    DEFAULT_TOLERANCE,
    PHASE_LOST,
    VERDICT_RULES,
    VERDICTS,
    FALLBACK_CONTEXT,
    MATMUL_PRECISIONS,
    ConfigRow,
    alibi_verdict,
    audit_config,
    context_note,
    default_dtype,
    default_lengths,
    model_paths,
    model_stacks,
    positions_verdict,
    rope_verdict,
    stack_notes,
    training_differences,
    work_to_scan,
)
from .mrope import MROPE_STACKS, MropeAudit, mrope_audit
from .diffusion import DiffusionConfig, diffusion_config_dict, is_diffusers_config, load_diffusion_config
from .parse import (
    CONTEXT_KEYS,
    KINDS,
    ModelConfig,
    load_config,
    load_config_dict,
    load_model,
    rope_layer_types,
    schedule_from_config,
)

__all__ = [
    "CONTEXT_KEYS",
    "KINDS",
    "DEFAULT_TOLERANCE",
    "FALLBACK_CONTEXT",
    "MATMUL_PRECISIONS",
    "VERDICTS",
    "VERDICT_RULES",
    "ConfigRow",
    "DiffusionConfig",
    "MROPE_STACKS",
    "MropeAudit",
    "ModelConfig",
    "alibi_verdict",
    "audit_config",
    "context_note",
    "default_dtype",
    "default_lengths",
    "diffusion_config_dict",
    "is_diffusers_config",
    "load_config",
    "mrope_audit",
    "load_config_dict",
    "load_diffusion_config",
    "load_model",
    "model_paths",
    "model_stacks",
    "positions_verdict",
    "rope_layer_types",
    "rope_verdict",
    "schedule_from_config",
    "stack_notes",
    "training_differences",
]
