"""Figure: position ids cast to a format (exact share, longest collision run).

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     plot_positions(pathlib.Path(d) / "p.png", max_log2=8).name
'p.png'
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..positions import predict_positions
from ._plotting import pyplot, save_figure

__all__ = ["POSITION_FORMATS", "plot_positions"]

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
