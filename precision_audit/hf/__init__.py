"""Audit the code a model really runs: live rotary modules, every rotary class of transformers, ALiBi builders.

The code is in :mod:`precision_audit.hf.modules`; transformers is imported
lazily (``import precision_audit.hf`` does not import it).
"""

from __future__ import annotations

from .modules import (
    ALIBI_BUILDERS,
    DIAGNOSES,
    HF_INSTALL,
    VERDICTS,
    AlibiBuilderRow,
    ModuleRow,
    ScanRow,
    TransformersMissing,
    _forward_kind,
    _Found,
    _layer_types,
    _quiet,
    audit_alibi_builder,
    audit_model_type,
    audit_rope_module,
    build_rotary_module,
    damage_threshold,
    find_rotary_classes,
    match_recipe,
    require_transformers,
    rotary_classes,
    scan,
    schedule_from_config,
)

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
