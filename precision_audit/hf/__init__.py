"""Audit the code a model really runs: live rotary modules, every rotary class of transformers, ALiBi builders.

The rope auditor models recipes; this package runs the real thing and holds
it against the same oracle.

* :mod:`~precision_audit.hf.modules`: :func:`audit_rope_module` (any module
  or callable that follows the rotary protocol, against the schedule its
  config declares, :func:`~precision_audit.config.schedule_from_config`) and
  :func:`match_recipe` (which rope preset the figures match).
* :mod:`~precision_audit.hf.classes`: :func:`build_rotary_module` and
  :func:`audit_model_type` (a model type's rotary class from its default
  config or a ``config.json``), :func:`default_model_config`.
* :mod:`~precision_audit.hf.scan`: :func:`scan`, every ``*RotaryEmbedding``
  class of the installed transformers, as built and after the cast, with a
  verdict per class (:func:`rotary_classes`, :func:`damage_threshold`).
* :mod:`~precision_audit.hf.alibi`: :func:`audit_alibi_builder`, Bloom's,
  Falcon's and MPT's ALiBi builders, side by side with the alibi auditor's
  recipe that matches them.

transformers is an optional dependency (``pip install 'precision-audit[hf]'``),
imported only when a function needs it; a live module needs torch only.

>>> s = schedule_from_config({"hidden_size": 4096, "num_attention_heads": 32,
...                           "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})
>>> s.head_dim, s.base
(128, 500000.0)
"""

from __future__ import annotations

# _Found, _forward_kind, _layer_types and _quiet are private; re-exported for the tests, as hf.py held them
from ..config import schedule_from_config
from ._transformers import HF_INSTALL, TransformersMissing, _quiet, require_transformers
from .alibi import ALIBI_BUILDERS, MAX_ALIBI_ELEMENTS, AlibiBuilderRow, audit_alibi_builder
from .classes import (
    MODEL_TYPES_HINT,
    _forward_kind,
    _layer_types,
    audit_model_type,
    build_model_type_module,
    build_rotary_module,
    default_model_config,
    find_rotary_classes,
    unknown_model_type,
)
from .modules import (DIAGNOSES, ModuleRow, RotationErrors, audit_rope_module, match_recipe, module_bottom_line,
                      named_schedule, reference_schedule, rotation_pass)
from .scan import VERDICTS, ScanRow, _Found, damage_threshold, rotary_classes, scan

__all__ = [
    "ALIBI_BUILDERS",
    "DIAGNOSES",
    "HF_INSTALL",
    "MAX_ALIBI_ELEMENTS",
    "VERDICTS",
    "AlibiBuilderRow",
    "ModuleRow",
    "RotationErrors",
    "ScanRow",
    "TransformersMissing",
    "audit_alibi_builder",
    "audit_model_type",
    "audit_rope_module",
    "build_model_type_module",
    "build_rotary_module",
    "default_model_config",
    "damage_threshold",
    "find_rotary_classes",
    "match_recipe",
    "module_bottom_line",
    "named_schedule",
    "reference_schedule",
    "require_transformers",
    "rotary_classes",
    "rotation_pass",
    "scan",
    "unknown_model_type",
    "schedule_from_config",
]
