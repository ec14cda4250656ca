"""Figures for the ALiBi auditor (matplotlib, Agg backend, imported lazily).

``python -m precision_audit.report.alibi`` writes ``figures/alibi_distinct.png``
and ``figures/alibi_attention.png``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..alibi import AlibiAudit, audit_alibi, recipe_names
from ._plotting import pyplot, save_figure

__all__ = ["alibi_sweep", "plot_alibi"]

_STYLE = {  # recipe -> (colour, marker, linestyle)
    "lowp": ("tab:red", "v", "-"),
    "cast-output": ("tab:orange", "o", "-"),
    "relative-cast": ("tab:blue", "s", "--"),
    "fp32": ("tab:green", "^", "-"),
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
) -> dict[tuple[str, str], list[AlibiAudit]]:
    """Audit every (dtype, recipe) over ``lengths``: one chunked pass each.

    >>> sweep = alibi_sweep(4, ["bfloat16"], [256, 512], ["fp32"])
    >>> [r.min_distinct_biases for r in sweep["bfloat16", "fp32"]]
    [256, 512]
    """
    recipes = list(recipes or recipe_names())
    return {(d, r): audit_alibi(lengths, num_heads, r, d) for d in dtypes for r in recipes}


def plot_alibi(out_dir: str | Path = "figures", num_heads: int = 32, max_length: int = 2**20) -> list[Path]:
    """Draw distinct biases and attention change against context length; return the PNG paths.

    Left/right panels: bfloat16 / float16 model dtype; one line per recipe.
    """
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    dtypes = ("bfloat16", "float16")
    lengths = [2**e for e in range(8, int(math.log2(max_length)) + 1)]
    sweep = alibi_sweep(num_heads, dtypes, lengths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def tokens(x: float, _pos: object) -> str:
        return f"{x / 2**20:g}M" if x >= 2**20 else f"{x / 2**10:g}K" if x >= 2**10 else f"{x:g}"

    paths = []
    # Figure 1: distinct biases (worst head) against L.
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, d in zip(axes, dtypes):
        ax.plot(lengths, lengths, color="0.7", lw=5, alpha=0.5, label="all L biases distinct (y = L)")
        for r, (c, m, ls) in _STYLE.items():
            rows = sweep[d, r]
            ax.plot([x.length for x in rows], [x.min_distinct_biases for x in rows], color=c, marker=m, ls=ls,
                    ms=5, label=_LABEL[r])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(tokens))
        ax.yaxis.set_major_formatter(FuncFormatter(tokens))
        ax.set_title(f"model dtype {d}")
        ax.set_xlabel("context length L (tokens)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("distinct biases among the L keys\n(worst head)")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"ALiBi, {num_heads} heads: how many of the L key biases stay distinct "
                 "(cast-output and relative-cast store the same values)", fontsize=11)
    fig.tight_layout()
    paths.append(save_figure(fig, out / "alibi_distinct.png"))

    # Figure 2: attention probability change against L.
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, d in zip(axes, dtypes):
        for r, (c, m, ls) in _STYLE.items():
            rows = sweep[d, r]
            pts = [(x.length, x.max_prob_change) for x in rows if math.isfinite(x.max_prob_change)]
            ax.plot([a for a, _ in pts], [b for _, b in pts], color=c, marker=m, ls=ls, ms=5,
                    label=_LABEL[r])
            undefined = [x.length for x in rows if not math.isfinite(x.max_prob_change)]
            if undefined:
                ax.axvline(undefined[0], color=c, lw=1, ls=":")
                ax.annotate(f"{r}: +inf bias, softmax NaN\nfrom L = {tokens(undefined[0], None)}",
                            (undefined[0], 2e-3), fontsize=8, color=c, ha="right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(tokens))
        ax.set_title(f"model dtype {d}")
        ax.set_xlabel("context length L (tokens)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("max |change in attention probability|\n(last query, equal content scores, worst head)")
    axes[0].legend(loc="center left", bbox_to_anchor=(0.02, 0.3), fontsize=8)
    fig.suptitle(f"ALiBi, {num_heads} heads: attention change caused by bias rounding alone "
                 "(key form: nearest keys collide)", fontsize=11)
    fig.tight_layout()
    paths.append(save_figure(fig, out / "alibi_attention.png"))
    return paths


if __name__ == "__main__":  # pragma: no cover
    for path in plot_alibi(Path(__file__).resolve().parents[2] / "figures"):
        print(path)
