"""Figures for the README (matplotlib, Agg backend, imported lazily).

>>> from precision_audit.report import FIGURES
>>> list(FIGURES)
['positions', 'rope', 'alibi', 'sinusoidal']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from ._plotting import pyplot, save_figure
from .positions import predict_positions

__all__ = ["FIGURES", "make_figures", "plot_positions"]

POSITION_FORMATS = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


def plot_positions(path: str | Path, max_log2: int = 21) -> Path:
    """Exact fraction and longest collision run of position ids vs context length.

    Uses the closed form (identical to the measured values; see the tests) on
    a dense grid of lengths 2**4 .. 2**max_log2.
    """
    plt = pyplot()
    lengths = np.unique(np.round(2 ** np.arange(4, max_log2 + 1e-9, 1 / 8)).astype(np.int64))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    for name in POSITION_FORMATS:
        rows = [predict_positions(int(n), name) for n in lengths]
        ax1.plot(lengths, [100 * r.exact_fraction for r in rows], label=name)
        ax2.plot(lengths, [r.max_run for r in rows], label=name)
    b = predict_positions(8192, "bfloat16")
    ax1.plot([8192], [100 * b.exact_fraction], "ko")
    ax1.annotate(f"bf16 @ 8K: {100 * b.exact_fraction:.1f} % exact\n(Baichuan: ~10 %)", (8192, 100 * b.exact_fraction),
                 xytext=(2**8.6, 0.025), fontsize=9, arrowprops={"arrowstyle": "->"})
    ax1.set(yscale="log", xlabel="context length L (tokens)", ylabel="positions 0..L-1 that stay exact (%)",
            title="Position ids cast to a format: exact share", ylim=(0.01, 150))
    ax2.set(xscale="log", yscale="log", xlabel="context length L (tokens)",
            ylabel="longest run of neighbours sharing one value",
            title="Longest collision group (overflowed positions: one group)")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right" if ax is ax1 else "upper left")
    return save_figure(fig, path, dpi=110)


def _rope(d: Path) -> object:
    from .report_rope import rope_figures

    return rope_figures(d)


def _alibi(d: Path) -> object:
    from .report_alibi import plot_alibi

    return plot_alibi(d)


def _sinusoidal(d: Path) -> object:
    from .report_sinusoidal import make_figures as sinusoidal_figures

    return sinusoidal_figures(d)


FIGURES: dict[str, Callable[[Path], object]] = {
    "positions": lambda d: plot_positions(d / "positions.png"),
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
