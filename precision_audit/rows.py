"""Result rows: every auditor returns frozen dataclasses that mix in :class:`Row`; ``to_dict()`` gives plain JSON
data (:func:`plain`: numpy scalars as Python numbers, non-finite floats as None)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

__all__ = ["Row", "plain"]


def plain(value: Any) -> Any:
    """Make a value JSON-safe: numpy scalars to Python, non-finite floats to None."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Row:
    """Mixin for frozen result dataclasses: ``to_dict()`` gives plain JSON data."""

    def to_dict(self) -> dict[str, Any]:
        return plain(dataclasses.asdict(self))  # type: ignore[call-overload]
