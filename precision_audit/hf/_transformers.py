"""transformers, imported lazily: the install hint, the import that says how to install it, a quiet context.

transformers is an optional dependency (the ``[hf]`` extra); ``import
precision_audit`` (and ``import precision_audit.hf``) never imports it, and
neither does this module: each function that needs it calls
:func:`require_transformers` first.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["HF_INSTALL", "TransformersMissing", "require_transformers"]

HF_INSTALL = "pip install 'precision-audit[hf]'"


class TransformersMissing(ImportError):
    """transformers is not installed (it is the optional extra ``[hf]``)."""


def require_transformers() -> Any:
    """Import transformers, or raise :class:`TransformersMissing` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise TransformersMissing(f"this command needs transformers: {HF_INSTALL}") from None
    return transformers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence warnings and transformers' logger while building configs and modules."""
    tf_logging = None
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as tf_logging  # type: ignore[no-redef]
    level = tf_logging.get_verbosity() if tf_logging else None
    if tf_logging:
        tf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if tf_logging and level is not None:
            tf_logging.set_verbosity(level)
