"""Access to third-party reference code for the tests (imported and run, never copied).

Private transformers functions (``_get_alibi_slopes``, ``ROPE_INIT_FUNCTIONS``) can move
or vanish between releases: a test that needs one skips with a reason instead of failing.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest


def private(module: str, name: str) -> Any:
    """``module.name``, or skip the calling test with a reason if either is missing.

    Import warnings (deprecations inside transformers) are silenced: the suite
    turns warnings into errors, and they are not ours.
    """
    pytest.importorskip("transformers")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        pytest.skip(f"transformers has no {module}.{name} in this version ({e}); reference unavailable")


def bloom() -> Any:
    """transformers' Bloom modelling module (skips the test when transformers is absent)."""
    pytest.importorskip("torch")
    return pytest.importorskip("transformers.models.bloom.modeling_bloom")


__all__ = ["bloom", "private"]
