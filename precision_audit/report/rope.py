"""Figures for the RoPE auditor: rotation error vs length, per frequency, and a
position x frequency heatmap (matplotlib, Agg backend, imported lazily).

>>> import tempfile
>>> from precision_audit.report.rope import rope_figures
>>> with tempfile.TemporaryDirectory() as d:
...     [p.name for p in rope_figures(d, head_dim=16, max_length=2048)]
['rope_error_vs_length.png', 'rope_error_per_frequency.png', 'rope_attention_logit_error.png']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_int
from ..rows import Row
from ..rope.attention import attention_errors
from ..verdicts import NOTICED, PHASE_LOST
from ..rope import (
    PRESETS,
    Recipe,
    RopeRow,
    RopeSchedule,
    audit,
    cache_rounding_bound,
    check_rope_lengths,
    exact_angles,
    preset,
    run_recipe,
    wrap,
)
from ._plotting import ROPE_LABEL as _LABEL
from ._plotting import ROPE_STYLE as _STYLE
from ._plotting import fmt
from ._plotting import length_label as _length_label
from ._plotting import mark_lengths, pyplot, save_figure, tokens_formatter
from ._plotting import recipes_in as _recipes
from .attention import plot_attention

__all__ = [
    "ROTATION_RULE",
    "frequency_axis_label",
    "ErrorGrid",
    "error_grid",
    "plot_attention",
    "plot_error_heatmap",
    "plot_error_per_frequency",
    "plot_error_vs_length",
    "rope_figures",
    "rope_lengths",
    "verdict_thresholds",
]


def rope_lengths(max_length: int, extra: Sequence[int] = ()) -> list[int]:
    """Powers of two from 256 to ``max_length``, plus ``extra`` lengths (sorted, distinct).

    >>> rope_lengths(4096, [3000])
    [256, 512, 1024, 2048, 3000, 4096]
    """
    out = {2**k for k in range(8, int(max_length).bit_length()) if 2**k <= max_length}
    return sorted(out | {int(n) for n in extra} | ({int(max_length)} if max_length < 256 else set()))


def _angle_text(x: float) -> str:
    """pi/2 for math.pi / 2 (a fraction pi/k as text), else the number.

    >>> _angle_text(math.pi / 2), _angle_text(1.0)
    ('pi/2', '1')
    """
    k = math.pi / x
    return f"pi/{k:g}" if k == round(k) and k > 1 else "pi" if k == 1 else f"{x:g}"


def verdict_thresholds(bound: float) -> list[tuple[float, str, dict[str, Any]]]:
    """The lines a RoPE error plot draws: the cache rounding bound, and half of the verdict's pairwise thresholds
    (:mod:`precision_audit.verdicts`): two positions' relative rotation error is at most the sum of their absolute
    errors, so above pi/16 a pair may reach pi/8 (degraded) and above pi/4 pi/2 (broken); each as (value in rad,
    short label, line style).

    >>> [(round(v, 5), text) for v, text, _ in verdict_thresholds(0.00277)]
    [(0.00277, 'cache bound 0.00277'), (0.19635, 'pi/16: pairs may reach pi/8'), (0.7854, 'pi/4: pairs may reach pi/2')]
    """
    return [
        (bound, f"cache bound {fmt(bound)}", dict(color="gray", ls="--", lw=1)),
        (NOTICED / 2, f"{_angle_text(NOTICED / 2)}: pairs may reach {_angle_text(NOTICED)}",
         dict(color="0.15", ls="-.", lw=1)),
        (PHASE_LOST / 2, f"{_angle_text(PHASE_LOST / 2)}: pairs may reach {_angle_text(PHASE_LOST)}",
         dict(color="k", ls=":", lw=1.2)),
    ]


ROTATION_RULE = (
    "The verdict (`precision_audit.verdicts`) judges pairwise errors, what attention sees: broken when neighbouring "
    f"positions share a cos/sin row or two positions' relative rotation is {_angle_text(PHASE_LOST)} or more off; "
    f"degraded from {_angle_text(NOTICED)}; safe otherwise. These plots show absolute errors: a pair's error is at "
    "most twice the larger of its two, so the dotted lines mark where pairs may cross the thresholds."
)


def _draw_thresholds(ax: Any, bound: float, verdict: bool = True, label: bool = True) -> None:
    """Horizontal lines at :func:`verdict_thresholds` (only the bound when ``verdict`` is False), named on a
    right-hand axis (``label``) so that no name covers the data.  Call it after the y scale is set (setting
    the scale resets the names to numbers)."""
    lines = verdict_thresholds(bound) if verdict else verdict_thresholds(bound)[:1]
    for y, _, style in lines:
        ax.axhline(y, **style)
    if label:
        right = ax.secondary_yaxis("right")
        right.set_yticks([y for y, _, _ in lines], labels=[text for _, text, _ in lines], fontsize=8)
        right.minorticks_off()


def plot_error_vs_length(rows: Sequence[RopeRow], path: str | Path, *,
                         marks: Sequence[tuple[int, str]] = ()) -> Path:
    """Max and mean rotation error vs context length per recipe (log-log), with the cache bound."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    r0 = rows[0]
    bound = r0.cache_bound
    lengths = sorted({r.length for r in rows})
    ticks = [n for n in lengths if n & (n - 1) == 0] or lengths
    ticks = ticks[::2] if len(ticks) > 8 else ticks
    panels = (("max_rotation_error", "max over positions and frequencies (absolute; the verdict judges pairs)"),
              ("mean_rotation_error", "mean over positions and frequencies"))
    for ax, (key, title) in zip(axes, panels):
        for name in _recipes(rows):
            rs = sorted((r for r in rows if r.recipe == name), key=lambda r: r.length)
            ys = [max(getattr(r, key), 1e-16) for r in rs]
            ax.plot([r.length for r in rs], ys, label=_LABEL.get(name, name), lw=1.8, ms=4,
                    **_STYLE.get(name, {}))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(min(bound / 2, *(max(r.mean_rotation_error, 1e-16) / 2 for r in rows)), 20)
        # the verdict judges the max: its thresholds on that panel; the mean panel keeps the bound for scale
        _draw_thresholds(ax, bound, verdict=key == "max_rotation_error")
        ax.set_xticks(ticks)
        ax.set_xticklabels([_length_label(n) for n in ticks])
        ax.set_xlabel("context length L (tokens, positions 0..L-1)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        mark_lengths(ax, marks)
    axes[0].set_ylabel("rotation error |atan2(sin, cos) - m theta_i| (rad)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.suptitle(f"RoPE rotation error per recipe, cache in {r0.dtype} "
                 f"(head_dim {r0.head_dim}, rotary_dim {r0.rotary_dim}, base {r0.base:g}, scaling {r0.scaling})")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save_figure(fig, path)


def frequency_axis_label(scaling: str, rotary_dim: int) -> str:
    """The per-frequency axis label: ``theta_i = base^(-2i/d)`` only for an unscaled schedule.

    >>> frequency_axis_label("default", 128)
    'frequency index i (theta_i = base^(-2i/128); high frequency on the left)'
    >>> frequency_axis_label("llama3", 128)
    'frequency index i (llama3-scaled theta_i; high frequency on the left)'
    """
    if scaling in ("default", "none", ""):
        return f"frequency index i (theta_i = base^(-2i/{rotary_dim}); high frequency on the left)"
    return f"frequency index i ({scaling}-scaled theta_i; high frequency on the left)"  # as long as the other


def plot_error_per_frequency(rows: Sequence[RopeRow], lengths: Sequence[int], path: str | Path) -> Path:
    """Max rotation error per frequency index i at the given lengths (one panel each, log y)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(lengths), figsize=(max(8, 6.5 * len(lengths)), 4.8), sharey=True, squeeze=False)
    r0 = rows[0]
    bound = r0.cache_bound
    for ax, L in zip(axes[0], lengths):
        for name in _recipes(rows):
            (r,) = [r for r in rows if r.recipe == name and r.length == L]
            ys = [max(v, 1e-16) for v in r.rotation_error_profile]
            ax.plot(range(len(ys)), ys, label=_LABEL.get(name, name), lw=1.5, ms=3, **_STYLE.get(name, {}))
        ax.set_yscale("log")
        ax.set_ylim(bound / 3, 12)
        _draw_thresholds(ax, bound, label=ax is axes[0][-1])
        ax.set_xlabel(frequency_axis_label(r0.scaling, r0.rotary_dim))
        ax.set_title(f"context length {_length_label(L)}", fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("max rotation error over positions (rad)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 2 if len(lengths) == 1 else 4), fontsize=9)
    fig.suptitle(f"RoPE rotation error per frequency, cache in {r0.dtype}" + ("\n" if len(lengths) == 1 else " ")
                 + f"(head_dim {r0.head_dim}, base {r0.base:g}, scaling {r0.scaling})")
    fig.tight_layout(rect=(0, 0.07 if len(lengths) > 1 else 0.12, 1, 1))
    return save_figure(fig, path)


@dataclass(frozen=True)
class ErrorGrid(Row):
    """Max rotation error (rad) of one recipe per (position bin, frequency index).

    Bin ``b`` holds positions ``bin_edges[b] .. bin_edges[b+1]-1``; the max over
    all bins of a column equals the auditor's ``rotation_error_profile`` at
    ``length`` (same stages, each value made as the recipe says, same exact
    reference), so :attr:`worst` is the audit's ``max_rotation_error``.
    """

    recipe: str
    dtype: str
    length: int
    bin_edges: tuple[int, ...]
    max_rotation_error: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        if len(self.bin_edges) != len(self.max_rotation_error) + 1:
            raise ValueError(f"{len(self.bin_edges)} bin edges for {len(self.max_rotation_error)} bins")

    @property
    def worst(self) -> float:
        """The largest error in the grid: the recipe's max rotation error at ``length``."""
        return float(np.max(self.max_rotation_error))


def error_grid(schedule: RopeSchedule, recipe: Recipe, length: int, bins: int = 256,
               chunk: int | None = None) -> ErrorGrid:
    """Rotation error of ``recipe`` for positions 0..length-1 and every frequency, max-pooled into bins.

    The recipe runs as :func:`~precision_audit.rope.audit` runs it (:func:`~precision_audit.rope.run_recipe`:
    its inverse frequencies made as its ``how`` says, e.g. the formula evaluated in float32, not the exact
    value rounded once), so the grid agrees with the audit's row for the same recipe and length.

    >>> g = error_grid(RopeSchedule(head_dim=8), preset("fp64", "float64"), 100, bins=4)
    >>> g.bin_edges, max(max(r) for r in g.max_rotation_error) < 1e-12
    ((0, 25, 50, 75, 100), True)
    """
    (L,) = check_rope_lengths(length)
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins {bins!r} must be a positive integer")
    width = -(-L // min(bins, L))
    edges = list(range(0, L, width)) + [L]
    theta = schedule.inv_freq(schedule.frequency_key(L))  # the oracle's frequencies, as the audit's
    grid = np.zeros((len(edges) - 1, theta.size))
    per = 2**19 // max(theta.size, 1) if chunk is None else check_int(chunk, "chunk", minimum=1)
    step = max(width, per // width * width)
    for start in range(0, L, step):
        m = np.arange(start, min(L, start + step), dtype=np.float64)
        st = run_recipe(recipe, schedule, m, seq_len=L)  # the recipe's own inv_freq, how and attention factor
        with np.errstate(invalid="ignore", over="ignore"):
            rot = np.abs(wrap(np.arctan2(st["sin"], st["cos"]) - exact_angles(m, theta)))
        rot[~np.isfinite(rot)] = math.pi
        first = start // width
        idx = np.arange(0, m.size, width)
        grid[first : first + idx.size] = np.maximum.reduceat(rot, idx, axis=0)
    return ErrorGrid(recipe.name, recipe.cache, L, tuple(edges), tuple(tuple(r) for r in grid.tolist()))


def plot_error_heatmap(grids: Sequence[ErrorGrid], schedule: RopeSchedule, path: str | Path) -> Path:
    """One panel per recipe: max rotation error over position bins x frequency, ONE shared log colour scale.

    Each panel's title gives its worst error (:attr:`ErrorGrid.worst`, the audit's max rotation error, printed
    as the report's tables print it); the colour scale marks the verdict's thresholds (:func:`verdict_thresholds`).
    """
    plt = pyplot()
    from matplotlib.colors import LogNorm

    g0 = grids[0]
    bound = cache_rounding_bound(g0.dtype, schedule.cos_sin_scale)
    vmin, vmax = bound / 10, math.pi
    fig, axes = plt.subplots(1, len(grids), figsize=(6 * len(grids) + 1, 5.0), sharey=True, squeeze=False,
                             constrained_layout=True)
    image: Any = None
    for ax, g in zip(axes[0], grids):
        z = np.clip(np.asarray(g.max_rotation_error), vmin, vmax)
        image = ax.pcolormesh(np.arange(z.shape[1] + 1) - 0.5, np.asarray(g.bin_edges), z,
                              norm=LogNorm(vmin=vmin, vmax=vmax), cmap="viridis", shading="flat")
        ax.set_title(f"{_LABEL.get(g.recipe, g.recipe)}\nworst: {fmt(g.worst)} rad", fontsize=10)
        ax.set_xlabel("frequency index i (high frequency on the left)")
        ax.set_yticks([g.length * k // 8 for k in range(9)])
        ax.yaxis.set_major_formatter(tokens_formatter())
    axes[0][0].set_ylabel("position m (tokens)")
    cb = fig.colorbar(image, ax=axes[0].tolist(), shrink=0.9)
    cb.set_label(f"max rotation error in the bin (rad, log; clipped to [{vmin:.1e}, pi])")
    lines = verdict_thresholds(bound)
    for y, _, style in lines:
        cb.ax.axhline(y, color="white", ls=style["ls"], lw=1.5)
    left = cb.ax.secondary_yaxis("left")  # the verdict's thresholds, named on the left of the scale
    left.set_yticks([y for y, _, _ in lines], labels=[text for _, text, _ in lines], fontsize=8)
    left.minorticks_off()
    fig.suptitle(f"RoPE rotation error per position and frequency at L = {_length_label(g0.length)}, cache in "
                 f"{g0.dtype} (head_dim {schedule.head_dim}, base {schedule.base:g}, scaling {schedule.scaling})",
                 fontsize=10)
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
    lengths = rope_lengths(max_length)
    rows = audit(sched, recs, lengths, distances=())  # the figures show absolute errors only
    per_freq = [n for n in (2**17, 2**20) if n in lengths] or [lengths[-1]]
    att = attention_errors(sched, recs, per_freq[0], pairs=8, shifts=1024)
    return [
        plot_error_vs_length(rows, out / "rope_error_vs_length.png"),
        plot_error_per_frequency(rows, per_freq, out / "rope_error_per_frequency.png"),
        plot_attention(att, out / "rope_attention_logit_error.png"),
    ]
