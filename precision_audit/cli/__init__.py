"""The ``precision-audit`` command line (being split into one module per command family)."""

from .auditors import emit, main, table

__all__ = ["emit", "main", "table"]
