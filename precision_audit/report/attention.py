"""Figure: RoPE attention-logit error and shift invariance vs offset.

Input rows come from :func:`precision_audit.rope.attention.attention_errors`.
:func:`plotted` and :func:`typical_logit` say what the figure shows, so
that the report's text quotes the same offsets and scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..rope.attention import AttentionRow
from ._plotting import ROPE_LABEL as _LABEL
from ._plotting import ROPE_STYLE as _STYLE
from ._plotting import fmt
from ._plotting import length_label as _length_label
from ._plotting import pyplot, save_figure, tokens_formatter
from ._plotting import recipes_in as _recipes

__all__ = ["plot_attention", "plotted", "typical_logit"]


def plotted(rows: Sequence[AttentionRow]) -> list[AttentionRow]:
    """The rows the figure draws: offset 0 has no place on a log axis, and a spread (and a fair max) needs
    at least two shifts (the farthest offset, ``length - 1``, has one).

    >>> from precision_audit.rope.attention import attention_errors
    >>> from precision_audit.rope import RopeSchedule, preset
    >>> rows = attention_errors(RopeSchedule(head_dim=8), preset("fp32", "bf16"), 1024, pairs=1)
    >>> max(r.distance for r in rows), max(r.distance for r in plotted(rows))
    (1023, 512)
    """
    return [r for r in rows if r.distance > 0 and r.shifts > 1]


def typical_logit(rows: Sequence[AttentionRow]) -> float:
    """The figure's "typical |logit|" line: the mean RMS of the exact logits over the plotted rows."""
    shown = plotted(rows) or list(rows)
    return sum(r.logit_rms for r in shown) / len(shown)


def plot_attention(rows: Sequence[AttentionRow], path: str | Path) -> Path:
    """Rotated-logit error and shift spread vs offset m - n per recipe (log-log; offset 0 omitted)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True)
    r0 = rows[0]
    shown, rms = plotted(rows) or list(rows), typical_logit(rows)
    for ax, key, title in ((axes[0], "max_logit_error", "max |logit - exact logit| over shifts and pairs"),
                           (axes[1], "score_spread", "invariance: max - min logit over shifts (exact: 0)")):
        for name in _recipes(rows):
            rs = sorted((r for r in shown if r.recipe == name), key=lambda r: r.distance)
            ax.plot([r.distance for r in rs], [max(getattr(r, key), 1e-16) for r in rs],
                    label=_LABEL.get(name, name), lw=1.5, ms=3, **_STYLE.get(name, {}))
        ax.axhline(rms, color="k", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylim(1e-2, 200)
        ax.xaxis.set_major_formatter(tokens_formatter())
        ax.set_xlabel("offset m - n (tokens)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    right = axes[1].secondary_yaxis("right")  # the line's name off the data (after the y scale is set)
    right.set_yticks([rms], labels=[f"typical |logit|\n(rms {fmt(rms)})"], fontsize=8)
    right.minorticks_off()
    axes[0].set_ylabel("logit error (q . k units, before 1/sqrt(d))")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    applied = f", q/k rotated in {r0.apply}" if r0.apply else ""
    fig.suptitle(f"Attention logits q_m . k_n with RoPE, cache in {r0.dtype}{applied}\ncontext "
                 f"{_length_label(r0.length)}, head_dim {r0.head_dim}, {r0.pairs} random N(0,1) (q, k) pairs, "
                 f"{r0.shifts} shifts per offset")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save_figure(fig, path)
