"""Model configs: read a Hugging Face ``config.json`` and audit the model it describes.

The code is in :mod:`precision_audit.config.parse`.
"""

from __future__ import annotations

from .parse import (
    CONTEXT_KEYS,
    DEFAULT_TOLERANCE,
    PHASE_LOST,
    VERDICT_RULES,
    VERDICTS,
    ConfigRow,
    ModelConfig,
    alibi_verdict,
    audit_config,
    default_lengths,
    load_config,
    load_config_dict,
    positions_verdict,
    rope_verdict,
    work_to_scan,
)

__all__ = [
    "CONTEXT_KEYS",
    "DEFAULT_TOLERANCE",
    "VERDICTS",
    "VERDICT_RULES",
    "ConfigRow",
    "ModelConfig",
    "alibi_verdict",
    "audit_config",
    "default_lengths",
    "load_config",
    "load_config_dict",
    "positions_verdict",
    "rope_verdict",
]
