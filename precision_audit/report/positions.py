"""Figure: position ids 0..L-1 cast to a format (exact share, longest collision run).

>>> import tempfile, pathlib
>>> rows = position_rows(length_grid(16, 1024), ["bfloat16", "float32"])
>>> with tempfile.TemporaryDirectory() as d:
...     plot_positions(rows, pathlib.Path(d) / "p.png").name
'p.png'
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..positions import PositionRow, predict_positions
from ._plotting import format_color, mark_lengths, pyplot, save_figure

__all__ = ["POSITION_FORMATS", "collision_title", "length_grid", "plot_positions", "position_rows"]

POSITION_FORMATS = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")


def length_grid(lo: int, hi: int) -> list[int]:
    """Lengths from ``lo`` to ``hi`` spaced by 2**(1/8) (rounded, distinct), ``hi`` included.

    >>> length_grid(16, 32)
    [16, 17, 19, 21, 23, 25, 27, 29, 32]
    """
    a, b = np.log2(lo), np.log2(hi)
    grid = np.round(2 ** np.arange(a, b + 1e-9, 1 / 8)).astype(np.int64)
    return sorted({int(n) for n in grid} | {int(hi)})


def position_rows(lengths: Sequence[int], dtypes: Sequence[str]) -> list[PositionRow]:
    """The closed form (equal to the measured values; see the tests) per dtype, then length."""
    return [predict_positions(int(n), d) for d in dtypes for n in lengths]


def collision_title(rows: Sequence[PositionRow]) -> str:
    """The collision panel's title: it says that overflowed positions count as one group only where some do.

    >>> collision_title(position_rows([8192], ["bfloat16"]))
    'Longest collision group'
    >>> print(collision_title(position_rows([8192, 131072], ["float16"])))
    Longest collision group
    (overflowed, non-finite positions: one group): float16 from 65520
    """
    first: dict[str, int] = {}
    for r in rows:
        if r.non_finite and r.overflow_position is not None:
            first[r.dtype] = min(first.get(r.dtype, r.overflow_position), r.overflow_position)
    if not first:
        return "Longest collision group"
    where = ", ".join(f"{d} from {p}" for d, p in first.items())
    return "Longest collision group\n" + "\n".join(
        textwrap.wrap(f"(overflowed, non-finite positions: one group): {where}", 66))


def plot_positions(
    rows: Sequence[PositionRow], path: str | Path, *, marks: Sequence[tuple[int, str]] = (),
    baichuan: bool = True,
) -> Path:
    """Exact share and longest collision run of position ids vs context length, one line per format.

    ``marks`` draws labelled vertical lines (a model's context); ``baichuan``
    annotates the bfloat16 point at 8K when it is on the plot.
    """
    plt = pyplot()
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    styles = ("-", "--", "-.", ":", (0, (5, 1)))
    for i, name in enumerate(dtypes):
        rs = [r for r in rows if r.dtype == name]
        kw = dict(color=format_color(name), ls=styles[i % len(styles)], lw=1.8, label=name)
        ax1.plot([r.length for r in rs], [100 * r.exact_fraction for r in rs], **kw)
        ax2.plot([r.length for r in rs], [r.max_run for r in rs], **kw)
    lengths = [r.length for r in rows]
    b = [r for r in rows if r.dtype == "bfloat16" and r.length == 8192]
    if baichuan and b:
        ax1.plot([8192], [100 * b[0].exact_fraction], "ko")
        ax1.annotate(f"bf16 @ 8K: {100 * b[0].exact_fraction:.1f} % exact\n(Baichuan: ~10 %)",
                     (8192, 100 * b[0].exact_fraction), xytext=(2**8.6, 0.025), fontsize=9,
                     arrowprops={"arrowstyle": "->"})
    lo = min(100 * r.exact_fraction for r in rows)
    ax1.set(yscale="log", xlabel="context length L (tokens)", ylabel="positions 0..L-1 that stay exact (%)",
            title="Position ids cast to a format: exact share", ylim=(min(0.01, lo / 2), 150))
    ax2.set(yscale="log", xlabel="context length L (tokens)",
            ylabel="longest run of neighbours sharing one value (tokens)",
            title=collision_title(rows))
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(lengths), max(lengths))
        ax.grid(True, which="major", alpha=0.3)
        mark_lengths(ax, marks)
        ax.legend(fontsize=8, loc="lower left" if ax is ax1 else "upper left")
    return save_figure(fig, path, dpi=110)
