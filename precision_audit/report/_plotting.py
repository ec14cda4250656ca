"""matplotlib, imported only when a figure is drawn, on the Agg backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` (creating its folder), close it, return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    pyplot().close(fig)
    return out


ROPE_STYLE = {
    "lowp": dict(color="tab:red", marker="o"),
    "lowp-inv-freq": dict(color="tab:orange", marker="s"),
    "fp32": dict(color="tab:blue", marker="^"),
    "fp64": dict(color="tab:green", marker="D"),
}
ROPE_LABEL = {
    "lowp": "lowp (all stages in dtype)",
    "lowp-inv-freq": "lowp-inv-freq (inv_freq buffer in dtype)",
    "fp32": "fp32 (the fix: cache in dtype)",
    "fp64": "fp64 (float64 angle, cache in dtype)",
}


def recipes_in(rows: Sequence[Any]) -> list[str]:
    """The distinct ``recipe`` fields of result rows, in first-seen order."""
    return list(dict.fromkeys(r.recipe for r in rows))


def length_label(n: int) -> str:
    """256, 4K, 1M: a context length as axis text.

    >>> length_label(2**17), length_label(3000)
    ('128K', '3000')
    """
    for unit, size in (("M", 2**20), ("K", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
