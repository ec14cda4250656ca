"""Plain-text rendering shared by the library and the CLI: one cell, one aligned table.

>>> print(table([{"dtype": "bfloat16", "err": 0.00279}, {"dtype": "float16", "err": None}],
...             [("dtype", "dtype"), ("max err", "err")]))
   dtype  max err
--------  -------
bfloat16  0.00279
 float16        -
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .verdicts import human_length

__all__ = ["Column", "bottom_line_text", "bound_notes", "cell", "pair_table", "table", "worst_pair"]

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


def bottom_line_text(summaries: Sequence[Any], style: Callable[[str], str] | None = None) -> str:
    """The bottom line block: one sentence per code path and dtype (:class:`~precision_audit.bottomline.Summary`),
    grouped by the roles of their stacks; ``style`` marks the verdict words (e.g. colours them).

    >>> from precision_audit.bottomline import bottom_line
    >>> print(bottom_line_text(bottom_line([{"path": "fp32", "dtype": "bfloat16", "length": 8192, "verdict": "safe"}])))
    Bottom line (longest audited context that is safe, and the fix where one is known):
      float32 angles, cache in the dtype (fp32), bfloat16: safe to 8K
    """
    lines = ["Bottom line (longest audited context that is safe, and the fix where one is known):"]
    groups = _role_groups(summaries)
    for title, group in groups:
        if len(groups) > 1:
            lines.append(f" {title}:")
        for s in group:
            text = str(s)
            if style is not None:
                for word in ("safe", "degraded", "broken"):
                    text = text.replace(f" {word} ", f" {style(word)} ")
            lines.append("  " + text)
    return "\n".join(lines)


_ROLE_TITLES = {("train", "serve"): "trains and serves", ("serve",): "serving stacks", ("train",): "training stacks",
                (): "code paths"}


def _role_groups(summaries: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """Summaries grouped by the roles of their stack (trains and serves, serving, training, recipes), in that
    order; one group when all share their roles."""
    out: dict[tuple[str, ...], list[Any]] = {k: [] for k in _ROLE_TITLES}
    for s in summaries:
        out.setdefault(tuple(getattr(s, "roles", ())), []).append(s)
    return [(_ROLE_TITLES.get(k, ", ".join(k)), v) for k, v in out.items() if v]


def worst_pair(row: dict[str, Any]) -> float | None:
    """A table cell: the row's largest pairwise max rotation error over its distances (None: no pairs); a
    number, so a narrow terminal never cuts it (``--json`` names each distance's).

    >>> worst_pair({"pair_errors": [{"distance": 1, "max_rotation_error": 0.0054},
    ...                             {"distance": 4096, "max_rotation_error": 2.6}]})
    2.6
    """
    pairs = row.get("pair_errors") or []
    return max((p["max_rotation_error"] for p in pairs), default=None)


def bound_notes(rows: Sequence[dict[str, Any]]) -> str:
    """One footer line per path whose rows are upper bounds (CUDA fast math: a row's ``bound``), else ""."""
    return "".join(f"\n{name}: {label} (upper bounds)"
                   for name, label in dict.fromkeys((r["recipe"], r["bound"]) for r in rows if r.get("bound")))


def pair_table(rows: Sequence[dict[str, Any]], keys: Sequence[Column]) -> str:
    """The pairwise maxima as a text table: the ``keys`` columns, then one column per distance (D=...)
    that any row carries ('-': not below that row's length); empty when no row has pairs."""
    ds = sorted({p["distance"] for r in rows for p in r.get("pair_errors") or []})
    if not ds:
        return ""

    def cell(d: int) -> Callable[[dict[str, Any]], Any]:
        return lambda r: next((p["max_rotation_error"] for p in r["pair_errors"] if p["distance"] == d), None)

    return table(rows, [*keys, *((f"D={human_length(d)}", cell(d)) for d in ds)])
