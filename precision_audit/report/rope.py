"""Figures for the RoPE auditor (matplotlib, Agg backend, imported lazily).

>>> import tempfile
>>> from precision_audit.report.rope import rope_figures
>>> with tempfile.TemporaryDirectory() as d:
...     [p.name for p in rope_figures(d, head_dim=16, max_length=2048)]
['rope_error_vs_length.png', 'rope_error_per_frequency.png', 'rope_attention_logit_error.png']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..attention import attention_errors
from ..rope import PRESETS, RopeRow, RopeSchedule, audit, cache_rounding_bound, preset
from ._plotting import ROPE_LABEL as _LABEL
from ._plotting import ROPE_STYLE as _STYLE
from ._plotting import length_label as _length_label
from ._plotting import pyplot, recipes_in as _recipes, save_figure
from .attention import plot_attention

__all__ = ["plot_attention", "plot_error_per_frequency", "plot_error_vs_length", "rope_figures"]


def plot_error_vs_length(rows: Sequence[RopeRow], path: str | Path) -> Path:
    """Max and mean rotation error vs context length per recipe (log-log), with the cache bound."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    r0 = rows[0]
    bound = cache_rounding_bound(r0.dtype)
    for ax, key, title in ((axes[0], "max_rotation_error", "max over positions and frequencies"),
                           (axes[1], "mean_rotation_error", "mean over positions and frequencies")):
        for name in _recipes(rows):
            rs = sorted((r for r in rows if r.recipe == name), key=lambda r: r.length)
            ys = [max(getattr(r, key), 1e-16) for r in rs]
            ax.plot([r.length for r in rs], ys, label=_LABEL.get(name, name), lw=1.8, ms=4,
                    **_STYLE.get(name, {}))
        ax.axhline(math.pi, color="k", ls=":", lw=1)
        ax.text(rows[0].length, math.pi * 1.25, "pi: phase lost", fontsize=8, va="bottom")
        ax.axhline(bound, color="gray", ls="--", lw=1)
        ax.text(rows[0].length, bound * 1.25, f"{r0.dtype} cache rounding bound ({bound:.2e} rad)", fontsize=8,
                va="bottom", color="dimgray")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(min(bound / 2, *(max(r.mean_rotation_error, 1e-16) / 2 for r in rows)), 20)
        lengths = sorted({r.length for r in rows})
        ax.set_xticks(lengths[::2] if len(lengths) > 8 else lengths)
        ax.set_xticklabels([_length_label(n) for n in (lengths[::2] if len(lengths) > 8 else lengths)])
        ax.set_xlabel("context length L (tokens, positions 0..L-1)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("rotation error |atan2(sin, cos) - m theta_i| (rad)")
    axes[0].legend(fontsize=8, loc="center right")
    fig.suptitle(f"RoPE rotation error per recipe, cache in {r0.dtype} "
                 f"(head_dim {r0.head_dim}, base {r0.base:g}, scaling {r0.scaling})")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_error_per_frequency(rows: Sequence[RopeRow], lengths: Sequence[int], path: str | Path) -> Path:
    """Max rotation error per frequency index i at the given lengths (one panel each, log y)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(lengths), figsize=(6 * len(lengths), 4.8), sharey=True, squeeze=False)
    r0 = rows[0]
    bound = cache_rounding_bound(r0.dtype)
    for ax, L in zip(axes[0], lengths):
        for name in _recipes(rows):
            (r,) = [r for r in rows if r.recipe == name and r.length == L]
            ys = [max(v, 1e-16) for v in r.rotation_error_profile]
            ax.plot(range(len(ys)), ys, label=_LABEL.get(name, name), lw=1.5, ms=3, **_STYLE.get(name, {}))
        ax.axhline(math.pi, color="k", ls=":", lw=1)
        ax.text(r0.rotary_dim // 2 - 1, math.pi * 1.2, "pi: phase lost", fontsize=8, ha="right")
        ax.axhline(bound, color="gray", ls="--", lw=1)
        ax.text(r0.rotary_dim // 2 - 1, bound * 0.8, f"{r0.dtype} cache rounding bound", fontsize=8,
                color="dimgray", ha="right", va="top")
        ax.set_yscale("log")
        ax.set_ylim(bound / 3, 12)
        ax.set_xlabel(f"frequency index i (theta_i = base^(-2i/{r0.rotary_dim}); high frequency on the left)")
        ax.set_title(f"context length {_length_label(L)}", fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("max rotation error over positions (rad)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.suptitle(f"RoPE rotation error per frequency, cache in {r0.dtype} "
                 f"(head_dim {r0.head_dim}, base {r0.base:g})")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save_figure(fig, path)


def rope_figures(
    out_dir: str | Path = "figures",
    *,
    dtype: str = "bfloat16",
    head_dim: int = 128,
    base: float = 10000.0,
    max_length: int = 2**20,
) -> list[Path]:
    """Audit the four presets at L = 256 .. max_length (powers of two) and write the three figures."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sched = RopeSchedule(head_dim=head_dim, base=base)
    recs = [preset(n, dtype) for n in PRESETS]
    lengths = [2**k for k in range(8, max_length.bit_length()) if 2**k <= max_length]
    rows = audit(sched, recs, lengths)
    per_freq = [n for n in (2**17, 2**20) if n in lengths] or [lengths[-1]]
    att = attention_errors(sched, recs, per_freq[0], pairs=8, shifts=1024)
    return [
        plot_error_vs_length(rows, out / "rope_error_vs_length.png"),
        plot_error_per_frequency(rows, per_freq, out / "rope_error_per_frequency.png"),
        plot_attention(att, out / "rope_attention_logit_error.png"),
    ]
