"""Plain-text rendering shared by the library and the CLI: one cell, one aligned table.

>>> print(table([{"dtype": "bfloat16", "err": 0.00279}, {"dtype": "float16", "err": None}],
...             [("dtype", "dtype"), ("max err", "err")]))
   dtype  max err
--------  -------
bfloat16  0.00279
 float16        -
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Column", "cell", "table"]

Column = tuple[str, Any]  # (title, key or function of the row)


def cell(value: Any) -> str:
    """A value as a table shows it: ``-`` for None, floats with 4 significant digits (scientific beyond
    1e5 or below 1e-3), anything else as ``str``.

    >>> [cell(v) for v in (None, 0.0, 3.14159, 1.5e-7, 7)]
    ['-', '0', '3.142', '1.500e-07', '7']
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, Any]]) -> str:
    """Rows as an aligned text table; each column is (title, key or function of the row)."""
    cells = [[t for t, _ in columns]]
    for r in rows:
        cells.append([cell(k(r) if callable(k) else r.get(k)) for _, k in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
