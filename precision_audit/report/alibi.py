"""Figures for the ALiBi auditor (matplotlib, Agg backend, imported lazily).

>>> import tempfile, pathlib
>>> sweep = alibi_sweep(4, ["bfloat16"], [256, 512])
>>> with tempfile.TemporaryDirectory() as d:
...     plot_alibi_distinct(sweep, pathlib.Path(d) / "a.png").name
'a.png'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy.typing as npt

from ..alibi import AlibiRow, audit_alibi, recipe_names
from ._plotting import OKABE_ITO, mark_lengths, pyplot, save_figure, tokens_formatter

__all__ = ["alibi_sweep", "plot_alibi", "plot_alibi_attention", "plot_alibi_distinct"]

Sweep = dict[tuple[str, str], list[AlibiRow]]

_STYLE = {  # recipe -> (colour, marker, linestyle)
    "lowp": (OKABE_ITO["vermillion"], "v", "-"),
    "cast-output": (OKABE_ITO["orange"], "o", "-"),
    "relative-cast": (OKABE_ITO["sky"], "s", "--"),
    "fp32": (OKABE_ITO["blue"], "^", "-"),
}
_LABEL = {
    "lowp": "lowp: slopes, distances, product in model dtype",
    "cast-output": "cast-output (Bloom): fp32 slope*j, cast to model dtype",
    "relative-cast": "relative-cast: fp32 slope*(i-j), cast to model dtype",
    "fp32": "fp32: bias stays float32",
}


def alibi_sweep(
    num_heads: int = 32,
    dtypes: Sequence[str] = ("bfloat16", "float16"),
    lengths: Sequence[int] = tuple(2**e for e in range(8, 21)),
    recipes: Sequence[str] | None = None,
    *,
    slopes: npt.ArrayLike | None = None,
) -> Sweep:
    """Audit every (dtype, recipe) over ``lengths``: one chunked pass each.

    >>> sweep = alibi_sweep(4, ["bfloat16"], [256, 512], ["fp32"])
    >>> [r.min_distinct_biases for r in sweep["bfloat16", "fp32"]]
    [256, 512]
    """
    recipes = list(recipes or recipe_names())
    return {(d, r): audit_alibi(num_heads, r, lengths, d, slopes=slopes) for d in dtypes for r in recipes}


def _sweep_axes(sweep: Sweep) -> tuple[list[str], list[str], int]:
    dtypes = list(dict.fromkeys(d for d, _ in sweep))
    recipes = list(dict.fromkeys(r for _, r in sweep))
    heads = next(iter(sweep.values()))[0].num_heads
    return dtypes, recipes, heads


def plot_alibi_distinct(sweep: Sweep, path: str | Path, *, marks: Sequence[tuple[int, str]] = ()) -> Path:
    """Distinct biases (worst head) against context length; one panel per model dtype, one line per recipe."""
    plt = pyplot()
    dtypes, recipes, num_heads = _sweep_axes(sweep)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(max(8, 6 * len(dtypes)), 4.8), sharey=True, squeeze=False)
    for ax, d in zip(axes[0], dtypes):
        lengths = [x.length for x in sweep[d, recipes[0]]]
        ax.plot(lengths, lengths, color="0.7", lw=5, alpha=0.5, label="all L biases distinct (y = L)")
        for r in recipes:
            c, m, ls = _STYLE.get(r, (OKABE_ITO["black"], "x", "-"))
            rows = sweep[d, r]
            ax.plot([x.length for x in rows], [x.min_distinct_biases for x in rows], color=c, marker=m, ls=ls,
                    ms=5, label=_LABEL.get(r, r))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.xaxis.set_major_formatter(tokens_formatter())
        ax.yaxis.set_major_formatter(tokens_formatter())
        ax.set_title(f"model dtype {d}")
        ax.set_xlabel("context length L (tokens)")
        ax.grid(True, which="major", alpha=0.3)
        mark_lengths(ax, marks)
    axes[0][0].set_ylabel("distinct biases among the L keys\n(worst head)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"ALiBi, {num_heads} heads: how many of the L key biases stay distinct "
                 "(cast-output and relative-cast store the same values)", fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_alibi_attention(sweep: Sweep, path: str | Path, *, marks: Sequence[tuple[int, str]] = ()) -> Path:
    """Largest attention-probability change from bias rounding alone against context length (log y)."""
    plt = pyplot()
    dtypes, recipes, num_heads = _sweep_axes(sweep)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(max(8, 6 * len(dtypes)), 4.8), sharey=True, squeeze=False)
    fmt = tokens_formatter()
    for ax, d in zip(axes[0], dtypes):
        for r in recipes:
            c, m, ls = _STYLE.get(r, (OKABE_ITO["black"], "x", "-"))
            rows = sweep[d, r]
            pts = [(x.length, x.max_prob_change) for x in rows if math.isfinite(x.max_prob_change)]
            ax.plot([a for a, _ in pts], [max(b, 1e-18) for _, b in pts], color=c, marker=m, ls=ls, ms=5,
                    label=_LABEL.get(r, r))
            undefined = [x.length for x in rows if not math.isfinite(x.max_prob_change)]
            if undefined:
                ax.axvline(undefined[0], color=c, lw=1, ls=":")
                ax.annotate(f"{r}: +inf bias, softmax NaN\nfrom L = {fmt(undefined[0], None)}",
                            (undefined[0], 2e-3), fontsize=8, color=c, ha="right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(fmt)
        ax.set_title(f"model dtype {d}")
        ax.set_xlabel("context length L (tokens)")
        ax.grid(True, which="major", alpha=0.3)
        mark_lengths(ax, marks)
    axes[0][0].set_ylabel("max |change in attention probability|\n(last query, equal content scores, worst head)")
    axes[0][0].legend(loc="center left", bbox_to_anchor=(0.02, 0.3), fontsize=8)
    fig.suptitle(f"ALiBi, {num_heads} heads: attention change caused by bias rounding alone "
                 "(key form: nearest keys collide)", fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_alibi(out_dir: str | Path = "figures", num_heads: int = 32, max_length: int = 2**20) -> list[Path]:
    """Audit bfloat16 and float16 at L = 256 .. max_length and draw both ALiBi figures; return the PNG paths."""
    lengths = [2**e for e in range(8, int(math.log2(max_length)) + 1)]
    sweep = alibi_sweep(num_heads, ("bfloat16", "float16"), lengths)
    out = Path(out_dir)
    return [plot_alibi_distinct(sweep, out / "alibi_distinct.png"),
            plot_alibi_attention(sweep, out / "alibi_attention.png")]
