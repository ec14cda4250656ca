"""matplotlib helpers shared by the figure modules: lazy Agg pyplot, deterministic
PNG writer, the colour-blind-safe palette and the RoPE recipe styles.

>>> OKABE_ITO["blue"], format_color("bfloat16") == OKABE_ITO["vermillion"]
('#0072B2', True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies
OKABE_ITO: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}

_FORMAT_COLOR = {
    "bfloat16": OKABE_ITO["vermillion"],
    "float16": OKABE_ITO["orange"],
    "float32": OKABE_ITO["blue"],
    "float64": OKABE_ITO["green"],
    "float8_e4m3fn": OKABE_ITO["purple"],
    "float8_e5m2": OKABE_ITO["sky"],
}
_SPARE = (OKABE_ITO["green"], OKABE_ITO["sky"], OKABE_ITO["purple"], OKABE_ITO["black"], OKABE_ITO["yellow"])

# a PNG carries no software version or date: two runs write the same bytes
PNG_METADATA: dict[str, Any] = {"Software": None}


VERDICT_COLOR: dict[str, str] = {"safe": OKABE_ITO["blue"], "degraded": OKABE_ITO["orange"],
                                 "broken": OKABE_ITO["vermillion"]}
"""A verdict's colour on the figures of largest safe inputs."""


def limit_bars(ax: Any, verdicts: Sequence[str], limits: Sequence[tuple[float | None, bool]],
               texts: Sequence[str], mark: float, floor: float, span: float) -> None:
    """Horizontal bars, one per row: its largest safe value (None: nothing is safe; drawn at ``floor``), coloured
    by its verdict, hatched where the value is a lower bound, annotated with ``texts``; a dotted line at
    ``mark`` (the input); a log x axis from ``floor`` to ``span`` times the largest value."""
    for i, (verdict, (value, at_least), text) in enumerate(zip(verdicts, limits, texts)):
        width = max(value or 0, floor)
        ax.barh(i, width, left=0, color=VERDICT_COLOR.get(verdict, "0.5"), hatch="//" if at_least else None,
                edgecolor="white" if at_least else None)
        ax.annotate(text, (width, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axvline(mark, color="0.3", ls=(0, (1, 2)), lw=1)
    ax.set_xscale("log")
    ax.set_xlim(floor, max([mark, *(v or 0 for v, _ in limits)]) * span)


def limit_legend(fig: Any, at_least: str, the_input: str) -> None:
    """The legend of :func:`limit_bars` under the figure: the verdict colours, ``at_least`` for the hatching,
    ``the_input`` for the dotted line."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=c, label=f"{v} at the input") for v, c in VERDICT_COLOR.items()]
    handles += [Patch(facecolor="0.6", hatch="//", edgecolor="white", label=at_least),
                Line2D([], [], color="0.3", ls=(0, (1, 2)), lw=1, label=the_input)]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=3, frameon=False)


def format_color(name: str) -> str:
    """A fixed Okabe-Ito colour per number format (formats without one share a spare, by name)."""
    if name in _FORMAT_COLOR:
        return _FORMAT_COLOR[name]
    return _SPARE[sum(map(ord, name)) % len(_SPARE)]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` as a PNG without metadata (creating its folder), close it, return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, format="png", metadata=PNG_METADATA)
    pyplot().close(fig)
    return out


ROPE_STYLE = {
    "lowp": dict(color=OKABE_ITO["vermillion"], marker="o"),
    "lowp-inv-freq": dict(color=OKABE_ITO["orange"], marker="s", ls="--"),
    "fp32": dict(color=OKABE_ITO["blue"], marker="^"),
    "fp64": dict(color=OKABE_ITO["green"], marker="D", ls="--"),
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


def fmt(x: float | None) -> str:
    """A number for a table cell: 4 significant digits, or - for undefined.

    >>> fmt(0.000123456), fmt(3.14159), fmt(None), fmt(float("nan"))
    ('1.235e-04', '3.142', '-', '-')
    """
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, int):
        return str(x)
    return f"{x:.3e}" if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5) else f"{x:.4g}"


def length_label(n: int) -> str:
    """256, 4K, 1M: a context length as axis text.

    >>> length_label(2**17), length_label(3000)
    ('128K', '3000')
    """
    for unit, size in (("M", 2**20), ("K", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def tokens_formatter() -> Any:
    """A matplotlib tick formatter that writes 4K, 1M for token counts."""
    from matplotlib.ticker import FuncFormatter

    def tokens(x: float, _pos: object) -> str:
        return f"{x / 2**20:g}M" if x >= 2**20 else f"{x / 2**10:g}K" if x >= 2**10 else f"{x:g}"

    return FuncFormatter(tokens)


def mark_lengths(ax: Any, marks: Sequence[tuple[int, str]]) -> None:
    """Vertical dotted lines at the given context lengths, labelled at the top of the panel."""
    for x, text in marks:
        ax.axvline(x, color="0.35", ls=(0, (1, 2)), lw=1)
        ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2), textcoords="offset points",
                    fontsize=8, color="0.25", ha="left", va="top", rotation=90)
