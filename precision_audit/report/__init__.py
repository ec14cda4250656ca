"""The report: figures (one module per topic) and the report writer.

matplotlib is imported only when a figure is drawn (Agg backend).

>>> from precision_audit.report import FIGURES
>>> list(FIGURES)
['positions', 'rope', 'alibi', 'sinusoidal']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["FIGURES", "make_figures"]


def _positions(d: Path) -> object:
    from .positions import plot_positions

    return plot_positions(d / "positions.png")


def _rope(d: Path) -> object:
    from .rope import rope_figures

    return rope_figures(d)


def _alibi(d: Path) -> object:
    from .alibi import plot_alibi

    return plot_alibi(d)


def _sinusoidal(d: Path) -> object:
    from .sinusoidal import make_figures as sinusoidal_figures

    return sinusoidal_figures(d)


FIGURES: dict[str, Callable[[Path], object]] = {
    "positions": _positions,
    "rope": _rope,
    "alibi": _alibi,
    "sinusoidal": _sinusoidal,
}


def make_figures(outdir: str | Path = "figures", only: Iterable[str] | None = None) -> list[str]:
    """Write the figures (all, or those named in ``only``) into ``outdir``."""
    names = list(FIGURES) if only is None else list(only)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure {unknown[0]!r}; valid: {', '.join(FIGURES)}")
    d = Path(outdir)
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        FIGURES[name](d)
    return names
